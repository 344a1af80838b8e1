"""``walras.operator.gang_repair``: a new leader finishes or undoes each gang its predecessor left
partially bound (an operator killed between a gang's commit member and its last bind).

The gangs are the ones a real round makes (``RoundLoop.run_round`` against the scripted API of
``test_operator_whole_gangs``); the kill is staged by putting them into the store as the watch
would show them then: the commit member bound, the others created but unbound. Oracle: the rule in
the module docstring, read off the requests sent: finished means the unbound members (and only
they) are bound to the nodes their pods name; undone means every member is deleted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.operator_fakes import GPU, FakeApi, make_loop

from walras.kube import writes
from walras.operator import gang_repair, loop

MEMBERS = ["gang-r1-0", "gang-r1-1", "gang-r1-2"]


def killed_at_commit(gpus: int = 8, bound: tuple[str, ...] = ("gang-r1-2",)) -> loop.RoundLoop:
    """A loop whose store holds the gang of a first round as a SIGKILL after the commit left it:
    ``bound`` on node n0, the other members pending with their planned node."""
    made = FakeApi()
    rounds = make_loop(made, gpus=gpus)
    asyncio.run(rounds.run_round())
    fresh = make_loop(FakeApi(), gpus=gpus)  # the restarted operator: nothing but the store
    for name in MEMBERS:
        manifest = made.manifests[name]
        spec = {**manifest["spec"], "nodeName": "n0" if name in bound else ""}
        phase = "Running" if name in bound else "Pending"
        fresh.store.upsert("pod", {**manifest, "spec": spec, "status": {"phase": phase}})
        (owner,) = manifest["metadata"]["ownerReferences"]
        fresh.cache.facts.owner[("ns", name)] = owner["uid"]
    return fresh


def repair(rounds: loop.RoundLoop, api: FakeApi) -> gang_repair.Repair:
    return asyncio.run(gang_repair.repair(rounds.store, api, rounds.cache.owns))  # type: ignore[arg-type]


def test_a_complete_gang_that_fits_is_finished_on_its_planned_nodes() -> None:
    rounds, api = killed_at_commit(), FakeApi()
    binds: list[tuple[str, str]] = []
    original = api.bind_pod

    async def bind(namespace: str, name: str, node: str) -> writes.Result:
        binds.append((name, node))
        return await original(namespace, name, node)

    api.bind_pod = bind  # type: ignore[method-assign]
    done = repair(rounds, api)
    assert sorted(binds) == [("gang-r1-0", "n0"), ("gang-r1-1", "n0")]
    assert api.names("delete") == []
    assert done.finished == [(("ns", "gang"), 1)] and done.undone == []


def test_a_bind_answered_409_counts_as_bound() -> None:
    rounds = killed_at_commit()
    conflict = writes.Result(writes.Outcome.CONFLICT, 409, "already bound", "Conflict")
    api = FakeApi(fail_bind={"gang-r1-0": conflict})
    done = repair(rounds, api)
    assert api.names("delete") == [] and done.finished == [(("ns", "gang"), 1)]


def test_a_failed_bind_undoes_the_whole_gang() -> None:
    rounds = killed_at_commit()
    gone = writes.Result(writes.Outcome.GONE, 404, "not found", "NotFound")
    api = FakeApi(fail_bind={"gang-r1-1": gone})
    done = repair(rounds, api)
    assert sorted(api.names("delete")) == MEMBERS
    assert done.undone == [(("ns", "gang"), 1)] and done.finished == []


def test_a_gang_missing_a_member_is_undone() -> None:
    rounds = killed_at_commit()
    rounds.store.delete("pod", "ns", "gang-r1-0")
    api = FakeApi()
    repair(rounds, api)
    assert api.names("bind") == []
    assert sorted(api.names("delete")) == ["gang-r1-1", "gang-r1-2"]


def test_a_gang_whose_node_is_cordoned_or_gone_is_undone() -> None:
    for change in ("cordon", "delete"):
        rounds = killed_at_commit()
        if change == "delete":
            rounds.store.delete("node", "", "n0")
        else:
            rounds.store.upsert(
                "node",
                {
                    "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "g"}},
                    "spec": {"unschedulable": True},
                    "status": {
                        "allocatable": {GPU: "8", "cpu": "32", "memory": "64Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                },
            )
        api = FakeApi()
        repair(rounds, api)
        assert api.names("bind") == [], change
        assert sorted(api.names("delete")) == MEMBERS, change


def test_a_gang_without_room_on_its_node_is_undone() -> None:
    # Three GPUs, one member bound; a foreign pod took a GPU meanwhile: two members need two.
    rounds = killed_at_commit(gpus=3)
    rounds.store.upsert("pod", foreign_pod(gpus=1))
    api = FakeApi()
    repair(rounds, api)
    assert api.names("bind") == []
    assert sorted(api.names("delete")) == MEMBERS


def test_whole_gangs_and_unbound_gangs_are_left_alone() -> None:
    for bound in (tuple(MEMBERS), ()):
        rounds, api = killed_at_commit(bound=bound), FakeApi()
        done = repair(rounds, api)
        assert api.calls == [], bound
        assert (done.finished, done.undone) == ([], [])


def test_pods_walras_does_not_own_are_never_touched() -> None:
    rounds = killed_at_commit()
    rounds.cache.facts.owner.clear()  # labelled walras.dev/job, but not controlled by that job
    api = FakeApi()
    repair(rounds, api)
    assert api.calls == []


def foreign_pod(gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "other", "name": "squatter", "uid": "u-squatter"},
        "spec": {
            "nodeName": "n0",
            "containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }

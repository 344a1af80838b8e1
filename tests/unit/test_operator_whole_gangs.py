"""The round loop's gang rules against a scripted API (no Kubernetes): a gang with a member that is
not created, or not bound, leaves nothing bound behind and holds its job out with the reason; a
one-pod gang that fits when it is created is created on its node (``spec.nodeName``, no bind),
one that does not fit yet is created unbound and bound once its node has room; a larger gang is
always created unbound and bound once all its members exist.

Oracle: the gang contract itself, read off the requests the loop sends: after a failed member, no
further bind of that gang, a delete for every member that was created or bound, a status with
``Admitted=False`` and the API server's message, one Event, and no create for the held job in the
next round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tests.unit.operator_fakes import FakeApi, gang_job, make_loop

from walras.kube import writes


def admitted(status: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Admitted")


def quota_exceeded(pod: str) -> writes.Result:
    return writes.Result(
        writes.Outcome.ERROR,
        403,
        f'pods "{pod}" is forbidden: exceeded quota: q, requested: pods=1',
        "Forbidden",
    )


def test_a_rejected_member_removes_the_gang_and_holds_the_job() -> None:
    api = FakeApi(fail_create={"gang-r1-1": quota_exceeded("gang-r1-1")})
    rounds = make_loop(api)
    asyncio.run(rounds.run_round())
    # The last member is the gang's commit point: with a member refused it is never sent.
    assert sorted(api.names("create")) == ["gang-r1-0", "gang-r1-1"]
    assert api.names("bind") == []
    assert api.names("delete") == ["gang-r1-0"]
    status = api.statuses["gang"]
    assert status["phase"] == "Pending" and status["fairShare"] == 0.0
    cond = admitted(status)
    assert (cond["status"], cond["reason"]) == ("False", "QuotaExceeded")
    assert "exceeded quota: q" in cond["message"] and "gang-r1-1" not in cond["message"]
    assert [r for r, _ in api.events] == ["QuotaExceeded"]
    # Held out: the next round creates nothing for it and posts no second Event.
    api.calls.clear()
    asyncio.run(rounds.run_round())
    assert api.names("create") == [] and api.names("bind") == []
    assert [r for r, _ in api.events] == ["QuotaExceeded"]


def test_a_refused_commit_member_leaves_nothing_bound() -> None:
    """The quota admits the first two members and refuses the last, which was to be created on
    its node: no member is ever bound, the two are removed, the job is held."""
    api = FakeApi(fail_create={"gang-r1-2": quota_exceeded("gang-r1-2")})
    rounds = make_loop(api)
    asyncio.run(rounds.run_round())
    assert api.names("create") == ["gang-r1-0", "gang-r1-1", "gang-r1-2"]
    assert api.created_on["gang-r1-2"] == "n0"  # tried on its node: refused, so not bound
    assert api.names("bind") == []
    assert sorted(api.names("delete")) == ["gang-r1-0", "gang-r1-1"]
    assert admitted(api.statuses["gang"])["reason"] == "QuotaExceeded"
    assert not rounds.cache.assumed


def test_a_gang_that_fits_is_committed_by_its_last_member_created_on_its_node() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    rounds.store.upsert("job", gang_job("solo", "u2", replicas=1))
    report = asyncio.run(rounds.run_round())
    members = [f"gang-r1-{i}" for i in range(3)]
    assert api.created_on == {
        "solo-r1-0": "n0",
        "gang-r1-2": "n0",
        "gang-r1-0": "",
        "gang-r1-1": "",
    }
    # Every other member exists before the last is created on the node; they are bound after.
    calls = [c for c in api.calls if c[1].startswith("gang")]
    assert calls[:2] == [("create", "gang-r1-0"), ("create", "gang-r1-1")]
    assert calls[2] == ("create", "gang-r1-2")
    assert sorted(calls[3:]) == [("bind", "gang-r1-0"), ("bind", "gang-r1-1")]
    assert api.names("delete") == []
    assert (report.creates, report.bound_at_create, report.binds) == (4, 2, 2)
    # Counted on the node until the watch shows them (a later gang must not be given them).
    assert sorted(rounds.cache.assumed) == [("ns", n) for n in [*members, "solo-r1-0"]]
    assert api.statuses["solo"]["phase"] == "Running"
    assert api.statuses["gang"]["phase"] == "Running"


def test_without_bind_at_create_every_pod_is_bound_through_the_subresource() -> None:
    api = FakeApi()
    rounds = make_loop(api, bind_at_create=False)
    report = asyncio.run(rounds.run_round())
    assert api.created_on == {f"gang-r1-{i}": "" for i in range(3)}
    assert sorted(api.names("bind")) == [f"gang-r1-{i}" for i in range(3)]
    assert (report.creates, report.bound_at_create, report.binds) == (3, 0, 3)


def test_a_gang_whose_node_is_still_busy_is_created_unbound_and_bound_later() -> None:
    """Two one-pod jobs on a node of 1 GPU take turns. When the second one's pod is created,
    the first one's pod is deleted but still on the node (the watch has not shown it gone): it
    is created unbound, and bound once that pod is gone."""
    api = FakeApi()
    clock = [1_000_000.0]
    rounds = make_loop(api, gpus=1, clock=clock, replicas=1)
    rounds.store.upsert("job", gang_job("other", "u2", replicas=1))
    asyncio.run(rounds.run_round())
    first = sorted(api.created_on)
    assert len(first) == 1 and set(api.created_on.values()) == {"n0"}
    for name in first:  # the watch delivers the first gang, bound and running
        manifest = api.manifests[name]
        rounds.store.upsert("pod", {**manifest, "status": {"phase": "Running"}})
        (owner,) = manifest["metadata"]["ownerReferences"]
        rounds.cache.facts.owner[("ns", name)] = owner["uid"]  # as the pod handler records it
    api.calls.clear()
    api.created_on.clear()
    clock[0] += rounds.config.round_seconds  # the first gang's slice has ended
    asyncio.run(rounds.run_round())
    assert sorted(api.names("delete")) == first
    second = sorted(api.created_on)
    assert len(second) == 1 and set(api.created_on.values()) == {""}
    assert api.names("bind") == []  # the node still holds the first job's pod
    for name in first:
        rounds.store.delete("pod", "ns", name)
    asyncio.run(rounds.bind_pending())
    assert sorted(api.names("bind")) == second


def test_an_unbindable_member_removes_the_whole_gang() -> None:
    gone = writes.Result(writes.Outcome.GONE, 404, 'pods "gang-r1-2" not found', "NotFound")
    # The gang's pods exist already, unbound (a predecessor created them): they are bound
    # through the binding subresource, as a gang that did not fit at its creation is.
    exists = writes.Result(writes.Outcome.EXISTS, 409, "already exists", "AlreadyExists")
    api = FakeApi(
        fail_create={f"gang-r1-{i}": exists for i in range(3)}, fail_bind={"gang-r1-2": gone}
    )
    rounds = make_loop(api)
    asyncio.run(rounds.run_round())
    assert sorted(api.names("bind")) == ["gang-r1-0", "gang-r1-1", "gang-r1-2"]
    # The members bound before the failure are deleted too: no partial gang survives.
    assert sorted(api.names("delete")) == ["gang-r1-0", "gang-r1-1", "gang-r1-2"]
    cond = admitted(api.statuses["gang"])
    assert (cond["status"], cond["reason"]) == ("False", "BindFailed")
    assert "binding pod gang-r1-2 to n0" in cond["message"]
    assert not rounds.cache.assumed


def test_a_member_not_bound_after_the_commit_removes_the_gang_with_its_commit_member() -> None:
    gone = writes.Result(writes.Outcome.GONE, 404, 'pods "gang-r1-0" not found', "NotFound")
    api = FakeApi(fail_bind={"gang-r1-0": gone})
    rounds = make_loop(api)
    asyncio.run(rounds.run_round())
    assert api.created_on["gang-r1-2"] == "n0"
    assert sorted(api.names("bind")) == ["gang-r1-0", "gang-r1-1"]
    # The member created on its node is deleted with the others: no partial gang survives.
    assert sorted(api.names("delete")) == ["gang-r1-0", "gang-r1-1", "gang-r1-2"]
    cond = admitted(api.statuses["gang"])
    assert (cond["status"], cond["reason"]) == ("False", "BindFailed")
    assert not rounds.cache.assumed

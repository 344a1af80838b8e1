"""Lost nodes (``walras.core.lost_nodes``): a job whose pods ran on a node that is gone gets a
``Preempted`` condition with reason ``NodeLost`` and a Warning Event, both naming the node.

Oracle: the module docstring's rule, on hand-made pods; then through a real round loop against
the scripted API of ``test_operator_whole_gangs`` (the gang runs on n0, n0 is deleted).
"""

from __future__ import annotations

import asyncio

from tests.unit.operator_fakes import GPU, FakeApi, make_loop

from walras.core import lost_nodes, model


def pod(job: str, node: str, phase: str = "Running", name: str = "") -> model.PodInfo:
    return model.PodInfo(
        namespace="ns",
        name=name or f"{job}-{node}",
        uid=f"u-{job}-{node}",
        job=job,
        replica=0,
        node=node,
        planned_node=node,
        group="g",
        phase=phase,
        terminating=False,
        round=1,
        requests={GPU: 1.0},
    )


def test_a_job_whose_node_vanished_is_reported_once_with_that_node() -> None:
    watch = lost_nodes.LostNodes()
    pods = [pod("a", "n0"), pod("a", "n1"), pod("b", "n1"), pod("c", "n2", phase="Succeeded")]
    assert watch.observe(["n0", "n1", "n2"], pods) == {}
    # n0 and n2 are deleted; the pod GC removed a's pod on n0 already.
    assert watch.observe(["n1"], [p for p in pods if p.node != "n0"]) == {("ns", "a"): ["n0"]}
    # c's pod had finished on n2: not affected. The next round reports nothing again.
    assert watch.observe(["n1"], [p for p in pods if p.node == "n1"]) == {}


def test_a_pod_still_bound_to_a_missing_node_counts_from_the_first_round() -> None:
    watch = lost_nodes.LostNodes()  # an operator started after the node went
    assert watch.observe(["n1"], [pod("a", "n0"), pod("a", "n1")]) == {("ns", "a"): ["n0"]}


def test_mark_replaces_the_preempted_condition_and_names_the_nodes() -> None:
    core = {"conditions": [{"type": "Preempted", "status": "False", "reason": "SliceEnded"}]}
    marked = lost_nodes.mark(core, ["n7", "n3"], 4)
    (preempted,) = [c for c in marked["conditions"] if c["type"] == "Preempted"]
    assert (preempted["status"], preempted["reason"]) == ("True", "NodeLost")
    assert "nodes n3, n7" in preempted["message"] and preempted["observedGeneration"] == 4


def test_the_round_loop_tells_the_job_which_node_was_lost() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    node = {
        "metadata": {"name": "n1", "labels": {"walras.dev/gpu-type": "g"}},
        "status": {
            "allocatable": {GPU: "8", "cpu": "32", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    asyncio.run(rounds.run_round())
    # The watch shows the gang bound and running where it was created or bound.
    for name, manifest in api.manifests.items():
        spec = {**manifest["spec"], "nodeName": "n0"}
        rounds.store.upsert("pod", {**manifest, "spec": spec, "status": {"phase": "Running"}})
        (owner,) = manifest["metadata"]["ownerReferences"]
        rounds.cache.facts.owner[("ns", name)] = owner["uid"]
    asyncio.run(rounds.run_round())
    assert [r for r, _ in api.events] == []
    rounds.store.upsert("node", node)
    rounds.store.delete("node", "", "n0")
    asyncio.run(rounds.run_round())
    lost = [(r, m) for r, m in api.events if r == "NodeLost"]
    assert len(lost) == 1 and "node n0" in lost[0][1]
    conditions = {c["type"]: c for c in api.statuses["gang"]["conditions"]}
    assert conditions["Preempted"]["reason"] == "NodeLost"
    assert "node n0" in conditions["Preempted"]["message"]

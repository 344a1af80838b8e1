"""A mirror's Succeeded pods are not its gang: they do not finish it (``walras.core.completion``:
every pod of a FungibleJob's gang succeeded finishes it, not a mirror's, whose workload says when
it is done) and do not hold its place (``walras.core.realise``: the gang of the indexes left is
placed afresh, and the Succeeded pod is not deleted as a preempted replica).

The case: an Indexed Job of two indexes; index 0 exited 0 in an earlier slice (its pod stays,
Succeeded, as the Job controller leaves it), so the gang is index 1 alone (one replica) and its
pod was just deleted at a slice end. One succeeded pod and a gang of one: a FungibleJob of its own
in that state is done; the mirror is not (index 1 has work left).
"""

from __future__ import annotations

from typing import Any

from walras.core import completion, crd, cycle, history, policies
from walras.core.adapters import base, batch_job, mirror
from walras.core.snapshot import Store

JOB = batch_job.BatchJob()


def _job() -> dict[str, Any]:
    container = {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "a", "namespace": "ns", "uid": "a-uid", "annotations": {}},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
        "status": {"completedIndexes": "0"},
    }


def _store(own: bool) -> Store:
    obj = _job()
    body = mirror.manifest(JOB, obj, mirror.spec_of(JOB.gang(obj), {base.ANN_THROUGHPUT: "g=1"}))
    assert body["spec"]["replicas"] == 1  # the index left
    if own:
        del body["spec"]["workloadRef"]
    body["metadata"]["uid"] = "mirror-uid"
    store = Store()
    store.upsert("job", body)
    store.upsert(
        "pod",
        {
            "metadata": {
                "name": "a-0-x",
                "namespace": "ns",
                "uid": "p0",
                "labels": {crd.LABEL_JOB: "a", batch_job.COMPLETION_INDEX: "0"},
                "annotations": {
                    base.ANN_WORKLOAD_KIND: "Job",
                    base.ANN_NODES: "n0,n0",
                    batch_job.ANN_INDEXES: "0,1",
                },
            },
            "spec": {"nodeName": "n0", "containers": []},
            "status": {"phase": "Succeeded"},
        },
    )
    return store


def _finished(own: bool) -> dict[tuple[str, str], completion.Completion]:
    snap = _store(own).freeze(now=0.0)
    return completion.completions(snap, {j.key: history.History() for j in snap.jobs})


def test_a_fungiblejob_whose_gang_all_succeeded_is_done() -> None:
    assert _finished(own=True)[("ns", "a")].phase == crd.PHASE_SUCCEEDED


def test_a_mirror_is_not_done_by_the_pods_of_indexes_that_succeeded_earlier() -> None:
    assert _finished(own=False) == {}


def test_the_gang_of_the_indexes_left_is_placed_past_the_succeeded_pod() -> None:
    store = _store(own=False)
    store.upsert("pool", {"metadata": {"name": "g", "generation": 1}, "spec": {"gpuType": "g"}})
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "g"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "4", "cpu": "8", "memory": "64Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    plan = cycle.plan(
        cycle.CycleState(),
        policies.create("max-min-fairness"),
        store.freeze(now=0.0),
        now=0.0,
        round_no=5,
    )
    # One pod for the one index left, created afresh; the Succeeded pod is nobody's to delete.
    assert [(c.job.name, c.replica, c.node) for c in plan.realisation.creates] == [("a", 0, "n0")]
    assert plan.realisation.deletes == ()

"""When a job is finished (``walras.core.completion``): every pod of a FungibleJob's gang
succeeded finishes it, but not a mirror's, whose workload says when it is done.

The case: an Indexed Job of two indexes; index 0 exited 0 in an earlier slice (its pod stays,
Succeeded, as the Job controller leaves it), so the gang is index 1 alone (one replica) and its
pod was just deleted at a slice end. One succeeded pod and a gang of one: a FungibleJob of its own
in that state is done; the mirror is not (index 1 has work left).
"""

from __future__ import annotations

from typing import Any

from walras.core import completion, crd, history
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


def _finished(own: bool) -> dict[tuple[str, str], completion.Completion]:
    obj = _job()
    body = mirror.manifest(JOB, obj, mirror.spec_of(JOB.gang(obj), {}))
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
    snap = store.freeze(now=0.0)
    return completion.completions(snap, {j.key: history.History() for j in snap.jobs})


def test_a_fungiblejob_whose_gang_all_succeeded_is_done() -> None:
    assert _finished(own=True)[("ns", "a")].phase == crd.PHASE_SUCCEEDED


def test_a_mirror_is_not_done_by_the_pods_of_indexes_that_succeeded_earlier() -> None:
    assert _finished(own=False) == {}

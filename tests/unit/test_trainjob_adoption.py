"""The operator's adoption step with a TrainJob: one Walras started (its ``spec.labels`` carry the
mirror's uid) is left running round after round; one running that Walras did not start is
suspended. A TrainJob has no pod template, so the mark of a start is in ``spec.labels``."""

from __future__ import annotations

import asyncio
from typing import Any

from test_operator_adoption import AdoptionApi, scratch

from walras.core import admission, realise
from walras.core.adapters import base, trainjob
from walras.operator import adoption, cache

TRAINJOB = trainjob.TrainJob()
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/llm"


def a_trainjob(*, suspend: bool, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "llm",
            "namespace": "ns",
            "uid": "llm-uid",
            "generation": 1,
            "labels": {base.LABEL_MANAGED: "true"},
            "annotations": {base.ANN_THROUGHPUT: "g=1"},
        },
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "suspend": suspend,
            "labels": labels,
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}},
        },
    }


def rounds(obj: dict[str, Any], n: int) -> AdoptionApi:
    api = AdoptionApi()
    cluster = cache.ClusterCache()
    cluster.store.upsert(
        "pool", {"metadata": {"name": "g"}, "spec": {"gpuType": "g", "nodeSelector": {}}}
    )
    adopt = adoption.Adoption(api, cluster, admission.Admission(lambda: 0.0))  # type: ignore[arg-type]
    assert adopt.seen(TRAINJOB, {"type": "ADDED", "object": obj})
    for _ in range(n):
        asyncio.run(adopt.act(realise.Realisation((), (), {}), scratch()))
    return api


def test_a_trainjob_walras_started_is_not_suspended_again() -> None:
    started = a_trainjob(suspend=False, labels={base.LABEL_MIRROR_UID: "m-uid", "team": "a"})
    api = rounds(started, 3)
    # (The scripted Api feeds no mirror back to the cache, so each round creates it again.)
    assert {c["spec"]["workloadRef"]["kind"] for c in api.created} == {"TrainJob"}
    assert api.patches == []


def test_a_trainjob_running_that_walras_did_not_start_is_suspended() -> None:
    api = rounds(a_trainjob(suspend=False, labels={"team": "a"}), 1)
    assert api.patches == [(PATH, {"spec": {"suspend": True}})]

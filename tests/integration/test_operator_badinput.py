"""Scenario 3: bad input. The schema rejects invalid CRs at admission; impossible jobs get a
condition naming the field while every other job keeps being scheduled; the operator never
crashes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    BASE,
    OperatorProcess,
    condition,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow

GOOD = job_manifest("good", {"v100": 2.0, "k80": 1.0}, replicas=2)


def _invalid_jobs() -> list[tuple[str, dict[str, Any]]]:
    negative = copy.deepcopy(GOOD)
    negative["spec"]["throughput"] = {"v100": -1.0}
    zero_replicas = copy.deepcopy(GOOD)
    zero_replicas["spec"]["replicas"] = 0
    unknown_kind = copy.deepcopy(GOOD)
    unknown_kind["spec"]["utility"] = {"kind": "quadratic"}
    no_template = copy.deepcopy(GOOD)
    del no_template["spec"]["template"]
    no_containers = copy.deepcopy(GOOD)
    no_containers["spec"]["template"] = {"spec": {"containers": []}}
    zero_weight = copy.deepcopy(GOOD)
    zero_weight["spec"]["utility"] = {"kind": "log", "weight": 0}
    return [
        ("negative throughput", negative),
        ("replicas < 1", zero_replicas),
        ("unknown utility kind", unknown_kind),
        ("missing template", no_template),
        ("template without containers", no_containers),
        ("weight 0", zero_weight),
    ]


@pytest.fixture(scope="module")
def setup(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path_factory: Any
) -> Iterator[tuple[str, OperatorProcess]]:
    install(kube)
    create_nodes(kube, "v100", "v100", 2, 4)
    create_nodes(kube, "k80", "k80", 1, 4)
    create_pool(kube, pool_manifest("v100", "v100"))
    create_pool(kube, pool_manifest("k80", "k80"))
    namespace = devcluster.unique_name("t-bad")
    devcluster.create_namespace(kube, namespace)
    op = start_operator(control_plane, tmp_path_factory.mktemp("operator"), round_seconds=2.0)
    try:
        yield namespace, op
    finally:
        op.terminate()
        devcluster.reset(kube)


@pytest.mark.parametrize("case", [c for c, _ in _invalid_jobs()])
def test_schema_rejects_invalid_jobs(
    kube: Any, setup: tuple[str, OperatorProcess], case: str
) -> None:
    namespace, _ = setup
    manifest = dict(_invalid_jobs())[case]
    manifest["metadata"]["name"] = "invalid"
    with pytest.raises(ApiException) as info:
        create_job(kube, namespace, manifest)
    assert info.value.status == 422, info.value.body


def test_schema_rejects_invalid_pool(kube: Any, setup: tuple[str, OperatorProcess]) -> None:
    bad = pool_manifest("bad", "v100")
    bad["spec"]["capacityOverride"] = -3
    with pytest.raises(ApiException) as info:
        create_pool(kube, bad)
    assert info.value.status == 422
    missing = pool_manifest("bad", "v100")
    del missing["spec"]["gpuType"]
    with pytest.raises(ApiException) as info:
        devcluster.request(kube, "POST", f"{BASE}/resourcepools", body=missing)
    assert info.value.status == 422


IMPOSSIBLE = {
    # name: (manifest, condition reason, field named in the message)
    "only-a100": (
        job_manifest("only-a100", {"a100": 5.0}),
        "NoPoolForThroughput",
        "spec.throughput",
    ),
    "huge-gang": (
        job_manifest("huge-gang", {"v100": 1.0, "k80": 1.0}, replicas=40),
        "GangTooLarge",
        "spec.replicas",
    ),
    "no-target": (
        job_manifest("no-target", {"v100": 1.0}, utility={"kind": "targetPriority"}),
        "InvalidUtility",
        "spec.utility.target",
    ),
    "selector": (
        job_manifest("selector", {"v100": 1.0}, node_selector={"zone": "mars"}),
        "NoMatchingNodes",
        "spec.template.spec.nodeSelector",
    ),
}


def test_impossible_jobs_get_conditions_and_never_block_others(
    kube: Any, setup: tuple[str, OperatorProcess]
) -> None:
    namespace, op = setup
    for manifest, _, _ in IMPOSSIBLE.values():
        create_job(kube, namespace, manifest)
    create_job(kube, namespace, GOOD)
    create_job(kube, namespace, job_manifest("other", {"k80": 1.0}, replicas=3))

    def flagged() -> bool:
        for name, (_, reason, field) in IMPOSSIBLE.items():
            admitted = condition(get_job(kube, namespace, name), "Admitted")
            assert admitted is not None, name
            assert (admitted["status"], admitted["reason"]) == ("False", reason), admitted
            assert field in admitted["message"]
            assert admitted["observedGeneration"] == 1
        return True

    wait_for(flagged, 60, "conditions on the impossible jobs")

    def scheduled() -> bool:
        for name, replicas in (("good", 2), ("other", 3)):
            job = get_job(kube, namespace, name)
            assert (job.get("status") or {}).get("phase") == "Running", job.get("status")
            pods = [p for p in list_pods(kube, namespace, name) if p["spec"].get("nodeName")]
            assert len(pods) == replicas
        return True

    wait_for(scheduled, 60, "the valid jobs to run")
    for name in IMPOSSIBLE:
        assert list_pods(kube, namespace, name) == []
    # A Warning Event names the problem (posted once, deduplicated).
    events = devcluster.request(kube, "GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    reasons = [(e["involvedObject"]["name"], e["reason"]) for e in events]
    assert ("only-a100", "NoPoolForThroughput") in reasons
    assert reasons.count(("only-a100", "NoPoolForThroughput")) == 1
    rounds = op.rounds()
    wait_for(lambda: op.rounds() >= rounds + 2, 30, "more rounds")
    assert op.alive()

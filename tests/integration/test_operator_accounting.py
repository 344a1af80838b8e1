"""On the local control plane: accounting, filters, empty pools.

One cluster for the module, set up before the operator starts (so its first round sees it all):

- pool ``v100``: ``v100-0``, ``v100-1`` (4 GPUs, 32 cpu), ``v100-small`` (4 GPUs, 2 cpu) and
  ``v100-taint`` (4 GPUs, tainted ``dedicated=infer:NoSchedule``);
- pool ``t4``: ``t4-0`` (2 GPUs, tainted the same way);
- pool ``p100``: no node at all (empty);
- on every node a DaemonSet-like foreign pod requesting ephemeral-storage, hugepages-2Mi and
  1 cpu (and no GPU).

Oracles are the API server's objects: where pods are bound, the pools' and jobs' status, and
per node the requests of every bound pod against its allocatable (``resource_helpers``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from operator_helpers import (
    OperatorProcess,
    condition,
    create_job,
    create_pool,
    get_job,
    get_pool,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)
from resource_helpers import daemon_pod, extended_node, overcommitted

from walras.testing import devcluster

pytestmark = pytest.mark.slow

ZONE = "walras.test/zone"
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
TOLERATE = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
NODES = {
    # name: (pool, gpus, cpu, tainted)
    "v100-0": ("v100", 4, "32", False),
    "v100-1": ("v100", 4, "32", False),
    "v100-small": ("v100", 4, "2", False),
    "v100-taint": ("v100", 4, "32", True),
    "t4-0": ("t4", 2, "32", True),
}


def _job(name: str, throughput: dict[str, float], replicas: int = 1, **pod: Any) -> dict[str, Any]:
    cpu = pod.pop("cpu", None)
    manifest = job_manifest(name, throughput, replicas=replicas, gpus=1, cpu=cpu)
    manifest["spec"]["template"]["spec"].update(pod)
    return manifest


AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["v100-1"]}]}
            ]
        }
    }
}
RUNNING = {
    # name: (manifest, nodes it may land on)
    "plain": (_job("plain", {"v100": 1.0}, 3, cpu="1"), {"v100-0", "v100-1", "v100-small"}),
    "hungry": (_job("hungry", {"v100": 1.0}, 2, cpu="8"), {"v100-0", "v100-1"}),
    "tolerant": (
        _job("tolerant", {"v100": 1.0}, tolerations=TOLERATE, nodeSelector={ZONE: "v100-taint"}),
        {"v100-taint"},
    ),
    "affine": (_job("affine", {"v100": 1.0}, affinity=AFFINITY), {"v100-1"}),
    "t4-tolerant": (_job("t4-tolerant", {"t4": 1.0}, tolerations=TOLERATE), {"t4-0"}),
}
BLOCKED = {
    # name: (manifest, reason, text in the message)
    "t4-untolerant": (
        _job("t4-untolerant", {"t4": 1.0}),
        "UntoleratedTaint",
        "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}",
    ),
    "huge-cpu": (
        _job("huge-cpu", {"v100": 1.0}, cpu="1000"),
        "InsufficientResources",
        "Insufficient cpu",
    ),
    "p100-only": (_job("p100-only", {"p100": 1.0}), "NoCapacity", "no node matches"),
}


@dataclass
class Cluster:
    namespace: str
    operator: OperatorProcess


@pytest.fixture(scope="module")
def cluster(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path_factory: Any
) -> Iterator[Cluster]:
    install(kube)
    for name, (pool, gpus, cpu, tainted) in NODES.items():
        extended_node(
            kube,
            name,
            pool,
            gpus=gpus,
            cpu=cpu,
            labels={ZONE: name},
            taints=[TAINT] if tainted else (),
        )
    devcluster.wait_nodes_ready(kube, list(NODES))
    system = devcluster.unique_name("t-agents")
    devcluster.create_namespace(kube, system)
    for name in NODES:
        daemon_pod(kube, system, name)
    for pool in ("v100", "t4", "p100"):
        create_pool(kube, pool_manifest(pool, pool))
    namespace = devcluster.unique_name("t-acct")
    devcluster.create_namespace(kube, namespace)
    for manifest, _ in RUNNING.values():
        create_job(kube, namespace, manifest)
    for manifest, _, _ in BLOCKED.values():
        create_job(kube, namespace, manifest)
    op = start_operator(control_plane, tmp_path_factory.mktemp("operator"), round_seconds=2.0)
    try:
        yield Cluster(namespace, op)
    finally:
        op.terminate()
        devcluster.reset(kube)


def _bound(kube: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in list_pods(kube, namespace, job)
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    ]


def test_jobs_on_pools_with_nodes_are_placed_in_the_first_round(
    kube: Any, cluster: Cluster
) -> None:
    def placed() -> bool:
        for name, (manifest, nodes) in RUNNING.items():
            pods = _bound(kube, cluster.namespace, name)
            assert len(pods) == manifest["spec"]["replicas"], name
            assert {p["spec"]["nodeName"] for p in pods} <= nodes, (name, pods)
            bound = condition(get_job(kube, cluster.namespace, name), "Bound")
            assert bound is not None and bound["status"] == "True", (name, bound)
        return True

    wait_for(placed, 60, "every runnable job bound to its allowed nodes")
    # The operator's first round is not always round 1: it numbers its rounds above every round a
    # pod or job status in the cluster already used (so no pod name is reused), and the control
    # plane is shared with earlier modules. Its first round is the first one it logged.
    found = re.search(r'"round": (\d+)', cluster.operator.log_text())
    assert found is not None, "no round logged"
    first = found.group(1)
    for name in RUNNING:
        rounds = {
            p["metadata"]["annotations"]["walras.dev/round"]
            for p in list_pods(kube, cluster.namespace, name)
        }
        # Pods keep their nodes once placed (sticky), so the first round's pods are still there.
        assert first in rounds, (name, first, rounds)


def test_foreign_non_gpu_pods_leave_capacity_alone(kube: Any, cluster: Cluster) -> None:
    def reported() -> bool:
        v100 = get_pool(kube, "v100").get("status") or {}
        t4 = get_pool(kube, "t4").get("status") or {}
        # 16 and 2 GPUs: the foreign pods request no GPU, so nothing is taken off.
        assert (v100.get("nodes"), v100.get("capacity")) == (4, 16), v100
        assert (t4.get("nodes"), t4.get("capacity")) == (1, 2), t4
        return True

    wait_for(reported, 60, "pool capacities")


def test_empty_pool_reports_it_is_empty(kube: Any, cluster: Cluster) -> None:
    def reported() -> bool:
        status = get_pool(kube, "p100").get("status") or {}
        ready = condition(get_pool(kube, "p100"), "Ready")
        assert status.get("nodes") == 0 and status.get("capacity") == 0, status
        assert ready is not None and ready["status"] == "False", ready
        assert ready["reason"] == "NoNodes" and "empty" in ready["message"], ready
        return True

    wait_for(reported, 60, "the empty pool's status")


@pytest.mark.parametrize("name", sorted(BLOCKED))
def test_blocked_jobs_name_the_filter(kube: Any, cluster: Cluster, name: str) -> None:
    _, reason, text = BLOCKED[name]

    def conditioned() -> bool:
        admitted = condition(get_job(kube, cluster.namespace, name), "Admitted")
        assert admitted is not None, name
        assert (admitted["status"], admitted["reason"]) == ("False", reason), admitted
        assert text in admitted["message"], admitted
        return True

    wait_for(conditioned, 60, f"the condition on {name}")
    assert list_pods(kube, cluster.namespace, name) == []


def test_no_node_goes_over_any_resource(kube: Any, cluster: Cluster) -> None:
    wait_for(lambda: cluster.operator.rounds() >= 3, 60, "three rounds")
    start = cluster.operator.rounds()
    samples = 0
    while cluster.operator.rounds() < start + 3 or samples < 5:
        assert overcommitted(kube) == []
        samples += 1
        wait_for(lambda: True, 1, "a pause", interval=0.3)
    untolerated = [
        p["metadata"]["name"]
        for p in list_pods(kube, cluster.namespace)
        if p["spec"].get("nodeName") in ("v100-taint", "t4-0")
        and p["metadata"]["labels"]["walras.dev/job"] not in ("tolerant", "t4-tolerant")
    ]
    assert untolerated == []
    assert "Traceback" not in cluster.operator.log_text()


def test_pool_whose_every_node_is_cordoned_is_left_out_until_uncordoned(
    kube: Any, cluster: Cluster
) -> None:
    """Runs last: it cordons t4-0 (the t4 pool's only node), then uncordons it."""

    def cordon(flag: bool) -> None:
        devcluster.request(
            kube,
            "PATCH",
            "/api/v1/nodes/t4-0",
            body={"spec": {"unschedulable": flag}},
            content_type="application/merge-patch+json",
        )

    cordon(True)

    def left_out() -> bool:
        ready = condition(get_pool(kube, "t4"), "Ready")
        assert ready is not None and ready["status"] == "False", ready
        assert "1 cordoned" in ready["message"], ready
        admitted = condition(get_job(kube, cluster.namespace, "t4-tolerant"), "Admitted")
        assert admitted is not None and admitted["reason"] == "NoCapacity", admitted
        for name in ("plain", "hungry", "affine"):
            bound = condition(get_job(kube, cluster.namespace, name), "Bound")
            assert bound is not None and bound["status"] == "True", (name, bound)
        return True

    wait_for(left_out, 60, "the cordoned pool left out, the others running")
    cordon(False)

    def back() -> bool:
        assert len(_bound(kube, cluster.namespace, "t4-tolerant")) == 1
        ready = condition(get_pool(kube, "t4"), "Ready")
        assert ready is not None and ready["status"] == "True", ready
        return True

    wait_for(back, 60, "the t4 pool back after uncordon")
    assert "Traceback" not in cluster.operator.log_text()

"""The cluster cache's assumed pods and bind-time check (walras.operator.cache), no API.

Oracle: the rules of the module docstring, on a node of 4 GPUs. A pod assumed bound counts on its
node until the watch shows it bound (then the pod itself counts, once), or until it is forgotten,
or, never shown, until ``ASSUME_TTL_S`` has passed; a gang fits when every member's GPUs fit next
to everything counted; a gang on a missing or cordoned node gets ``None``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.operator_fakes import GPU

from walras.operator import cache

JOB = ("ns", "train")


def node(name: str = "n0", gpus: int = 4, cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"walras.dev/gpu-type": "g"}},
        "spec": {"unschedulable": cordoned},
        "status": {
            "allocatable": {GPU: str(gpus), "cpu": "32", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def bound_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"p-{name}",
            "labels": {"walras.dev/job": "train", "walras.dev/replica": "0"},
        },
        "spec": {
            "nodeName": "n0",
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {GPU: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def fresh() -> cache.ClusterCache:
    cluster = cache.ClusterCache()
    cluster.store.upsert(
        "pool", {"metadata": {"name": "g", "generation": 1}, "spec": {"gpuType": "g"}}
    )
    cluster.store.upsert("node", node())
    return cluster


def gang(*gpus: int, on: str = "n0") -> list[cache.PendingBind]:
    return [cache.PendingBind("ns", f"m{i}", on, g, job="train") for i, g in enumerate(gpus)]


def test_an_assumed_pod_counts_on_its_node_until_the_watch_shows_it() -> None:
    cluster = fresh()
    [first] = cluster.gang_fit(JOB, gang(3), cluster.node_usage()) or []
    cluster.assume(JOB, [first])
    # 3 of 4 GPUs assumed: a 2-GPU pod does not fit, a 1-GPU pod does.
    assert cluster.gang_fit(JOB, gang(2), cluster.node_usage()) == []
    assert cluster.gang_fit(JOB, gang(1), cluster.node_usage())
    # The watch shows it bound: the pod counts itself, the assumption goes (never counted twice).
    cluster.store.upsert("pod", bound_pod("m0", 3))
    usage = cluster.node_usage()
    assert cluster.assumed == {}
    assert usage["n0"][GPU] == 3.0
    assert cluster.bound_nodes() == {JOB: ["n0"]}


def test_a_forgotten_or_expired_assumption_frees_its_node() -> None:
    cluster = fresh()
    cluster.assume(JOB, [(gang(4)[0], {GPU: 4.0})])
    assert cluster.gang_fit(JOB, gang(1), cluster.node_usage()) == []
    assert cluster.bound_nodes() == {JOB: ["n0"]}  # assumed, not yet delivered by the watch
    cluster.forget(("ns", "m0"))
    assert cluster.gang_fit(JOB, gang(1), cluster.node_usage())
    cluster.assume(JOB, [(gang(4)[0], {GPU: 4.0})])
    stale = cluster.assumed[("ns", "m0")]
    cluster.assumed[("ns", "m0")] = dataclasses.replace(
        stale, since=stale.since - cache.ASSUME_TTL_S - 1.0
    )
    assert cluster.gang_fit(JOB, gang(1), cluster.node_usage())


def test_a_gang_fits_only_whole() -> None:
    cluster = fresh()
    usage = cluster.node_usage()
    # 2 + 2 fit on 4 GPUs; 2 + 3 do not, though each member alone would.
    assert [b.name for b, _ in cluster.gang_fit(JOB, gang(2, 2), dict(usage)) or []] == ["m0", "m1"]
    assert cluster.gang_fit(JOB, gang(2, 3), dict(usage)) == []


def test_a_gang_on_a_missing_or_cordoned_node_is_dropped() -> None:
    cluster = fresh()
    assert cluster.gang_fit(JOB, gang(1, on="gone"), cluster.node_usage()) is None
    cluster.store.upsert("node", node(cordoned=True))
    assert cluster.gang_fit(JOB, gang(1), cluster.node_usage()) is None

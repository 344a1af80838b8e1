"""API dicts for a small two-type cluster, and one policy solve over its snapshot.

Shared by the unit tests of the snapshot → policy → realise pipeline and of the policies; no
test module imports another.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from walras.core import policies, snapshot


def node(name: str, gpu_type: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"walras.dev/gpu-type": gpu_type, **labels}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32", "memory": "256Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pool(gpu_type: str) -> dict[str, Any]:
    return {"metadata": {"name": gpu_type, "generation": 1}, "spec": {"gpuType": gpu_type}}


def job(
    name: str,
    throughput: dict[str, float],
    replicas: int = 1,
    ns: str = "ns",
    tenant: str | None = None,
    gpus: int | None = None,
    cpu: str | None = None,
    selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if gpus is not None or cpu is not None:
        container["resources"] = {}
        if gpus is not None:
            container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
        if cpu is not None:
            container["resources"]["requests"] = {"cpu": cpu}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "throughput": throughput,
        "template": {"spec": {"containers": [container], "nodeSelector": selector or {}}},
    }
    if tenant:
        # A job's tenant is its namespace (spec.tenant is ignored).
        ns = tenant
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": spec,
    }


def cluster(jobs: list[dict[str, Any]], order: int = 0) -> snapshot.Store:
    store = snapshot.Store()
    objs: list[tuple[str, dict[str, Any]]] = [("pool", pool(t)) for t in ("v100", "k80")]
    objs += [("node", node(f"v100-{i}", "v100", 8)) for i in range(2)]
    objs += [("node", node(f"k80-{i}", "k80", 4)) for i in range(3)]
    objs += [("job", j) for j in jobs]
    if order:
        objs = [objs[i] for i in np.random.default_rng(order).permutation(len(objs))]
    for kind, obj in objs:
        store.upsert(kind, obj)
    return store


def workload() -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    return [
        job(
            f"j{i:02d}",
            {"v100": float(rng.uniform(2, 10)), "k80": float(rng.uniform(0.5, 3))},
            replicas=int(rng.integers(1, 4)),
        )
        for i in range(12)
    ]


def solve(name: str, store: snapshot.Store, pop_shards: int = 1) -> policies.Solution:
    snap = store.freeze(now=1000.0)
    view = snapshot.cluster_view(snap)
    config = policies.PolicyConfig(name, {"price-discovery": {"backend": "numpy"}}, pop_shards)
    return policies.build(config).solve(snap, view)


def with_work(jobs: list[dict[str, Any]], total: float = 1e5) -> list[dict[str, Any]]:
    for j in jobs:
        j["spec"]["totalWork"] = total
    return jobs


def assert_type_feasible(sol: policies.Solution, store: snapshot.Store) -> None:
    view = snapshot.cluster_view(store.freeze(now=0.0))
    demand = np.array([j.replicas for j in sol.jobs]) * sol.gpus_per_pod
    use = (sol.targets * demand[:, None]).sum(axis=0)
    # Capacity per type is what the view offers; 1e-6 relative slack is the solvers' tolerance.
    assert np.all(use <= view.type_capacity * (1 + 1e-6) + 1e-9), (use, view.type_capacity)
    assert np.all(sol.targets >= 0) and np.all(sol.targets.sum(axis=1) <= 1 + 1e-9)


def eight_v100(
    tenant_objs: list[dict[str, Any]], job_objs: list[dict[str, Any]], now: float = 0.0
) -> snapshot.Snapshot:
    """8 v100 GPUs on one node (64 CPUs, 512 Gi), the tenants and the jobs, frozen at ``now``."""
    store = snapshot.Store()
    for obj in tenant_objs:
        store.upsert("tenant", obj)
    store.upsert("pool", pool("v100"))
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "v100"}},
            "status": {
                "allocatable": {
                    "nvidia.com/gpu": "8",
                    "cpu": "64",
                    "memory": "512Gi",
                    "pods": "110",
                },
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    for obj in job_objs:
        store.upsert("job", obj)
    return store.freeze(now)

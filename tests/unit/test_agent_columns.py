"""A node's column (walras.agent.columns) is that node's column of the centralised tenant model.

Oracle: ``walras.core.tenants.psdsf_problem`` over all nodes at once (what the ``psdsf``
policy solves). Every agent sees only its own node; stacking their columns must give the same
capacity, demand, weight, eligibility, throughput and cap arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from walras.agent import columns
from walras.core.tenants import psdsf_problem
from walras.testing import devcluster

TYPES = ("a100", "v100", "t4")


def node(name: str, gpu_type: str, gpus: int, zone: str, *, ready: bool = True) -> dict:
    manifest = devcluster.gpu_node_manifest(
        name, gpu_type=gpu_type, gpus=gpus, cpu="32", memory="256Gi", labels={"zone": zone}
    )
    manifest["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return manifest


def pool(gpu_type: str) -> dict:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "ResourcePool",
        "metadata": {"name": f"pool-{gpu_type}"},
        "spec": {"gpuType": gpu_type, "nodeSelector": {devcluster.GPU_TYPE_LABEL: gpu_type}},
    }


def job(rng: np.random.Generator, k: int, tenants: list[str]) -> dict:
    throughput = {t: float(rng.choice([0.0, 0.5, 1.0, 2.5])) for t in TYPES}
    container = {
        "name": "c",
        "image": "x",
        "resources": {
            "limits": {"nvidia.com/gpu": str(int(rng.integers(1, 3)))},
            "requests": {"cpu": f"{int(rng.integers(1, 9)) * 500}m", "memory": "8Gi"},
        },
    }
    spec: dict = {"containers": [container]}
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"zone": "east"}
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        # A job's tenant is its namespace.
        "metadata": {"name": f"job-{k}", "namespace": str(rng.choice(tenants)), "uid": f"uid-{k}"},
        "spec": {
            "replicas": int(rng.integers(1, 5)),
            "throughput": throughput,
            "template": {"spec": spec},
            "utility": {"kind": "log", "weight": float(rng.choice([1.0, 2.0]))},
        },
    }


@pytest.mark.parametrize("seed", range(8))
def test_stacked_columns_equal_the_central_tenant_model(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = [
        node(f"n{k}", TYPES[k % 3], int(rng.choice([4, 8])), "east" if k % 2 else "west")
        for k in range(9)
    ]
    nodes.append(node("n-not-ready", "a100", 8, "east", ready=False))
    pools = [pool(t) for t in TYPES]
    jobs = [job(rng, k, ["alpha", "beta", "gamma", "delta"]) for k in range(10)]
    problem, tenants, node_names = psdsf_problem(jobs, nodes, pools)
    cols = {n["metadata"]["name"]: columns.node_column(n, jobs, pools) for n in nodes}
    assert "n-not-ready" not in node_names
    assert not cols["n-not-ready"].eligible.any()
    for i, name in enumerate(node_names):
        col = cols[name]
        assert list(col.tenant_names) == tenants
        np.testing.assert_allclose(col.capacity, problem.capacity[i])
        np.testing.assert_allclose(col.demand, problem.demand)
        np.testing.assert_allclose(col.weight, problem.phi)
        np.testing.assert_array_equal(col.eligible, problem.delta[:, i])
        assert col.throughput is not None and col.cap is not None
        np.testing.assert_allclose(col.throughput, problem.throughput[:, i])
        # Every pool has a ready node here, so the pool-based cap equals the central one.
        np.testing.assert_allclose(col.cap, problem.caps)

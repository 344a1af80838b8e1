"""The normalised PS-DSF tenant model and the agents' copy of it (``walras.core.tenants``).

Oracles: the module docstring's worked example by hand; invariance under rescaling one job's
rates (normalisation makes a job's units its own, so a job reporting steps ten times smaller
changes nothing); the central model over all nodes (``psdsf_problem`` with the cluster's Tenant
objects) against the node agents' columns stacked (``walras.agent.columns``) when Tenants map
namespaces to other names and weights; and an agent that may not list Tenants falls back to
namespaces instead of failing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kubernetes.client import ApiException

from walras.agent import columns, runner
from walras.core.tenants import psdsf_problem
from walras.testing import devcluster

TYPES = ("a100", "v100", "t4")


def node(name: str, gpu_type: str, gpus: int = 8) -> dict[str, Any]:
    manifest = devcluster.gpu_node_manifest(
        name, gpu_type=gpu_type, gpus=gpus, cpu="32", memory="256Gi"
    )
    manifest["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return manifest


def pool(gpu_type: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"pool-{gpu_type}"},
        "spec": {"gpuType": gpu_type, "nodeSelector": {devcluster.GPU_TYPE_LABEL: gpu_type}},
    }


def job(name: str, ns: str, rates: dict[str, float], replicas: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"},
        "spec": {
            "replicas": replicas,
            "throughput": rates,
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }


def tenant(name: str, weight: float, namespaces: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"weight": weight, "namespaces": namespaces}}


def test_docstring_example() -> None:
    jobs = [
        job("lm", "t", {"k80": 43.0, "v100": 121.0}),
        job("rec", "t", {"k80": 20.0, "v100": 13.0}),
    ]
    problem, _, names = psdsf_problem(
        jobs, [node("k", "k80"), node("v", "v100")], [pool("k80"), pool("v100")]
    )
    assert names == ["k", "v"]
    np.testing.assert_allclose(problem.throughput[0], [20.0 / 13.0, 121.0 / 43.0])
    np.testing.assert_allclose(problem.caps, [121.0 / 43.0 + 20.0 / 13.0])
    assert problem.caps[0] == pytest.approx(4.35, abs=0.01)


@pytest.mark.parametrize("scale", [0.01, 7.0, 1000.0])
def test_rescaling_one_jobs_rates_changes_nothing(scale: float) -> None:
    rng = np.random.default_rng(3)
    nodes = [node(f"n{k}", TYPES[k % 3]) for k in range(6)]
    pools = [pool(t) for t in TYPES]
    jobs = [
        job(f"j{i}", f"ns{i % 2}", {t: float(rng.choice([0.0, 1.0, 2.5, 40.0])) for t in TYPES})
        for i in range(6)
    ]
    base, *_ = psdsf_problem(jobs, nodes, pools)
    scaled = [dict(j) for j in jobs]
    scaled[0] = job("j0", "ns0", {t: r * scale for t, r in jobs[0]["spec"]["throughput"].items()})
    other, *_ = psdsf_problem(scaled, nodes, pools)
    np.testing.assert_allclose(other.throughput, base.throughput, rtol=1e-12)
    np.testing.assert_allclose(other.caps, base.caps, rtol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_agents_columns_with_tenant_objects_equal_the_central_model(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = [node(f"n{k}", TYPES[k % 3], int(rng.choice([4, 8]))) for k in range(7)]
    pools = [pool(t) for t in TYPES]
    spaces = ["a-dev", "a-prod", "b", "c"]
    jobs = [
        job(
            f"j{i}",
            str(rng.choice(spaces)),
            {t: float(rng.choice([0.0, 0.7, 3.0, 55.0])) for t in TYPES},
            int(rng.integers(1, 4)),
        )
        for i in range(9)
    ]
    # Tenant "alpha" gathers two namespaces at weight 3; "c" weighs 0.5; "b" has no Tenant.
    tenants = [tenant("alpha", 3.0, ["a-dev", "a-prod"]), tenant("c", 0.5, ["c"])]
    problem, names, node_names = psdsf_problem(jobs, nodes, pools, tenants)
    cols = {n["metadata"]["name"]: columns.node_column(n, jobs, pools, tenants) for n in nodes}
    for i, name in enumerate(node_names):
        col = cols[name]
        assert list(col.tenant_names) == names
        np.testing.assert_allclose(col.weight, problem.phi)
        np.testing.assert_array_equal(col.eligible, problem.delta[:, i])
        assert col.throughput is not None and col.cap is not None
        np.testing.assert_allclose(col.throughput, problem.throughput[:, i])
        np.testing.assert_allclose(col.cap, problem.caps)
    assert set(names) <= {"alpha", "b", "c"}


class _Kube:
    """Lists jobs and pools; listing Tenants is forbidden (a chart without that RBAC rule)."""

    def list_custom(self, plural: str) -> tuple[list[dict[str, Any]], str | None]:
        if plural == runner.TENANTS:
            raise ApiException(status=403, reason="Forbidden")
        return [], "1"


def test_an_agent_that_may_not_list_tenants_uses_namespaces() -> None:
    reads = runner.SharedReads(_Kube(), ttl=0.0)  # type: ignore[arg-type]  # a duck-typed fake
    jobs, pools, _ = reads.jobs_and_pools()
    assert (jobs, pools, reads.tenants()) == ([], [], [])

"""Scenario 6: PS-DSF mode. Tenant task totals equal the central PS-DSF solution.

``walras operator --policy psdsf`` on two GPU types and three tenants with different per-task
demands (GPUs and CPU) and weights. The test rebuilds the PS-DSF problem from the API objects with
``walras.core.tenants.psdsf_problem`` (the shared tenant model), solves it centrally with
``walras.allocator.fairness`` and compares every tenant's total with the ``tenantTasks`` the
operator reports; the central solution itself is checked by its Theorem 2 certificate. Pods land
only on nodes their tenant is eligible for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from operator_helpers import (
    BASE,
    alive,
    create_job,
    create_nodes,
    create_pool,
    install,
    job_manifest,
    list_jobs,
    list_nodes,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.allocator import fairness
from walras.core.tenants import psdsf_problem
from walras.testing import devcluster

pytestmark = pytest.mark.slow

TENANT_JOBS = {
    # tenant: [(job, throughput, replicas, gpus per pod, cpu per pod, weight)]
    "vision": [
        ("resnet", {"v100": 4.0, "k80": 1.0}, 2, 1, "4", 1.0),
        ("vgg", {"v100": 3.0, "k80": 1.5}, 1, 2, "4", 1.0),
    ],
    "nlp": [("bert", {"v100": 2.0}, 4, 1, "8", 2.0)],
    "rl": [("a3c", {"k80": 1.0, "v100": 1.2}, 3, 1, "16", 1.0)],
}


def test_tenant_totals_match_central_psdsf(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-psdsf")
    # One namespace per tenant, mapped by an admin's Tenant object carrying the tenant's weight.
    spaces = {tenant: f"{namespace}-{tenant}" for tenant in TENANT_JOBS}
    for tenant, ns in spaces.items():
        devcluster.create_namespace(kube, ns)
        weight = max(job[-1] for job in TENANT_JOBS[tenant])
        tenant_obj = {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": tenant},
            "spec": {"weight": weight, "namespaces": [ns]},
        }
        devcluster.request(kube, "POST", f"{BASE}/tenants", body=tenant_obj)
    create_nodes(kube, "v100", "v100", 2, 4)
    create_nodes(kube, "k80", "k80", 2, 8)
    create_pool(kube, pool_manifest("v100", "v100"))
    create_pool(kube, pool_manifest("k80", "k80"))
    for tenant, jobs in TENANT_JOBS.items():
        for name, rates, replicas, gpus, cpu, weight in jobs:
            manifest = job_manifest(
                name,
                rates,
                replicas=replicas,
                gpus=gpus,
                cpu=cpu,
                utility={"kind": "log", "weight": weight},
            )
            create_job(kube, spaces[tenant], manifest)
    op = start_operator(control_plane, tmp_path, policy="psdsf", round_seconds=2.0)
    try:

        def all_jobs() -> list[dict[str, Any]]:
            return [job for ns in spaces.values() for job in list_jobs(kube, ns)]

        def reported() -> dict[str, float]:
            totals = {}
            for job in all_jobs():
                status = job.get("status") or {}
                if "tenantTasks" not in status:
                    return {}
                totals[status["tenant"]] = float(status["tenantTasks"])
            return totals

        totals = wait_for(reported, 60, "tenant totals in every job's status")
        jobs = all_jobs()
        pools = devcluster.request(kube, "GET", f"{BASE}/resourcepools")["items"]
        tenant_objs = devcluster.request(kube, "GET", f"{BASE}/tenants")["items"]
        problem, tenants, node_names = psdsf_problem(jobs, list_nodes(kube), pools, tenant_objs)
        assert sorted(tenants) == sorted(TENANT_JOBS)
        result = fairness.solve(problem, mode="tdm")
        assert result.converged
        assert fairness.certificate(problem, result.tasks, "tdm") <= 1e-6
        central = dict(zip(tenants, np.asarray(result.totals).tolist(), strict=True))
        print("operator:", totals, "central:", central)
        for tenant in tenants:
            # The operator reports three significant digits.
            assert totals[tenant] == pytest.approx(central[tenant], rel=5e-3, abs=1e-6)

        # Pods run only where their tenant is eligible (type with throughput > 0).
        node_type = {
            n["metadata"]["name"]: n["metadata"]["labels"][devcluster.GPU_TYPE_LABEL]
            for n in list_nodes(kube)
        }
        rates = {name: r for jobs_ in TENANT_JOBS.values() for name, r, *_ in jobs_}

        def all_pods() -> list[dict[str, Any]]:
            return [pod for ns in spaces.values() for pod in list_pods(kube, ns)]

        wait_for(
            lambda: any(alive(p) and p["spec"].get("nodeName") for p in all_pods()),
            60,
            "pods to run",
        )
        for pod in all_pods():
            node = pod["spec"].get("nodeName")
            if node and alive(pod):
                job = pod["metadata"]["labels"]["walras.dev/job"]
                assert rates[job].get(node_type[node], 0.0) > 0
        assert node_names == sorted(node_names)
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

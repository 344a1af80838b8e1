"""Tenant quotas on the local control plane (kwok nodes), with the operator's price discovery.

- A loan and its reclaim: tenant ``owner`` is guaranteed 4 of 8 v100 GPUs and is idle; tenant
  ``borrower``'s eight single-GPU jobs hold all 8. ``owner``'s 4-pod gang arrives: the operator
  runs it (all 4 pods bound and running), and ``borrower`` holds at most the 4 others from then
  on.
- A maximum with free GPUs: tenant ``capped`` may hold at most 2 k80 and runs four single-GPU
  jobs on 8 free k80 GPUs: 2 pods run, never more, round after round.

Oracles: the Tenant objects' numbers and the pods the API server holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_helpers import (
    BASE,
    alive,
    create_job,
    create_nodes,
    create_pool,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow


def tenant(name: str, namespace: str, quotas: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"namespaces": [namespace], "quotas": quotas},
    }


def running(kube: Any, namespace: str) -> list[dict[str, Any]]:
    """The namespace's Walras pods bound to a node and alive."""
    return [p for p in list_pods(kube, namespace) if alive(p) and p["spec"].get("nodeName")]


def test_an_idle_guarantee_is_lent_then_reclaimed(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    ns_owner, ns_borrower = (devcluster.unique_name(f"t-quo-{x}") for x in ("o", "b"))
    for ns in (ns_owner, ns_borrower):
        devcluster.create_namespace(kube, ns)
    names = [devcluster.unique_name("quo-owner"), devcluster.unique_name("quo-borrower")]
    devcluster.request(
        kube,
        "POST",
        f"{BASE}/tenants",
        body=tenant(names[0], ns_owner, {"qv100": {"guaranteed": 4}}),
    )
    devcluster.request(kube, "POST", f"{BASE}/tenants", body=tenant(names[1], ns_borrower, {}))
    create_nodes(kube, "quo", "qv100", 2, 4)
    create_pool(kube, pool_manifest("qv100", "qv100"))
    for i in range(8):
        create_job(kube, ns_borrower, job_manifest(f"b{i}", {"qv100": 1.0}, gpus=1))
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        # The loan: the borrower holds all 8 while the owner is idle.
        wait_for(lambda: len(running(kube, ns_borrower)) == 8, 120, "the borrower on all 8")
        create_job(kube, ns_owner, job_manifest("gang", {"qv100": 1.0}, replicas=4, gpus=1))
        # The reclaim: the owner's whole gang runs.
        wait_for(lambda: len(running(kube, ns_owner)) == 4, 120, "the owner's 4-pod gang")
        # From then on the borrower holds the other 4 at most (8 GPUs in all).
        for _ in range(5):
            op_rounds = op.rounds()
            wait_for(lambda: op.rounds() > op_rounds, 60, "one more round")  # noqa: B023
            assert len(running(kube, ns_owner)) == 4
            assert len(running(kube, ns_borrower)) <= 4
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        for name in names:
            devcluster.request(kube, "DELETE", f"{BASE}/tenants/{name}")
        for ns in (ns_owner, ns_borrower):
            devcluster.delete_namespace(kube, ns)


def test_a_tenant_at_its_maximum_leaves_free_gpus_free(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    ns = devcluster.unique_name("t-quo-c")
    devcluster.create_namespace(kube, ns)
    name = devcluster.unique_name("quo-capped")
    devcluster.request(
        kube, "POST", f"{BASE}/tenants", body=tenant(name, ns, {"qk80": {"maximum": 2}})
    )
    create_nodes(kube, "quk", "qk80", 2, 4)
    create_pool(kube, pool_manifest("qk80", "qk80"))
    for i in range(4):
        create_job(kube, ns, job_manifest(f"c{i}", {"qk80": 1.0}, gpus=1))
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        wait_for(lambda: len(running(kube, ns)) == 2, 120, "two of the capped tenant's pods")
        for _ in range(5):
            op_rounds = op.rounds()
            wait_for(lambda: op.rounds() > op_rounds, 60, "one more round")  # noqa: B023
            assert len([p for p in list_pods(kube, ns) if alive(p)]) <= 2
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        devcluster.request(kube, "DELETE", f"{BASE}/tenants/{name}")
        devcluster.delete_namespace(kube, ns)

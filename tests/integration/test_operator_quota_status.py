"""Quotas made visible on the local control plane (kwok nodes), with the operator's price
discovery: Tenant statuses, job conditions and Events, ``walras status``/``explain``, metrics.

- Loan: tenants ``owner`` and ``borrower`` are each guaranteed 4 of 8 GPUs; the owner is idle
  and the borrower's eight single-GPU jobs hold all 8. Nothing is free, so (by the definitions
  of ``walras.core.tenant_usage``) the owner lends 4 (``0/4 -4``) and the borrower borrows
  8 - 4 = 4 (``8/4 +4``); ``walras_tenant_gpus`` says the same.
- Reclaim: the owner's 4-pod gang arrives and runs; the borrower's jobs stopped for it get
  ``Preempted=True``/``Reclaimed`` naming both tenants, with a Warning Event, and
  ``walras explain`` prints it.
- Maximum: tenant ``capped`` may hold at most 2 GPUs of another type and runs four single-GPU
  jobs on 8 free GPUs: the two waiting get ``Allocated=False``/``QuotaExceeded`` ("holds 2 of
  its maximum of 2"), which ``walras explain`` prints; ``walras status`` lists every tenant's
  numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_helpers import (
    BASE,
    alive,
    condition,
    create_job,
    create_nodes,
    create_pool,
    http_get,
    install,
    job_manifest,
    list_jobs,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)
from typer.testing import CliRunner

from walras.cli import app
from walras.testing import devcluster

pytestmark = pytest.mark.slow

TYPE, CAPPED_TYPE = "gvv100", "gvk80"
# Seconds per round: long enough for the test to read a condition that lasts one round and run
# `walras explain` on it.
ROUND_S = 5.0


def tenant(name: str, namespace: str, quotas: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"namespaces": [namespace], "quotas": quotas},
    }


def gpus(kube: Any, name: str) -> dict[str, Any]:
    obj = devcluster.request(kube, "GET", f"{BASE}/tenants/{name}")
    return dict((obj.get("status") or {}).get("gpus") or {})


def summary(kube: Any, name: str) -> str:
    obj = devcluster.request(kube, "GET", f"{BASE}/tenants/{name}")
    return str((obj.get("status") or {}).get("summary") or "")


def running(kube: Any, namespace: str) -> int:
    return len([p for p in list_pods(kube, namespace) if alive(p) and p["spec"].get("nodeName")])


def with_reason(kube: Any, namespace: str, ctype: str, reason: str) -> list[dict[str, Any]]:
    """The namespace's jobs whose ``ctype`` condition has ``reason`` (asserts, naming what the
    jobs say instead, while there are none)."""
    jobs = list_jobs(kube, namespace)
    found = [
        j for j in jobs if (c := condition(j, ctype)) is not None and c.get("reason") == reason
    ]
    said = sorted({str((condition(j, ctype) or {}).get("reason")) for j in jobs})
    assert found, f"{ctype} reasons in {namespace}: {said}"
    return found


def metric(port: int, tenant: str, gpu_type: str, state: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    _, text = http_get(port, "/metrics")
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "walras_tenant_gpus" and s.labels == {
                "tenant": tenant,
                "gpu_type": gpu_type,
                "state": state,
            }:
                return float(s.value)
    return None


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output


def test_loan_reclaim_and_maximum_are_shown(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    ns = {x: devcluster.unique_name(f"t-gv-{x}") for x in ("o", "b", "c")}
    for namespace in ns.values():
        devcluster.create_namespace(kube, namespace)
    owner, borrower, capped = (devcluster.unique_name(f"gv-{x}") for x in ("own", "bor", "cap"))
    bodies = [
        tenant(owner, ns["o"], {TYPE: {"guaranteed": 4}}),
        tenant(borrower, ns["b"], {TYPE: {"guaranteed": 4}}),
        tenant(capped, ns["c"], {CAPPED_TYPE: {"maximum": 2}}),
    ]
    for body in bodies:
        devcluster.request(kube, "POST", f"{BASE}/tenants", body=body)
    create_nodes(kube, "gv", TYPE, 2, 4)
    create_nodes(kube, "gvk", CAPPED_TYPE, 2, 4)
    create_pool(kube, pool_manifest(TYPE, TYPE))
    create_pool(kube, pool_manifest(CAPPED_TYPE, CAPPED_TYPE))
    for i in range(8):
        create_job(kube, ns["b"], job_manifest(f"b{i}", {TYPE: 1.0}, gpus=1))
    for i in range(4):
        create_job(kube, ns["c"], job_manifest(f"c{i}", {CAPPED_TYPE: 1.0}, gpus=1))
    kubeconfig = ("--kubeconfig", control_plane.admin_kubeconfig)
    op = start_operator(control_plane, tmp_path, round_seconds=ROUND_S)
    try:
        # The loan.
        wait_for(lambda: running(kube, ns["b"]) == 8, 120, "the borrower on all 8")
        wait_for(
            lambda: (
                summary(kube, owner) == f"{TYPE} 0/4 -4"
                and summary(kube, borrower) == f"{TYPE} 8/4 +4"
            ),
            60,
            "the loan on the Tenants' statuses",
        )
        assert gpus(kube, owner)[TYPE] == {"guaranteed": 4, "inUse": 0, "borrowed": 0, "lent": 4}
        assert gpus(kube, borrower)[TYPE] == {
            "guaranteed": 4,
            "inUse": 8,
            "borrowed": 4,
            "lent": 0,
        }
        assert metric(op.port, owner, TYPE, "lent") == 4
        assert metric(op.port, borrower, TYPE, "borrowed") == 4

        # The maximum: two of the capped tenant's four jobs wait on it, not on capacity.
        waiting = wait_for(
            lambda: len(w := with_reason(kube, ns["c"], "Allocated", "QuotaExceeded")) == 2 and w,
            60,
            "two capped jobs QuotaExceeded",
        )
        told = condition(waiting[0], "Allocated")
        assert told is not None
        assert told["message"] == (
            f"tenant {capped} holds 2 of its maximum of 2 {CAPPED_TYPE} GPUs and the gang needs 1"
        )
        out = cli("explain", f"{ns['c']}/{waiting[0]['metadata']['name']}", *kubeconfig)
        assert f"Waiting: QuotaExceeded: tenant {capped} holds 2 of its maximum" in out

        # The reclaim. The borrower's eight jobs share its 4 GPUs afterwards, taking turns
        # round by round: a job stopped for the owner says Reclaimed until its next turn (one
        # round, ROUND_S), so it is read as soon as it is written.
        create_job(kube, ns["o"], job_manifest("gang", {TYPE: 1.0}, replicas=4, gpus=1))
        stopped = wait_for(
            lambda: with_reason(kube, ns["b"], "Preempted", "Reclaimed"),
            120,
            "a borrower's job Reclaimed",
        )
        out = cli("explain", f"{ns['b']}/{stopped[0]['metadata']['name']}", *kubeconfig)
        told = condition(stopped[0], "Preempted")
        assert told is not None and told["status"] == "True"
        message = (
            f"tenant {owner} took back {TYPE} GPUs of its guarantee of 4, which tenant "
            f"{borrower} had borrowed (it held 8 of a guarantee of 4)"
        )
        assert told["message"] == message
        assert f"Stopped: Reclaimed: {message}" in " ".join(out.split())
        events = devcluster.request(kube, "GET", f"/api/v1/namespaces/{ns['b']}/events")
        reclaims = [e for e in events["items"] if e.get("reason") == "Reclaimed"]
        assert reclaims
        assert all(e["type"] == "Warning" and e["message"] == message for e in reclaims)
        wait_for(lambda: running(kube, ns["o"]) == 4, 120, "the owner's 4-pod gang")
        wait_for(
            lambda: summary(kube, owner) == f"{TYPE} 4/4", 60, "the owner holding its guarantee"
        )

        out = cli("status", *kubeconfig)
        rows = {
            (cells[0], cells[2]): cells
            for line in out.splitlines()
            if line.count("│") > 8 and (cells := [c.strip() for c in line.split("│")[1:-1]])
        }
        assert rows[(owner, TYPE)][3:7] == ["4", "4", "0", "0"]
        assert rows[(capped, CAPPED_TYPE)][3:] == ["0", "2", "2", "0", "2"]
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        for body in bodies:
            devcluster.request(kube, "DELETE", f"{BASE}/tenants/{body['metadata']['name']}")
        for namespace in ns.values():
            devcluster.delete_namespace(kube, namespace)


def test_a_type_left_in_the_status_by_an_earlier_operator_is_removed(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    """An operator that never wrote the Tenant's status (a restart) still removes from
    ``status.gpus`` a GPU type the tenant no longer has: the API server keeps every map key a
    merge patch does not name, so only a ``null`` for it clears it."""
    install(kube)
    name = devcluster.unique_name("gv-old")
    namespace = devcluster.unique_name("t-gv-old")
    devcluster.create_namespace(kube, namespace)
    devcluster.request(
        kube, "POST", f"{BASE}/tenants", body=tenant(name, namespace, {TYPE: {"guaranteed": 2}})
    )
    create_nodes(kube, "gvo", TYPE, 1, 4)
    create_pool(kube, pool_manifest(TYPE, TYPE))
    stale = {"guaranteed": 0, "inUse": 2, "borrowed": 0, "lent": 0}
    devcluster.request(
        kube,
        "PATCH",
        f"{BASE}/tenants/{name}/status",
        body={"status": {"gpus": {"gone-type": stale}, "summary": "gone-type 2/0"}},
        content_type="application/merge-patch+json",
    )
    assert "gone-type" in gpus(kube, name)
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        shown = wait_for(
            lambda: (g := gpus(kube, name)) and "gone-type" not in g and g,
            60,
            "the stale type removed from the Tenant's status",
        )
        # Idle, and nobody borrows: free GPUs are not lent (walras.core.tenant_usage).
        assert shown == {TYPE: {"guaranteed": 2, "inUse": 0, "borrowed": 0, "lent": 0}}
        assert summary(kube, name) == f"{TYPE} 0/2"
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        devcluster.request(kube, "DELETE", f"{BASE}/tenants/{name}")
        devcluster.delete_namespace(kube, namespace)

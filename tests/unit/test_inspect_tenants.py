"""``walras status``'s tenant table and ``walras explain``'s quota lines, from API objects.

Oracle: the numbers written in the Tenants' statuses (``walras.operator.quota_status``) come
back unchanged, one row per tenant and type; a Tenant without any GPUs still gets a row.
"""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from tests.unit.test_inspect_logic import POOLS, job

from walras.cli import inspect_cmd


def tenant(name: str, gpus: dict[str, Any] | None, parent: str | None = None) -> dict[str, Any]:
    spec = {"parent": parent} if parent else {}
    status = {"gpus": gpus} if gpus is not None else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_the_tenant_table_shows_each_tenants_gpus_per_type() -> None:
    tenants = [
        tenant("b", {"v100": {"guaranteed": 4, "inUse": 8, "borrowed": 4, "lent": 0}}),
        tenant(
            "a",
            {
                "v100": {"guaranteed": 4, "inUse": 0, "borrowed": 0, "lent": 4, "maximum": 6},
                "k80": {"guaranteed": 0, "inUse": 2, "borrowed": 2, "lent": 0},
            },
            parent="org",
        ),
        tenant("idle", None),
    ]
    rows = inspect_cmd.tenant_rows(tenants)
    assert [(r.tenant, r.gpu_type) for r in rows] == [
        ("a", "k80"),
        ("a", "v100"),
        ("b", "v100"),
        ("idle", ""),
    ]
    assert rows[1] == inspect_cmd.TenantRow("a", "org", "v100", 4, 0, 0, 4, 6)
    console = Console(record=True, width=120)
    console.print(inspect_cmd.tenants_table(rows))
    text = console.export_text()
    lines = {
        line.split("│")[1].strip() + "/" + line.split("│")[3].strip(): line
        for line in text.splitlines()
        if line.count("│") > 8
    }
    cells = [c.strip() for c in lines["b/v100"].split("│")[1:-1]]
    assert cells == ["b", "-", "v100", "4", "8", "4", "0", "-"]
    cells = [c.strip() for c in lines["a/v100"].split("│")[1:-1]]
    assert cells == ["a", "org", "v100", "4", "0", "0", "4", "6"]


def test_explain_says_a_job_was_reclaimed_and_names_the_quota_it_waits_on() -> None:
    reclaimed = (
        "tenant a took back v100 GPUs of its guarantee of 4, which tenant b had borrowed "
        "(it held 8 of a guarantee of 4)"
    )
    status = {
        "phase": "Pending",
        "tenant": "b",
        "conditions": [
            {"type": "Admitted", "status": "True", "reason": "Valid"},
            {"type": "Allocated", "status": "False", "reason": "InsufficientShare"},
            {"type": "Preempted", "status": "True", "reason": "Reclaimed", "message": reclaimed},
        ],
    }
    e = inspect_cmd.explain(job({"v100": 1.0}, status=status), POOLS)
    assert (e.tenant, e.reclaimed) == ("b", reclaimed)
    console = Console(record=True, width=300)
    inspect_cmd.render_explanation(console, e)
    assert f"Stopped: Reclaimed: {reclaimed}" in console.export_text()

    waiting = "tenant b holds 8 of its maximum of 8 v100 GPUs and the gang needs 4"
    status["conditions"] = [
        {"type": "Admitted", "status": "True", "reason": "Valid"},
        {"type": "Allocated", "status": "False", "reason": "QuotaExceeded", "message": waiting},
    ]
    e = inspect_cmd.explain(job({"v100": 1.0}, status=status), POOLS)
    assert (e.reason, e.message, e.reclaimed) == ("QuotaExceeded", waiting, "")
    console = Console(record=True, width=300)
    inspect_cmd.render_explanation(console, e)
    assert f"Waiting: QuotaExceeded: {waiting}" in console.export_text()


def test_list_tenants_answers_none_when_forbidden_and_empty_without_the_crd(
    monkeypatch: Any,
) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    answers: list[Any] = []

    class Custom:
        def __init__(self, api: Any) -> None:
            pass

        def list_cluster_custom_object(self, *args: Any) -> Any:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    monkeypatch.setattr(client, "CustomObjectsApi", Custom)
    answers[:] = [ApiException(status=403), ApiException(status=404), {"items": [{"a": 1}]}]
    assert inspect_cmd.list_tenants(None) is None  # a user's kubeconfig: Tenants are admin-only
    assert inspect_cmd.list_tenants(None) == []  # an older chart without the Tenant CRD
    assert inspect_cmd.list_tenants(None) == [{"a": 1}]
    answers[:] = [ApiException(status=500)]
    with pytest.raises(ApiException):  # a server error is not taken for "no Tenants"
        inspect_cmd.list_tenants(None)

"""Accepted but useless fields (``walras.core.field_notices``): a ``SpecWarnings`` condition and a
Warning Event name each field: a throughput for a GPU type no pool has, a weight clamped by the
tenant's range, an α outside the range price discovery handles well.

Oracle: the rules in the module docstring, on jobs parsed from manifests; then through a real
round loop against the scripted API of ``test_operator_whole_gangs``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.unit.operator_fakes import FakeApi, gang_job, make_loop

from walras.core import field_notices, governance, model


def job(throughput: dict[str, float], **utility: Any) -> model.JobSpec:
    manifest = gang_job("j", "u-j", replicas=1)
    manifest["spec"]["throughput"] = throughput
    if utility:
        manifest["spec"]["utility"] = utility
    parsed = model.parse_job(manifest)
    assert isinstance(parsed, model.JobSpec), parsed
    return parsed


def fields(found: list[field_notices.Notice]) -> list[tuple[str, str]]:
    return [(n.field, n.reason) for n in found]


def test_a_throughput_for_a_type_no_pool_has_is_named_while_another_type_is_offered() -> None:
    found = field_notices.job_notices(job({"a100": 2.0, "h100": 3.0}), {"a100"}, {})
    assert fields(found) == [("spec.throughput.h100", "UnknownGPUType")]
    # Only unknown types: that is the NoPoolForThroughput issue, not a notice.
    assert field_notices.job_notices(job({"h100": 3.0}), {"a100"}, {}) == []
    assert field_notices.job_notices(job({"a100": 2.0}), {"a100"}, {}) == []


@pytest.mark.parametrize(
    ("weight", "bounds", "used"),
    [(100.0, (0.1, 10.0), "10"), (0.01, (0.1, 10.0), "0.1"), (5.0, (1.0, 2.0), "2")],
)
def test_a_weight_outside_the_tenant_range_is_named_with_the_weight_used(
    weight: float, bounds: tuple[float, float], used: str
) -> None:
    tenants = {
        "t": governance.TenantSpec(
            "t", namespaces=("ns",), min_job_weight=bounds[0], max_job_weight=bounds[1]
        )
    }
    found = field_notices.job_notices(job({"g": 1.0}, weight=weight), {"g"}, tenants)
    assert fields(found) == [("spec.utility.weight", "WeightClamped")]
    assert f"{used} is used" in found[0].message and "tenant t" in found[0].message
    inside = field_notices.job_notices(job({"g": 1.0}, weight=bounds[0]), {"g"}, tenants)
    assert inside == []


@pytest.mark.parametrize(
    ("alpha", "noticed"), [(0.05, True), (0.1, False), (10, False), (50, True)]
)
def test_an_alpha_outside_the_well_handled_range_is_named(alpha: float, noticed: bool) -> None:
    found = field_notices.job_notices(job({"g": 1.0}, kind="alphaFair", alpha=alpha), {"g"}, {})
    assert fields(found) == ([("spec.utility.alpha", "AlphaOutOfRange")] if noticed else [])
    # Other kinds do not use alpha at all.
    assert field_notices.job_notices(job({"g": 1.0}, kind="log", alpha=alpha), {"g"}, {}) == []


def test_the_round_loop_reports_every_notice_in_one_condition_and_event() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    manifest = gang_job("odd", "u-odd", replicas=1)
    manifest["spec"]["throughput"] = {"g": 1.0, "tpu": 4.0}
    manifest["spec"]["utility"] = {"kind": "alphaFair", "alpha": 50, "weight": 1000}
    rounds.store.upsert("job", manifest)
    asyncio.run(rounds.run_round())
    conditions = {c["type"]: c for c in api.statuses["odd"]["conditions"]}
    warning = conditions["SpecWarnings"]
    assert (warning["status"], warning["reason"]) == ("True", "SeveralFields")
    for name in ("spec.throughput.tpu", "spec.utility.weight", "spec.utility.alpha"):
        assert name in warning["message"]
    assert ("SeveralFields", warning["message"]) in api.events
    assert "SpecWarnings" not in {c["type"] for c in api.statuses["gang"]["conditions"]}


def test_the_round_loop_names_a_priority_class_the_tenant_does_not_allow() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    rounds.store.upsert("priorityclass", {"metadata": {"name": "gold"}, "value": 100})
    manifest = gang_job("vip", "u-vip", replicas=1)
    manifest["spec"]["template"]["spec"]["priorityClassName"] = "gold"
    rounds.store.upsert("job", manifest)
    asyncio.run(rounds.run_round())
    warning = {c["type"]: c for c in api.statuses["vip"]["conditions"]}["SpecWarnings"]
    assert (warning["status"], warning["reason"]) == ("True", "PriorityClassNotAllowed")
    assert warning["message"].startswith("spec.template.spec.priorityClassName: tenant ns")
    assert ("PriorityClassNotAllowed", warning["message"]) in api.events

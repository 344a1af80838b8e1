"""Priorities (``walras.core.priorities``): which PriorityClass a job is scheduled with.

Oracle: the rules of the module docstring, written out again here: a tenant's users may use the
default class and any time-shared class of value at most the default's; any other class only
when the Tenant lists it; a class that does not exist or is not allowed means the default, with
the reason naming ``spec.template.spec.priorityClassName``.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pydantic
import pytest
from hypothesis import given
from tests.unit.operator_fakes import gang_job

from walras.core import field_notices, governance, model, priorities
from walras.core.schema import tenant as tenant_schema


def job(class_name: str | None, namespace: str = "ns") -> model.JobSpec:
    manifest = gang_job("j", "u-j", replicas=1)
    manifest["metadata"]["namespace"] = namespace
    if class_name is not None:
        manifest["spec"]["template"]["spec"]["priorityClassName"] = class_name
    parsed = model.parse_job(manifest)
    assert isinstance(parsed, model.JobSpec), parsed
    return parsed


def pc(name: str, value: int, *, default: bool = False, sharing: str | None = None) -> Any:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    if default:
        obj["globalDefault"] = True
    if sharing is not None:
        obj["metadata"]["annotations"] = {priorities.ANN_TIME_SHARING: sharing}
    return obj


def classes(*objs: Any) -> dict[str, priorities.PriorityClass]:
    parsed = [priorities.parse_priority_class(o) for o in objs]
    return {p.name: p for p in parsed}


def tenant(*allowed: str) -> dict[str, governance.TenantSpec]:
    return {
        "t": governance.parse_tenant(
            {
                "metadata": {"name": "t"},
                "spec": {"namespaces": ["ns"], "priorityClasses": list(allowed)},
            }
        )
    }


def test_a_priority_class_is_parsed_with_its_value_default_and_time_sharing() -> None:
    got = priorities.parse_priority_class(pc("train", 1000, default=True, sharing="False"))
    assert got == priorities.PriorityClass("train", 1000, True, False)
    # Only "false" turns time sharing off; anything else, or nothing, leaves it on.
    assert priorities.parse_priority_class(pc("x", 5, sharing="no")).time_sharing
    assert priorities.parse_priority_class(pc("x", 5)).time_sharing
    # A value the API server would refuse (not an integer) reads as 0.
    assert priorities.parse_priority_class({"metadata": {"name": "y"}, "value": "9"}).value == 0


def test_without_a_class_a_job_gets_the_global_default_or_value_zero() -> None:
    assert priorities.effective(job(None), {}, {}) == priorities.DEFAULT
    cs = classes(pc("low", -10), pc("normal", 100, default=True))
    got = priorities.effective(job(None), cs, {})
    assert (got.name, got.value, got.time_sharing, got.reason) == ("normal", 100, True, "")


def test_lowering_precedence_needs_no_permission_raising_it_does() -> None:
    cs = classes(pc("low", -10), pc("high", 1000), pc("exclusive", -5, sharing="false"))
    # Lower and time-shared: anyone.
    assert priorities.effective(job("low"), cs, {}).name == "low"
    # Higher: only where the Tenant lists it; else the default, named.
    refused = priorities.effective(job("high"), cs, {})
    assert (refused.name, refused.value, refused.reason) == ("", 0, priorities.NOT_ALLOWED)
    assert "tenant ns does not allow class 'high'" in refused.message
    assert priorities.effective(job("high"), cs, tenant("high")).name == "high"
    # Run to completion is a raise whatever its value: listed only.
    assert priorities.effective(job("exclusive"), cs, {}).reason == priorities.NOT_ALLOWED
    listed = priorities.effective(job("exclusive"), cs, tenant("exclusive"))
    assert (listed.name, listed.time_sharing) == ("exclusive", False)
    # The Tenant of another namespace allows nothing here.
    assert priorities.effective(job("high", "other"), cs, tenant("high")).reason


def test_a_class_that_does_not_exist_means_the_default_with_a_notice_naming_the_field() -> None:
    got = priorities.effective(job("missing"), classes(pc("low", -1)), {})
    assert (got.name, got.reason) == ("", priorities.NOT_FOUND)
    found = field_notices.job_notices(job("missing"), {"g"}, {}, classes(pc("low", -1)))
    assert [(n.field, n.reason) for n in found] == [
        ("spec.template.spec.priorityClassName", "PriorityClassNotFound")
    ]
    # Allowed classes, and callers that pass no classes, say nothing.
    assert field_notices.job_notices(job("low"), {"g"}, {}, classes(pc("low", -1))) == []
    assert field_notices.job_notices(job("missing"), {"g"}, {}) == []


names = st.sampled_from(["a", "b", "c", "d"])
class_objs = st.lists(
    st.tuples(names, st.integers(-100, 100), st.booleans(), st.booleans()),
    max_size=4,
    unique_by=lambda t: t[0],
)


@given(class_objs, st.frozensets(names), st.one_of(st.none(), names))
def test_a_user_never_gets_more_precedence_than_the_tenant_allows(
    objs: list[tuple[str, int, bool, bool]], listed: frozenset[str], asked: str | None
) -> None:
    cs = classes(*(pc(n, v, default=d, sharing="false" if not s else None) for n, v, d, s in objs))
    got = priorities.effective(job(asked), cs, tenant(*sorted(listed)))
    default = priorities.default_class(cs)
    raises = got.value > default.value or (not got.time_sharing and default.time_sharing)
    if raises:
        assert got.name in listed
    # What it got is either what it asked for, or the default with the reason.
    if asked is not None and got.name != asked:
        assert (got.name, got.value) == (default.name, default.value) and got.reason
    if asked is not None and asked in listed and asked in cs:
        assert got.name == asked and not got.reason


def test_run_to_completion_fits_inside_the_guarantee_at_every_level() -> None:
    tenants = {
        "org": governance.parse_tenant(
            {"metadata": {"name": "org"}, "spec": {"quotas": {"v100": {"guaranteed": 4}}}}
        ),
        "t": governance.parse_tenant(
            {
                "metadata": {"name": "t"},
                "spec": {
                    "namespaces": ["ns"],
                    "parent": "org",
                    "quotas": {"v100": {"guaranteed": 3}},
                },
            }
        ),
    }
    jobs = [job(None, "ns"), job(None, "ns"), job(None, "org")]
    g = priorities.Guarantees(jobs, tenants)
    assert g.room(0, "v100", 3) == ""
    g.take(0, "v100", 3)
    # t holds 3 of its 3: another GPU does not fit; org still has 1 for its own job.
    assert "tenant t's run-to-completion jobs hold 3 of its 3" in g.room(1, "v100", 1)
    assert g.room(2, "v100", 1) == ""
    g.take(2, "v100", 1)
    assert "tenant org" in g.room(2, "v100", 1)
    # No guarantee of a type: nothing starts there.
    assert "of its 0 guaranteed k80" in g.room(0, "k80", 1)


def test_the_tenant_schema_takes_a_set_of_class_names() -> None:
    ok = tenant_schema.TenantSpec.model_validate({"priorityClasses": ["high", "exclusive"]})
    assert ok.priority_classes == ["high", "exclusive"]
    with pytest.raises(pydantic.ValidationError, match="priorityClasses"):
        tenant_schema.TenantSpec.model_validate({"priorityClasses": ["high", "high"]})
    with pytest.raises(pydantic.ValidationError, match="priorityClasses"):
        tenant_schema.TenantSpec.model_validate({"priorityClasses": ["Not A Name"]})
    # A list the schema would refuse still parses: it only limits what the users may use.
    assert governance.parse_tenant({"spec": {"priorityClasses": "high"}}).priority_classes == set()


@given(
    st.lists(st.tuples(st.sampled_from(["ns", "other"]), st.one_of(st.none(), names)), max_size=8),
    class_objs,
    st.frozensets(names),
)
def test_resolving_many_jobs_at_once_is_resolving_each(
    rows: list[tuple[str, str | None]],
    objs: list[tuple[str, int, bool, bool]],
    listed: frozenset[str],
) -> None:
    cs = classes(*(pc(n, v, default=d, sharing="false" if not s else None) for n, v, d, s in objs))
    ts = tenant(*sorted(listed))
    jobs = [job(k, ns) for ns, k in rows]
    assert priorities.resolve(jobs, cs, ts) == [priorities.effective(j, cs, ts) for j in jobs]

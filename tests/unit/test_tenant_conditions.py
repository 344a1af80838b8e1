"""Each Tenant is told whether its parent and guarantees were accepted: ``QuotasValid`` False with
the field and reason ``walras.core.tenant_tree.validate`` gives (the tenant runs flat, without
quotas), True otherwise; written when it changes and in a refresh round, not every round.

Oracle: the rules of ``walras.core.tenant_tree`` applied by hand to two tenants that name each
other as parent (a cycle: both refused on ``spec.parent``) beside one without a parent.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.operator_fakes import FakeApi, make_loop


def tenant(name: str, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if parent:
        spec["parent"] = parent
    return {"metadata": {"name": name, "generation": 1}, "spec": spec}


def conditions(api: FakeApi, name: str) -> dict[str, Any]:
    (condition,) = api.statuses[f"tenants/{name}"]["conditions"]
    return condition


def test_a_cycle_is_refused_naming_spec_parent_and_said_once() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    for obj in (tenant("a", parent="b"), tenant("b", parent="a"), tenant("c")):
        rounds.store.upsert("tenant", obj)
    asyncio.run(rounds.run_round())
    for name in ("a", "b"):
        told = conditions(api, name)
        assert told["type"] == "QuotasValid" and told["status"] == "False"
        assert told["message"].startswith("spec.parent")
    assert conditions(api, "c")["status"] == "True"
    writes = [c for c in api.calls if c[0] == "status:tenants"]
    assert sorted(name for _, name in writes) == ["a", "b", "c"]

    asyncio.run(rounds.run_round())  # nothing changed: nothing is written again
    assert [c for c in api.calls if c[0] == "status:tenants"] == writes

    rounds.store.upsert("tenant", tenant("b"))  # the cycle is broken: both are accepted
    asyncio.run(rounds.run_round())
    assert conditions(api, "a")["status"] == "True" and conditions(api, "b")["status"] == "True"

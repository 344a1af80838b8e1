"""A Tenant's ``status.gpus`` lists only the GPU types it has now, also after the operator
restarts: a type the API server still shows from an earlier process, which this process never
wrote, is nulled in the merge patch (a merge patch keeps the map keys it does not name).

Oracle: a tenant without jobs, quotas or pools has no GPU type at all, so every type its stored
status lists is stale and must be patched to ``null``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.operator_fakes import FakeApi, make_loop

STALE_ROW = {"guaranteed": 0, "inUse": 2, "borrowed": 0, "lent": 0}


def stored_tenant(gpus: dict[str, Any]) -> dict[str, Any]:
    """The Tenant as the watch delivers it: its status written by an earlier operator."""
    return {
        "metadata": {"name": "t", "generation": 1},
        "spec": {"weight": 1},
        "status": {"gpus": gpus, "summary": "H100 2/0"},
    }


def test_a_restarted_operator_nulls_the_types_the_server_still_shows() -> None:
    api = FakeApi()
    rounds = make_loop(api)  # a fresh process: it remembers no status it wrote
    rounds.store.upsert("tenant", stored_tenant({"H100": STALE_ROW}))
    asyncio.run(rounds.run_round())
    assert api.statuses["tenants/t"]["gpus"] == {"H100": None}


def test_once_the_server_shows_no_stale_type_nothing_more_is_written() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    rounds.store.upsert("tenant", stored_tenant({"H100": STALE_ROW}))
    asyncio.run(rounds.run_round())
    rounds.store.upsert("tenant", stored_tenant({}))  # the watch delivers the patched object
    writes = [c for c in api.calls if c[0] == "status:tenants"]
    asyncio.run(rounds.run_round())
    assert [c for c in api.calls if c[0] == "status:tenants"] == writes


def test_a_type_still_stale_on_the_server_is_nulled_again_in_a_later_round() -> None:
    api = FakeApi()
    rounds = make_loop(api)
    asyncio.run(rounds.run_round())  # the tenant is unknown yet: nothing written for it
    rounds.store.upsert("tenant", stored_tenant({}))
    asyncio.run(rounds.run_round())
    # Another writer (an older operator replica still finishing its round) adds a type back.
    rounds.store.upsert("tenant", stored_tenant({"A100": STALE_ROW}))
    asyncio.run(rounds.run_round())
    assert api.statuses["tenants/t"]["gpus"] == {"A100": None}

"""Summing NodeAllocations (walras.core.totals): freshness, staleness, sums, matrix, alignment.

Table-driven cases with named scenarios; the oracle is a direct sum over the hand-built objects.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from walras.core import totals

NOW = dt.datetime(2026, 11, 22, 8, 0, 0, tzinfo=dt.UTC)


def alloc(name: str, tasks: dict[str, float], age: float | None, eligible=()) -> dict:
    status = {"tasks": tasks, "eligible": list(eligible)}
    if age is not None:
        status["timestamp"] = totals.format_time(NOW - dt.timedelta(seconds=age))
    created = totals.format_time(NOW - dt.timedelta(seconds=3600))
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


ITEMS = [
    alloc("n1", {"a": 1.0, "b": 2.0}, 1.0, ("a", "b")),
    alloc("n2", {"a": 3.0}, 29.0, ("a",)),
    alloc("n3", {"a": 100.0}, 31.0, ("a",)),  # too old
    alloc("gone", {"b": 50.0}, 0.5, ("b",)),  # node deleted
    alloc("n4", {}, None),  # never written, created an hour ago
    {
        "metadata": {"name": totals.TOTALS_NAME, "labels": {totals.ROLE_LABEL: "tenant-totals"}},
        "status": {"tasks": {"a": 999.0}, "timestamp": totals.format_time(NOW)},
    },
]
NODES = {"n1", "n2", "n3", "n4"}


@pytest.mark.parametrize(
    ("name", "stale_after", "fresh", "stale"),
    [
        ("30 s: old, gone and never-written are stale", 30.0, ["n1", "n2"], ["gone", "n3", "n4"]),
        ("2 s: only the newest counts", 2.0, ["n1"], ["gone", "n2", "n3", "n4"]),
        ("2 h: only the gone node is stale", 7200.0, ["n1", "n2", "n3", "n4"], ["gone"]),
    ],
)
def test_fresh_and_stale(name: str, stale_after: float, fresh: list[str], stale: list[str]) -> None:
    got_fresh, got_stale = totals.fresh_allocations(ITEMS, NODES, now=NOW, stale_after=stale_after)
    assert [i["metadata"]["name"] for i in got_fresh] == fresh, name
    assert got_stale == stale, name


def test_sums_and_counts_over_fresh_only() -> None:
    result = totals.sum_allocations(ITEMS, NODES, now=NOW, stale_after=30.0, iteration=7)
    assert result.tasks == {"a": 4.0, "b": 2.0}
    assert result.nodes == {"a": 2, "b": 1}
    assert result.node_names == ("n1", "n2")
    assert result.stale == ("gone", "n3", "n4")
    assert result.iteration == 7


def test_task_matrix_and_align_round_trip() -> None:
    matrix, tenants, nodes = totals.task_matrix(ITEMS, NODES, now=NOW, stale_after=30.0)
    assert tenants == ("a", "b") and nodes == ("n1", "n2")
    np.testing.assert_array_equal(matrix, [[1.0, 3.0], [2.0, 0.0]])
    # Column sums are the published totals.
    summed = totals.sum_allocations(ITEMS, NODES, now=NOW, stale_after=30.0).tasks
    assert dict(zip(tenants, matrix.sum(axis=1), strict=True)) == summed
    aligned = totals.align(matrix, tenants, nodes, ["c", "b", "a"], ["n2", "n9", "n1"])
    np.testing.assert_array_equal(aligned, [[0, 0, 0], [0, 0, 2.0], [3.0, 0, 1.0]])


@pytest.mark.parametrize(
    ("text", "ok"),
    [("2026-11-22T08:00:00.000001Z", True), ("2026-11-22T08:00:00Z", True), ("yesterday", False)],
)
def test_time_round_trip(text: str, ok: bool) -> None:
    parsed = totals.parse_time(text)
    assert (parsed is not None) == ok
    if parsed is not None:
        assert totals.parse_time(totals.format_time(parsed)) == parsed

"""Summing NodeAllocations into tenant totals x_n = Σ_i x_{n,i} (pure).

Called by the aggregator (``walras.agent.aggregator``) on each listing of NodeAllocations, and by
``walras.kube.agents.distributed_tasks`` for the operator's ``psdsf-distributed`` policy. An
allocation counts only while it is *fresh*: its node still exists and its ``status.timestamp`` is
at most ``stale_after`` seconds old. Stale ones are reported so that the caller deletes them; the
totals object itself (``TOTALS_NAME``) is never summed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Name of the one cluster-scoped NodeAllocation holding the published tenant totals.
TOTALS_NAME = "walras-tenant-totals"
ROLE_LABEL = "walras.dev/role"
TOTALS_ROLE = "tenant-totals"


@dataclass(frozen=True)
class Totals:
    """Published tenant totals and what went into them."""

    tasks: dict[str, float]  # tenant -> x_n
    nodes: dict[str, int]  # tenant -> fresh nodes where it is eligible
    node_names: tuple[str, ...]  # fresh allocations summed, sorted
    stale: tuple[str, ...]  # allocations ignored (node gone or too old), sorted
    timestamp: dt.datetime
    iteration: int
    source_version: str | None
    period: float


def parse_time(value: object) -> dt.datetime | None:
    """RFC 3339 (``...Z``) to an aware UTC datetime; None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def format_time(when: dt.datetime) -> str:
    """UTC RFC 3339 with microseconds, as written into ``status.timestamp``."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_totals(item: Mapping[str, Any]) -> bool:
    """The published-totals object (by name or role label)."""
    meta = item.get("metadata") or {}
    labels = meta.get("labels") or {}
    return meta.get("name") == TOTALS_NAME or labels.get(ROLE_LABEL) == TOTALS_ROLE


def fresh_allocations(
    items: Sequence[Mapping[str, Any]],
    node_names: Collection[str],
    *,
    now: dt.datetime,
    stale_after: float,
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """Split node allocations into (fresh, stale names); the totals object is in neither."""
    fresh: list[Mapping[str, Any]] = []
    stale: list[str] = []
    for item in items:
        if is_totals(item):
            continue
        name = str((item.get("metadata") or {}).get("name"))
        status = item.get("status") or {}
        when = parse_time(status.get("timestamp"))
        if when is None:
            # Created but never written: the agent is starting. Stale once the object is old.
            when = parse_time((item.get("metadata") or {}).get("creationTimestamp"))
        too_old = when is None or (now - when).total_seconds() > stale_after
        if name not in node_names or too_old:
            stale.append(name)
        else:
            fresh.append(item)
    return sorted(fresh, key=lambda i: str(i["metadata"]["name"])), sorted(stale)


def sum_allocations(
    items: Sequence[Mapping[str, Any]],
    node_names: Collection[str],
    *,
    now: dt.datetime,
    stale_after: float,
    iteration: int = 0,
    source_version: str | None = None,
    period: float = 0.0,
) -> Totals:
    """x_n and per-tenant eligible-node counts over the fresh allocations among ``items``."""
    fresh, stale = fresh_allocations(items, node_names, now=now, stale_after=stale_after)
    tasks: dict[str, float] = {}
    nodes: dict[str, int] = {}
    for item in fresh:
        status = item.get("status") or {}
        for tenant, value in sorted((status.get("tasks") or {}).items()):
            tasks[tenant] = tasks.get(tenant, 0.0) + float(value)
        for tenant in status.get("eligible") or ():
            nodes[tenant] = nodes.get(tenant, 0) + 1
    return Totals(
        tasks=dict(sorted(tasks.items())),
        nodes=dict(sorted(nodes.items())),
        node_names=tuple(str(i["metadata"]["name"]) for i in fresh),
        stale=tuple(stale),
        timestamp=now,
        iteration=iteration,
        source_version=source_version,
        period=period,
    )


def task_matrix(
    items: Sequence[Mapping[str, Any]],
    node_names: Collection[str],
    *,
    now: dt.datetime,
    stale_after: float,
) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
    """(N, K) x_{n,i} over fresh allocations, tenants and nodes sorted by name."""
    fresh, _ = fresh_allocations(items, node_names, now=now, stale_after=stale_after)
    nodes = tuple(str(i["metadata"]["name"]) for i in fresh)
    tenants = tuple(
        sorted({t for i in fresh for t in ((i.get("status") or {}).get("tasks") or {})})
    )
    row = {t: n for n, t in enumerate(tenants)}
    out = np.zeros((len(tenants), len(nodes)))
    for k, item in enumerate(fresh):
        for tenant, value in ((item.get("status") or {}).get("tasks") or {}).items():
            out[row[tenant], k] = float(value)
    return out, tenants, nodes


def align(
    tasks: np.ndarray,
    tenants: Sequence[str],
    nodes: Sequence[str],
    tenant_order: Sequence[str],
    node_order: Sequence[str],
) -> np.ndarray:
    """Re-index an (N, K) task matrix to another tenant/node order; missing entries are 0.

    The operator's ``psdsf-distributed`` policy uses it to put :func:`task_matrix` output (or
    ``walras.agent.distributed_tasks``) into the order of its own tenant model.
    """
    row = {t: n for n, t in enumerate(tenants)}
    col = {k: i for i, k in enumerate(nodes)}
    out = np.zeros((len(tenant_order), len(node_order)))
    for n, tenant in enumerate(tenant_order):
        if tenant not in row:
            continue
        for i, node in enumerate(node_order):
            if node in col:
                out[n, i] = tasks[row[tenant], col[node]]
    return out

"""Tenant totals for the node agents: ``walras agent --aggregate``.

Every ``period`` seconds (default 0.1) :func:`aggregate_once` lists the NodeAllocations and the
Node names, deletes allocations that are stale (older than ``stale_after`` or whose node is gone),
sums the fresh ones (``walras.core.totals``) and publishes the result in ONE object, the
cluster-scoped ``NodeAllocation/walras-tenant-totals`` (label ``walras.dev/role=tenant-totals``):

- ``status.tasks``: tenant → x_n; ``status.nodes``: tenant → fresh nodes where it is eligible;
- ``status.nodeCount``, ``status.period`` (seconds between publishes: a decaying maximum),
  ``status.sourceResourceVersion`` (resourceVersion of the list it summed), ``status.iteration``,
  ``status.timestamp``, ``status.residual`` (largest relative change of x_n).

Why a NodeAllocation and not a ConfigMap: agents and operator already have RBAC on
``nodeallocations`` and ``nodeallocations/status``; a ConfigMap would need ConfigMap rights and a
namespace. Agents GET this one object per step, so their cost does not grow with the number of
nodes; the aggregator's cost is one LIST per period, O(nodes), in one process.

:func:`distributed_tasks` is what the operator's ``psdsf-distributed`` policy calls to read the
converged x_{n,i} as a matrix.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client, watch

from walras.core import totals as totals_mod
from walras.core.totals import (
    ROLE_LABEL,
    TOTALS_NAME,
    TOTALS_ROLE,
    Totals,
    format_time,
    parse_time,
)
from walras.kube.agents import ALLOCATIONS, GROUP, VERSION, Kube, NotFoundError

log = logging.getLogger("walras.agent.aggregator")

#: Per publish, the published period forgets a longer past interval by this factor.
PERIOD_DECAY = 0.9
#: Seconds between Node LISTs in :func:`run` (a deleted node's allocation goes within this).
NODE_LIST_SECONDS = 1.0


def aggregate_once(
    api_client: client.ApiClient | Kube,
    *,
    stale_after: float,
    now: dt.datetime | None = None,
    node_names: Callable[[], set[str]] | None = None,
    allocations: Callable[[], tuple[list[dict[str, Any]], str | None]] | None = None,
) -> Totals:
    """List, clean up, sum and publish once; returns what was published.

    ``node_names`` replaces the Node LIST (the loop passes a cache refreshed every second) and
    ``allocations`` the NodeAllocation LIST (the loop passes its watch cache).
    """
    kube = api_client if isinstance(api_client, Kube) else Kube(api_client)
    items, rv = allocations() if allocations is not None else kube.list_custom(ALLOCATIONS)
    names = node_names() if node_names is not None else kube.node_names()
    when = now if now is not None else dt.datetime.now(dt.UTC)
    prior = next((i for i in items if totals_mod.is_totals(i)), None)
    prior_status = (prior or {}).get("status") or {}
    prior_time = parse_time(prior_status.get("timestamp"))
    interval = (
        0.0 if prior_time is None else min(60.0, max(0.0, (when - prior_time).total_seconds()))
    )
    # A slowly decaying maximum of the publish interval: after a stall (CPU contention, API
    # latency) agents keep assuming the longer window, and hence more concurrency, for a while.
    period = max(interval, PERIOD_DECAY * float(prior_status.get("period") or 0.0))
    result = totals_mod.sum_allocations(
        items,
        names,
        now=when,
        stale_after=stale_after,
        iteration=int(prior_status.get("iteration") or 0) + 1,
        source_version=rv,
        period=period,
    )
    for name in result.stale:
        log.info("deleting stale NodeAllocation %s", name)
        kube.delete_allocation(name)
    old = {str(k): float(v) for k, v in (prior_status.get("tasks") or {}).items()}
    scale = max([*result.tasks.values(), *old.values(), 1e-12])
    residual = max(
        (abs(result.tasks.get(t, 0.0) - old.get(t, 0.0)) for t in set(old) | set(result.tasks)),
        default=0.0,
    )
    status = {
        "tasks": {**{t: None for t in old if t not in result.tasks}, **result.tasks},
        "nodes": {
            **{t: None for t in (prior_status.get("nodes") or {}) if t not in result.nodes},
            **result.nodes,
        },
        "nodeCount": len(result.node_names),
        "period": period,
        "sourceResourceVersion": rv,
        "iteration": result.iteration,
        "timestamp": format_time(when),
        "residual": residual / scale,
    }
    if prior is None:
        kube.create_allocation(TOTALS_NAME, labels={ROLE_LABEL: TOTALS_ROLE})
    try:
        kube.patch_allocation_status(TOTALS_NAME, status)
    except NotFoundError:
        kube.create_allocation(TOTALS_NAME, labels={ROLE_LABEL: TOTALS_ROLE})
        kube.patch_allocation_status(TOTALS_NAME, status)
    return result


class AllocationCache:
    """NodeAllocations kept current by LIST then WATCH (thread); relists on 410 Gone.

    ``snapshot()`` returns the cached objects and the resourceVersion of the last event applied:
    watch events arrive in resourceVersion order, so every write up to that version is in the
    snapshot — what the agents' version check needs. One publish then costs O(changed objects)
    instead of a LIST of every allocation.
    """

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}
        self._rv: str | None = None
        self.synced = threading.Event()

    def snapshot(self) -> tuple[list[dict[str, Any]], str | None]:
        with self._lock:
            return list(self._items.values()), self._rv

    def _relist(self) -> None:
        items, rv = self.kube.list_custom(ALLOCATIONS)
        with self._lock:
            self._items = {str(i["metadata"]["name"]): i for i in items}
            self._rv = rv
        self.synced.set()

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """Apply one watch event; False when the watch must be restarted with a relist."""
        kind = event.get("type")
        obj = event.get("raw_object") or event.get("object") or {}
        if not isinstance(obj, Mapping):
            return True
        meta = obj.get("metadata") or {}
        if kind == "ERROR":
            return False
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._items[str(meta.get("name"))] = dict(obj)
            elif kind == "DELETED":
                self._items.pop(str(meta.get("name")), None)
            if meta.get("resourceVersion"):
                self._rv = str(meta["resourceVersion"])
        return True

    def run(self, stop: threading.Event) -> None:
        """Keep the cache current until ``stop`` is set."""
        relist = True
        while not stop.is_set():
            try:
                if relist:
                    self._relist()
                    relist = False
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]  # untyped library
                    self.kube.custom.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    ALLOCATIONS,
                    resource_version=self._rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=5,
                )
                for event in stream:
                    if not self._apply(event) or stop.is_set():
                        relist = not stop.is_set()
                        break
            except Exception:  # 410 Gone, connection reset: start over from a fresh LIST
                log.info("NodeAllocation watch restarted", exc_info=True)
                relist = True
                stop.wait(0.2)


def run(
    api_client: client.ApiClient | Kube,
    *,
    stop: threading.Event,
    stale_after: float = 30.0,
    period: float = 0.1,
    use_watch: bool = True,
) -> None:
    """Aggregate every ``period`` seconds until ``stop`` is set; errors are logged and retried.

    With ``use_watch`` the allocations come from an :class:`AllocationCache` (LIST + WATCH), not
    from a LIST per publish.
    """
    kube = api_client if isinstance(api_client, Kube) else Kube(api_client)
    nodes_seen: dict[str, Any] = {"at": -1e18, "names": set()}

    def node_names() -> set[str]:
        # Nodes come and go rarely; listing them (full objects) every 0.1 s would dominate.
        if time.monotonic() - nodes_seen["at"] > NODE_LIST_SECONDS:
            nodes_seen["names"] = kube.node_names()
            nodes_seen["at"] = time.monotonic()
        names: set[str] = nodes_seen["names"]
        return names

    allocations = None
    if use_watch:
        cache = AllocationCache(kube)
        threading.Thread(target=cache.run, args=(stop,), name="nodeallocation-watch").start()
        cache.synced.wait(30.0)
        allocations = cache.snapshot
    while not stop.is_set():
        started = time.monotonic()
        try:
            aggregate_once(
                kube, stale_after=stale_after, node_names=node_names, allocations=allocations
            )
        except Exception:  # keep publishing through API hiccups
            log.exception("aggregation failed")
        stop.wait(max(0.0, period - (time.monotonic() - started)))

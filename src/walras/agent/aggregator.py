"""Tenant totals for the node agents: ``walras agent --aggregate``.

:func:`run` keeps the NodeAllocations in an informer (LIST, then WATCH) and publishes when one
changes, ``COALESCE_SECONDS`` (50 ms) after the first unpublished change, so that agents stepping
together land in one publish; a quiet cluster is published every ``HOUSEKEEPING_SECONDS`` only.
Each publish (:func:`aggregate_once`) takes the cached NodeAllocations and the Node names,
deletes allocations that are stale (older than ``stale_after`` or whose node is gone), sums the
fresh ones (``walras.core.totals``) and publishes the result in ONE object, the
cluster-scoped ``NodeAllocation/walras-tenant-totals`` (label ``walras.dev/role=tenant-totals``):

- ``status.tasks``: tenant → x_n; ``status.nodes``: tenant → fresh nodes where it is eligible;
- ``status.nodeCount``, ``status.period`` (age of the oldest change when it is published, i.e.
  how stale the totals an agent acts on can be; a decaying maximum),
  ``status.sourceResourceVersion`` (resourceVersion of the list it summed), ``status.iteration``,
  ``status.timestamp``, ``status.residual`` (largest relative change of x_n).

Why a NodeAllocation and not a ConfigMap: agents and operator already have RBAC on
``nodeallocations`` and ``nodeallocations/status``; a ConfigMap would need ConfigMap rights and a
namespace. Agents watch this one object, so their cost does not grow with the number of nodes;
the aggregator's cost is O(changed allocations) per publish, in one process.

:func:`distributed_tasks` is what the operator's ``psdsf-distributed`` policy calls to read the
converged x_{n,i} as a matrix.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from walras.agent import metrics
from walras.core import totals as totals_mod
from walras.core.totals import (
    ROLE_LABEL,
    TOTALS_NAME,
    TOTALS_ROLE,
    Totals,
    format_time,
    parse_time,
)
from walras.kube.agents import ALLOCATIONS, Informer, Kube, NotFoundError

log = logging.getLogger("walras.agent.aggregator")

#: Per publish, the published period forgets a longer past interval by this factor.
PERIOD_DECAY = 0.9
#: Seconds between Node LISTs in :func:`run` (a deleted node's allocation goes within this).
NODE_LIST_SECONDS = 1.0
#: Coalescing window: a publish waits this long after the first unpublished change.
COALESCE_SECONDS = 0.05
#: Longest time between publishes of a quiet cluster (stale allocations are deleted then).
HOUSEKEEPING_SECONDS = 5.0


def aggregate_once(
    api_client: client.ApiClient | Kube,
    *,
    stale_after: float,
    now: dt.datetime | None = None,
    node_names: Callable[[], set[str]] | None = None,
    allocations: Callable[[], tuple[list[dict[str, Any]], str | None]] | None = None,
    delay: float | None = None,
) -> Totals:
    """List, clean up, sum and publish once; returns what was published.

    ``node_names`` replaces the Node LIST (the loop passes a cache refreshed every second) and
    ``allocations`` the NodeAllocation LIST (the loop passes its watch cache). ``delay``: how
    old the oldest change in this publish is (the event-driven loop); without it, the time since
    the previous publish (the periodic loop).
    """
    kube = api_client if isinstance(api_client, Kube) else Kube(api_client)
    items, rv = allocations() if allocations is not None else kube.list_custom(ALLOCATIONS)
    names = node_names() if node_names is not None else kube.node_names()
    when = now if now is not None else dt.datetime.now(dt.UTC)
    prior = next((i for i in items if totals_mod.is_totals(i)), None)
    prior_status = (prior or {}).get("status") or {}
    prior_time = parse_time(prior_status.get("timestamp"))
    if delay is not None:
        interval = min(60.0, max(0.0, delay))
    else:
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


class _NodeNames:
    """The cluster's Node names, LISTed at most every ``NODE_LIST_SECONDS``: inline on demand
    (:meth:`get` with ``inline``) or by a background thread (:meth:`refresh`). Nodes come and go
    rarely; listing them every publish would dominate."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        self._names: set[str] | None = None
        self._at = -1e18

    def _list(self) -> set[str]:
        names = self.kube.node_names()
        with self._lock:
            self._names, self._at = names, time.monotonic()
        return names

    def get(self, *, inline: bool) -> set[str]:
        with self._lock:
            names, at = self._names, self._at
        if names is None or (inline and time.monotonic() - at > NODE_LIST_SECONDS):
            return self._list()
        return names

    def refresh(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._list()
            except Exception:  # keep the last names through API hiccups; retried next period
                log.exception("listing nodes failed")
            stop.wait(NODE_LIST_SECONDS)


class _Dirty:
    """Time of the first NodeAllocation change not yet published (None: nothing pending)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.since: float | None = None

    def mark(self, name: str) -> None:
        if name == TOTALS_NAME:  # our own publish: not a change to publish
            return
        with self._cond:
            if self.since is None:
                self.since = time.monotonic()
            self._cond.notify_all()

    def wait(self, timeout: float) -> float | None:
        """Wait for a pending change; returns (and clears) its time, or None on timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self.since is not None, timeout=timeout)
            since, self.since = self.since, None
            return since


def run(
    api_client: client.ApiClient | Kube,
    *,
    stop: threading.Event,
    stale_after: float = 30.0,
    period: float = 0.1,
    use_watch: bool = True,
    window: float = COALESCE_SECONDS,
    metrics_port: int = 0,
) -> None:
    """Publish until ``stop`` is set; errors are logged and retried.

    With ``use_watch`` (the default) the NodeAllocations come from an informer (LIST + WATCH)
    and a publish follows each change after a coalescing ``window``: the writes of agents that
    step within the window go out together, and a quiet cluster costs no publishes. Every
    ``stale_after / 3`` seconds (at most ``HOUSEKEEPING_SECONDS``) a publish runs anyway, which
    deletes allocations that went stale. Without ``use_watch`` it lists and publishes every
    ``period`` seconds (the old loop, kept for comparison).
    """
    kube = api_client if isinstance(api_client, Kube) else Kube(api_client)
    metrics.serve(metrics_port, kube)
    nodes = _NodeNames(kube)
    if use_watch:
        # Off the publish path: under a loaded API server one Node LIST of 500 nodes took about
        # a second, and listing inline held every publish for it (the 500-agent benchmark's
        # totals then came once per 1.4 s instead of once per 0.1 s).
        threading.Thread(target=nodes.refresh, args=(stop,), daemon=True).start()

    def node_names() -> set[str]:
        return nodes.get(inline=not use_watch)

    if not use_watch:
        while not stop.is_set():
            started = time.monotonic()
            try:
                aggregate_once(kube, stale_after=stale_after, node_names=node_names)
                metrics.AGGREGATOR_PUBLISHES.inc()
            except Exception:  # keep publishing through API hiccups
                log.exception("aggregation failed")
            stop.wait(max(0.0, period - (time.monotonic() - started)))
        return
    dirty = _Dirty()
    informer = Informer(kube, ALLOCATIONS, on_change=dirty.mark).start(stop)

    def allocations() -> tuple[list[dict[str, Any]], str | None]:
        items, version, _ = informer.snapshot()
        return items, version

    housekeeping = min(HOUSEKEEPING_SECONDS, stale_after / 3.0)
    while not stop.is_set():
        since = dirty.wait(housekeeping)
        if stop.is_set():
            break
        if since is not None:
            # Coalesce: let the agents stepping right now land in this publish.
            stop.wait(max(0.0, since + window - time.monotonic()))
        try:
            started = since if since is not None else time.monotonic()
            aggregate_once(
                kube,
                stale_after=stale_after,
                node_names=node_names,
                allocations=allocations,
                delay=time.monotonic() - started,
            )
            delay = time.monotonic() - started
            metrics.AGGREGATOR_PUBLISHES.inc()
            metrics.AGGREGATOR_DELAY.set(delay)
        except Exception:  # keep publishing through API hiccups
            log.exception("aggregation failed")
            stop.wait(0.2)

"""The node agent loop: ``walras agent --node-name NODE`` (one per node, the chart's DaemonSet).

Every ``τ · (1 + U(−jitter, jitter))`` seconds the agent

1. reads its own Node (capacity, labels, readiness) — never another node;
2. reads FungibleJobs, ResourcePools and Tenants (through :class:`SharedReads`, a time-to-live
   cache one process may share between several agents) and builds its column of the tenant
   model (``walras.agent.columns``), the same model the central ``psdsf`` policy builds;
3. reads the published tenant totals ``x_n`` (the one ``walras-tenant-totals`` object) and waits
   until they include its own last write (resourceVersion check, see ``walras.agent.steps``);
4. runs the damped one-node PS-DSF update (``walras.agent.steps.agent_step``);
5. merge-patches ``NodeAllocation/<node>`` status: ``tasks``, ``pods``, ``eligible``,
   ``iteration``, ``timestamp``, ``residual``, ``damping``; and sets ``walras_agent_residual``.

API requests per step: 1 node GET, 1 totals GET, at most 1 status PATCH, plus a share of the
job/pool LISTs (one per TTL per process); watching, the reads come from informers. None of it
grows with the number of nodes. A step whose every move is negligible
(``walras.agent.steps.negligible``: within ``write_tolerance · x_n / K_n``) writes nothing but a
timestamp heartbeat every ``heartbeat`` seconds (default ``stale_after / 3``), which keeps the
allocation fresh for the aggregator without rewriting a converged state every τ. The per-tenant
pace of the scaled step (``walras.agent.steps.Pace``) is the agent's only other state.

**Back-off.** An API server that cannot take every agent's write per τ queues them: the writes'
latency grows, and with it the window ``W`` every agent's step must assume (``c_n ∝ W/τ``) and
the time to converge (∝ W). When a write took longer than ``LATENCY_SHARE · τ`` (100 ms at
τ = 1 s; a 100-agent cluster on the benchmark's 2 cores writes in about 12 ms, 500 agents in
about 240 ms) the agent lengthens its period by ``BACKOFF_STEP`` (up to ``MAX_BACKOFF · τ``) and
shortens it again after faster writes, as a TCP sender does; the step is told the period it
really has, so ``c_n`` stays the number of nodes acting within one window.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiException

from walras.agent import columns, metrics, steps
from walras.core.totals import TOTALS_NAME, format_time, parse_time
from walras.kube.agents import (
    ALLOCATIONS,
    JOBS,
    NODES,
    POOLS,
    TENANTS,
    Informer,
    Kube,
    NotFoundError,
)

log = logging.getLogger("walras.agent")

#: Back-off: a write slower than this share of τ lengthens the period by BACKOFF_STEP (at most
#: MAX_BACKOFF times τ); a faster one shortens it by the same factor (module docstring).
LATENCY_SHARE = 0.1
BACKOFF_STEP = 1.25
MAX_BACKOFF = 3.0


@dataclass(frozen=True)
class AgentConfig:
    """Settings of one agent (CLI flags of ``walras agent``)."""

    node_name: str
    tau: float = 1.0
    jitter: float = steps.DEFAULT_JITTER
    damping: float = steps.DEFAULT_DAMPING
    mode: str = "tdm"
    stale_after: float = 30.0
    heartbeat: float | None = None
    write_tolerance: float = steps.WRITE_TOLERANCE
    seed: int | None = None
    method: str = steps.DEFAULT_METHOD
    pace: bool = True
    back_off: bool = True

    @property
    def heartbeat_seconds(self) -> float:
        return self.heartbeat if self.heartbeat is not None else self.stale_after / 3.0


@dataclass(frozen=True)
class StepOutcome:
    """What one step did (for logs, tests and the benchmark)."""

    wrote: bool
    residual: float
    damping: float
    skipped: str | None
    iteration: int


def _version(value: object) -> int | None:
    """A resourceVersion as an integer (etcd revision); None when it is not one."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def parse_totals(obj: Mapping[str, Any] | None) -> steps.PublishedTotals | None:
    """The totals object's status as :class:`steps.PublishedTotals`; None before the first one."""
    if obj is None:
        return None
    status = obj.get("status") or {}
    if "tasks" not in status and "iteration" not in status:
        return None
    return steps.PublishedTotals(
        tasks={str(k): float(v) for k, v in (status.get("tasks") or {}).items()},
        nodes={str(k): int(v) for k, v in (status.get("nodes") or {}).items()},
        period=float(status.get("period") or 0.0),
        source_version=_version(status.get("sourceResourceVersion")),
        iteration=int(status.get("iteration") or 0),
    )


class SharedReads:
    """Cluster-wide reads (jobs, pools, tenants, totals, nodes), shareable by the agents of one
    process.

    ``watch=True`` (what ``walras agent`` runs): each kind is an :class:`~walras.kube.agents.
    Informer` — one LIST, then a WATCH that streams changes — so a step reads memory, not the
    API, and a published totals object reaches the agents as soon as the aggregator writes it.
    ``nodes``: the node names this process serves; one node is watched by a field selector
    (the DaemonSet), several by watching every Node (the benchmark's worker processes).

    ``watch=False`` polls instead: job/pool lists at most every ``ttl`` seconds, the totals
    object at most every ``totals_ttl`` (0: a GET per call), a GET of the node per step.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        ttl: float = 1.0,
        totals_ttl: float = 0.0,
        watch: bool = False,
        nodes: Sequence[str] = (),
        stop: threading.Event | None = None,
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.totals_ttl = totals_ttl
        self._lock = threading.Lock()
        self._objects: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        self._tenants: list[dict[str, Any]] = []
        self._tenants_warned = False
        self._objects_at = -1e18
        self._generation = 0
        self._totals: steps.PublishedTotals | None = None
        self._totals_at = -1e18
        self._informers: dict[str, Informer] = {}
        if watch:
            self.stop = stop if stop is not None else threading.Event()
            self._start_informers(list(nodes))

    def _start_informers(self, nodes: list[str]) -> None:
        one = f"metadata.name={nodes[0]}" if len(nodes) == 1 else None
        specs: list[tuple[str, str, str | None, bool]] = [
            ("jobs", JOBS, None, False),
            ("pools", POOLS, None, False),
            ("tenants", TENANTS, None, True),
            ("totals", ALLOCATIONS, f"metadata.name={TOTALS_NAME}", False),
            ("nodes", NODES, one, False),
        ]
        for key, kind, selector, optional in specs:
            informer = Informer(self.kube, kind, field_selector=selector, optional=optional)
            self._informers[key] = informer.start(self.stop)

    @property
    def watching(self) -> bool:
        return bool(self._informers)

    def node(self, name: str) -> dict[str, Any]:
        """This node's Node object; raises :class:`NotFoundError`."""
        if not self.watching:
            return self.kube.read_node(name)
        found = self._informers["nodes"].get(name)
        if found is None:
            raise NotFoundError(name)
        return found

    def jobs_and_pools(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        """Jobs, pools and a generation number that changes whenever either changed."""
        if self.watching:
            jobs, pools, tenants = (self._informers[k] for k in ("jobs", "pools", "tenants"))
            generation = jobs.generation + pools.generation + tenants.generation
            return jobs.items(), pools.items(), generation
        with self._lock:
            if time.monotonic() - self._objects_at > self.ttl:
                jobs_list, _ = self.kube.list_custom(JOBS)
                pools_list, _ = self.kube.list_custom(POOLS)
                self._tenants = self._list_tenants()
                self._objects = (jobs_list, pools_list)
                self._objects_at = time.monotonic()
                self._generation += 1
            return self._objects[0], self._objects[1], self._generation

    def tenants(self) -> list[dict[str, Any]]:
        """The Tenant objects (of the last :meth:`jobs_and_pools` listing when polling)."""
        if self.watching:
            return self._informers["tenants"].items()
        with self._lock:
            return self._tenants

    def _list_tenants(self) -> list[dict[str, Any]]:
        """Tenant objects; none (a job's tenant is then its namespace, weight 1) when the CRD is
        not installed or this ServiceAccount may not list them, said once in the log because the
        agents' weights then differ from the central policy's."""
        try:
            return self.kube.list_custom(TENANTS)[0]
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            if not self._tenants_warned:
                log.warning(
                    "cannot list Tenants (HTTP %s): tenants are namespaces with weight 1, which "
                    "differs from the central psdsf policy if the cluster has Tenant objects",
                    exc.status,
                )
                self._tenants_warned = True
            return []

    def totals(
        self, newer_than: int | None = None, *, wait: float = 0.0
    ) -> steps.PublishedTotals | None:
        """The published totals; when watching, waits up to ``wait`` seconds for totals whose
        source version is at least ``newer_than`` (the caller's own last write)."""
        if self.watching:
            informer = self._informers["totals"]
            deadline = time.monotonic() + wait
            while True:
                generation = informer.generation
                parsed = parse_totals(informer.get(TOTALS_NAME))
                behind = (
                    newer_than is not None
                    and parsed is not None
                    and parsed.source_version is not None
                    and parsed.source_version < newer_than
                )
                left = deadline - time.monotonic()
                if not behind or left <= 0:
                    return parsed
                informer.wait_change(generation, left)
        with self._lock:
            cached = self._totals
            behind = (
                newer_than is not None
                and cached is not None
                and cached.source_version is not None
                and cached.source_version < newer_than
            )
            if cached is None or behind or time.monotonic() - self._totals_at > self.totals_ttl:
                self._totals = parse_totals(self.kube.get_allocation(TOTALS_NAME))
                self._totals_at = time.monotonic()
            return self._totals


class Agent:
    """One node's agent; :meth:`step` is one iteration, :meth:`run` the loop."""

    def __init__(self, kube: Kube, config: AgentConfig, reads: SharedReads | None = None) -> None:
        self.kube = kube
        self.config = config
        self.reads = reads if reads is not None else SharedReads(kube, ttl=config.tau)
        self.rng = random.Random(config.seed if config.seed is not None else config.node_name)
        self.previous: dict[str, float] = {}
        self.eligible: tuple[str, ...] = ()
        self.version: int | None = None
        self.iteration = 0
        self.first = True
        self.last_write = -1e18
        self.latency = 0.0  # read-to-write seconds of the last written step
        self.started = False
        self._column: steps.Column | None = None
        self._column_key: tuple[int, object] | None = None
        self.pace = steps.Pace.start()
        self.backoff = 1.0  # the period is τ · backoff

    # ----------------------------------------------------------------- state

    def _resume(self, node: Mapping[str, Any]) -> None:
        """Pick up this node's own fresh allocation after a restart; create one otherwise."""
        existing = self.kube.get_allocation(self.config.node_name)
        status = (existing or {}).get("status") or {}
        when = parse_time(status.get("timestamp"))
        now = dt.datetime.now(dt.UTC)
        if existing and when and (now - when).total_seconds() <= self.config.stale_after:
            self.previous = {str(k): float(v) for k, v in (status.get("tasks") or {}).items()}
            self.eligible = tuple(status.get("eligible") or ())
            self.version = _version(existing["metadata"].get("resourceVersion"))
            self.iteration = int(status.get("iteration") or 0)
            self.first = False
        else:
            self._create(node)
        self.started = True

    def _create(self, node: Mapping[str, Any] | None = None) -> None:
        owner = None
        if node is not None:
            meta = node.get("metadata") or {}
            owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": str(meta.get("name")),
                "uid": str(meta.get("uid")),
            }
        created = self.kube.create_allocation(self.config.node_name, owner=owner)
        self.version = _version((created.get("metadata") or {}).get("resourceVersion"))
        self.previous, self.eligible, self.first = {}, (), True

    # ------------------------------------------------------------------ step

    def step(self) -> StepOutcome:
        """One agent iteration (see the module docstring)."""
        cfg = self.config
        try:
            node = self.reads.node(cfg.node_name)
        except NotFoundError:
            return StepOutcome(False, 0.0, 0.0, "node not found", self.iteration)
        if not self.started:
            self._resume(node)
        jobs, pools, generation = self.reads.jobs_and_pools()
        # The column only changes with the node, the jobs or the pools: rebuild it then.
        key = (generation, (node.get("metadata") or {}).get("resourceVersion"))
        if self._column is None or key != self._column_key:
            self._column = columns.node_column(node, jobs, pools, self.reads.tenants())
            self._column_key = key
        column = self._column
        # Watching, the totals that include our own last write usually arrive within the
        # aggregator's coalescing window: wait for them (up to a period) instead of skipping
        # the step and acting a whole period later. A slow aggregator (a loaded API server)
        # thus paces the agents rather than making them skip.
        totals = self.reads.totals(None if self.first else self.version, wait=cfg.tau)
        read_at = time.monotonic()  # the agent's latency counts from here, not the wait
        if totals is None:
            totals = steps.PublishedTotals({}, {}, 0.0, None, 0)
            if not self.first:
                return StepOutcome(False, 0.0, 0.0, "no totals published yet", self.iteration)
        elif (
            not self.first
            and self.version is not None
            and totals.source_version is not None
            and totals.source_version < self.version
        ):
            # Keep the allocation fresh while the aggregator lags: a slow publish must not make
            # it stale (deleted), which would disturb the totals everyone else reads.
            wrote = self._heartbeat(node)
            return StepOutcome(wrote, 0.0, 0.0, "totals older than own write", self.iteration)
        result = steps.agent_step(
            column,
            totals,
            self.previous,
            tau=self.period,
            base_damping=cfg.damping,
            mode=cfg.mode,
            first=self.first,
            latency=self.latency,
            method=cfg.method,
            pace=self.pace if cfg.pace else None,
        )
        metrics.observe_step(cfg.node_name, result.residual, result.damping, result.method)
        now_mono = time.monotonic()
        unchanged = (
            not self.first
            and result.eligible == self.eligible
            and steps.negligible(column, totals, self.previous, result, cfg.write_tolerance)
        )
        if unchanged:
            # Nothing worth a write: keep the written allocation (the totals hold it) and only
            # refresh its timestamp when the heartbeat is due, so it does not go stale.
            wrote = self._heartbeat(node, result.residual)
            return StepOutcome(wrote, result.residual, result.damping, None, self.iteration)
        status: dict[str, Any] = {
            "tasks": dict(result.tasks),
            "pods": dict(result.pods),
            "eligible": list(result.eligible),
            "iteration": self.iteration + 1,
            "timestamp": format_time(dt.datetime.now(dt.UTC)),
            "residual": result.residual,
            "damping": result.damping,
        }
        # Merge patch: tenants that left must be removed explicitly.
        for gone in set(self.previous) - set(result.tasks):
            status["tasks"][gone] = None
            status["pods"][gone] = None
        try:
            rv = self.kube.patch_allocation_status(cfg.node_name, status)
        except NotFoundError:
            # The aggregator deleted our allocation as stale: start afresh (not in the totals).
            self._create(node)
            for gone in [k for k, v in status["tasks"].items() if v is None]:
                del status["tasks"][gone]
                del status["pods"][gone]
            rv = self.kube.patch_allocation_status(cfg.node_name, status)
        self.version = _version(rv)
        self.latency = time.monotonic() - read_at
        if cfg.back_off:
            self._back_off()
        self.previous = dict(result.tasks)
        if result.pace is not None:
            self.pace = result.pace
        self.eligible = result.eligible
        self.iteration += 1
        self.first = False
        self.last_write = now_mono
        return StepOutcome(True, result.residual, result.damping, None, self.iteration)

    def _heartbeat(self, node: Mapping[str, Any], residual: float | None = None) -> bool:
        """Refresh ``status.timestamp`` when the last write is ``heartbeat`` seconds old, and
        ``status.residual`` to the unwritten step's (else it would keep the last written move's,
        e.g. 1 for a node whose first answer was already its final one)."""
        now_mono = time.monotonic()
        if self.first or now_mono - self.last_write < self.config.heartbeat_seconds:
            return False
        status: dict[str, Any] = {"timestamp": format_time(dt.datetime.now(dt.UTC))}
        if residual is not None:
            status["residual"] = residual
        try:
            self.kube.patch_allocation_status(self.config.node_name, status)
        except NotFoundError:
            self._create(node)  # deleted as stale after all: start afresh next step
            return True
        self.last_write = now_mono
        return True

    @property
    def period(self) -> float:
        """The agent's step period: τ times its back-off (module docstring)."""
        return self.config.tau * self.backoff

    def _back_off(self) -> None:
        """After a write: lengthen the period while the write took more than LATENCY_SHARE · τ
        (the API server is queueing), shorten it back towards τ otherwise."""
        if self.latency > LATENCY_SHARE * self.config.tau:
            self.backoff = min(MAX_BACKOFF, self.backoff * BACKOFF_STEP)
        else:
            self.backoff = max(1.0, self.backoff / BACKOFF_STEP)

    def next_delay(self) -> float:
        """period · (1 + U(−jitter, jitter)), at least 10 ms."""
        j = self.config.jitter
        return max(0.01, self.period * (1.0 + self.rng.uniform(-j, j)))

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set; API errors are logged and retried next period."""
        # A random first delay spreads agents that start together.
        stop.wait(self.rng.uniform(0.0, self.config.tau))
        while not stop.is_set():
            started = time.monotonic()
            try:
                outcome = self.step()
                kind = "wrote" if outcome.wrote else "skipped" if outcome.skipped else "unchanged"
                metrics.AGENT_STEPS.labels(node=self.config.node_name, outcome=kind).inc()
                log.debug(
                    "node=%s iteration=%d wrote=%s residual=%.3g damping=%.3g skipped=%s",
                    self.config.node_name,
                    outcome.iteration,
                    outcome.wrote,
                    outcome.residual,
                    outcome.damping,
                    outcome.skipped,
                )
            except Exception:  # the loop must survive API hiccups; the next step retries
                log.exception("agent step failed on node %s", self.config.node_name)
            stop.wait(max(0.0, self.next_delay() - (time.monotonic() - started)))


def run_agents(
    kube: Kube,
    configs: Sequence[AgentConfig],
    stop: threading.Event,
    *,
    metrics_port: int = 0,
    watch: bool = True,
) -> None:
    """Run the agents of ``configs`` as threads of this process until ``stop`` is set (what
    ``walras agent --node-name`` does); they share one :class:`SharedReads` (informers when
    ``watch``) and serve ``/metrics`` on ``metrics_port`` (0: not served)."""
    metrics.serve(metrics_port, kube)
    tau = min((c.tau for c in configs), default=1.0)
    reads = SharedReads(kube, ttl=tau, watch=watch, nodes=[c.node_name for c in configs], stop=stop)
    threads = [
        threading.Thread(target=Agent(kube, cfg, reads).run, args=(stop,), name=cfg.node_name)
        for cfg in configs
    ]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        stop.wait(0.5)
        for thread in threads:
            thread.join(timeout=0.01)

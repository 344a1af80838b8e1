"""The operator's round loop: snapshot → ``walras.core.cycle.plan`` (worker thread) → writes.

Started by ``walras.operator.main`` next to kopf's watchers. Every ``round_seconds`` it runs a full
round; a job arriving or finishing (``poke``) runs an *incremental* round within ``debounce``
seconds, which fills free GPUs without cutting running slices short. Between rounds it binds pods
whose GPUs were still held by pods being deleted (``poke_binds`` on every pod deletion).

A round writes only while ``is_leader()`` is true. Each write is one of: delete pod, create pod,
bind pod (gang: all of a job's pods once they all fit on their nodes), merge-patch a status that
changed, post an Event not posted before. The loop never raises out of a round: a failing policy
is logged and counted, and the next round retries on a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from walras.core import conditions as cond
from walras.core import crd, cycle, filters, model, policies, realise, snapshot
from walras.kube import writes as kubeapi
from walras.operator import health, metrics, status

logger = logging.getLogger("walras.operator.loop")


@dataclass(frozen=True, slots=True)
class LoopConfig:
    policy: str = "price-discovery"
    round_seconds: float = 360.0
    eps: float = 1e-3
    backend: str = "auto"
    debounce: float = 0.3
    # /readyz turns 503 after this many failed rounds in a row (walras.operator.health.ROUNDS).
    max_failed_rounds: int = 3


@dataclass(slots=True)
class RoundReport:
    """Timings and counts of one round (logged as one JSON line; read by the benchmark)."""

    round: int
    incremental: bool
    jobs: int = 0
    nodes: int = 0
    snapshot: float = 0.0
    solve: float = 0.0
    realise: float = 0.0
    writes: float = 0.0
    total: float = 0.0
    deletes_s: float = 0.0
    creates_s: float = 0.0
    binds_s: float = 0.0
    status_s: float = 0.0
    creates: int = 0
    binds: int = 0
    deletes: int = 0
    status_patches: int = 0
    events: int = 0
    errors: int = 0
    iterations: int = 0
    gap: float = 0.0
    prices: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _PendingBind:
    namespace: str
    name: str
    node: str
    gpus: int


class RoundLoop:
    """Owns the schedule state (histories, round counter, bind queue) of one operator process."""

    def __init__(
        self,
        store: snapshot.Store,
        api: kubeapi.Api,
        config: LoopConfig,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        distributed_reader: policies.DistributedReader | None = None,
    ) -> None:
        self.store = store
        self.api = api
        self.config = config
        self.is_leader = is_leader
        self.policy = policies.create(
            config.policy,
            policies.PolicyOptions(
                eps=config.eps, backend=config.backend, distributed_reader=distributed_reader
            ),
        )
        self.round_no = 0
        self.state = cycle.CycleState()
        self.pending: dict[model.JobKey, list[_PendingBind]] = {}
        # Pods we bound that the watch has not shown bound yet: pod -> (node, gpus, when).
        self.ledger: dict[model.JobKey, tuple[str, dict[str, float], float]] = {}
        self._bound_index: tuple[int, dict[model.JobKey, list[str]]] = (-1, {})
        self.events_posted: dict[str, tuple[str, str]] = {}
        self.last_report: RoundReport | None = None
        self.last_solution: policies.Solution | None = None
        self._wake = asyncio.Event()
        self._poked = False
        self._bind_poked = False
        self.rounds_done = 0
        # The first round after start-up or after winning the Lease rewrites every status: the
        # new leader takes over the persisted history and stamps its own round number.
        self._refresh_all = True

    # ------------------------------------------------------------------ triggers

    def poke(self) -> None:
        """A job arrived or finished: run an incremental round soon."""
        self._poked = True
        self._wake.set()

    def poke_binds(self) -> None:
        """A pod went away: pending binds may fit now."""
        if self.pending:
            self._bind_poked = True
            self._wake.set()

    # ------------------------------------------------------------------ main loop

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        self.round_no = self._initial_round()
        while not stop.is_set():
            timeout = max(0.0, next_full - loop.time())
            if self.pending:
                timeout = min(timeout, 0.25)
            if not (self._poked or self._bind_poked):
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait(
                    {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                stopper.cancel()
            self._wake.clear()
            if stop.is_set():
                break
            if not self.is_leader():
                self._poked = self._bind_poked = False
                self._refresh_all = True
                self.pending.clear()
                next_full = loop.time() + min(self.config.round_seconds, 1.0)
                continue
            if self._refresh_all:
                # Just started or just won the Lease: the previous leader may have used rounds
                # above ours meanwhile; stay above them so no pod name is ever reused.
                self.round_no = max(self.round_no, self._initial_round())
            full_due = loop.time() >= next_full
            if self._poked and not full_due:
                await asyncio.sleep(self.config.debounce)  # let a burst of arrivals settle
                full_due = loop.time() >= next_full
            if full_due or self._poked:
                self._poked = False
                await self.run_round(incremental=not full_due)
                if full_due:
                    next_full = loop.time() + self.config.round_seconds
            self._bind_poked = False
            if self.pending:
                await self.bind_pending()

    def _initial_round(self) -> int:
        """Above every round any existing pod or job status used (no pod name is reused)."""
        highest = 0
        for pod in self.store.pods.values():
            highest = max(highest, pod.round)
        for job in self.store.jobs.values():
            try:
                highest = max(highest, int(job.status.get("round") or 0))
            except (TypeError, ValueError):
                continue
        return highest

    # ------------------------------------------------------------------ one round

    async def run_round(self, *, incremental: bool = False) -> RoundReport:
        """One round; never raises (a failure is logged and the next round retries)."""
        self.round_no += 1
        report = RoundReport(round=self.round_no, incremental=incremental)
        t0 = time.perf_counter()
        health.ROUNDS.limit = self.config.max_failed_rounds
        try:
            await self._round(report, incremental, t0)
        except Exception as exc:
            report.errors += 1
            logger.exception("round %d failed; retrying next round", self.round_no)
            if health.ROUNDS.record(False, f"{type(exc).__name__}: {exc}"):
                logger.error(
                    "%d rounds in a row failed: /readyz reports not ready until one succeeds",
                    health.ROUNDS.in_a_row,
                )
        else:
            health.ROUNDS.record(True)
        report.total = time.perf_counter() - t0
        self._observe(report)
        self.last_report = report
        self.rounds_done += 1
        logger.info("round %s", json.dumps(dataclasses.asdict(report), sort_keys=True))
        return report

    async def _round(self, report: RoundReport, incremental: bool, t0: float) -> None:
        now = time.time()
        snap = self.store.freeze(now)
        planned = await asyncio.to_thread(
            cycle.plan,
            self.state,
            self.policy,
            snap,
            now=now,
            round_no=self.round_no,
            incremental=incremental,
        )
        sol = planned.solution
        report.nodes = len(planned.view.nodes)
        report.jobs = len(planned.active)
        report.snapshot = (
            time.perf_counter() - t0 - sum(v for k, v in planned.timings.items() if k != "snapshot")
        )
        report.solve = planned.timings["solve"]
        report.realise = planned.timings["realise"]
        report.iterations, report.gap = sol.iterations, sol.gap
        report.prices = {t: round(p, 6) for t, p in sol.prices.items()}
        self.last_solution = sol

        t3 = time.perf_counter()
        await self._act(planned.realisation, report)
        t4 = time.perf_counter()
        await self._statuses(planned, report)
        report.status_s = time.perf_counter() - t4
        report.writes = time.perf_counter() - t3

    # ------------------------------------------------------------------ writes

    async def _act(self, plan: realise.Realisation, report: RoundReport) -> None:
        t0 = time.perf_counter()
        if plan.deletes:
            results = await kubeapi.gather_limited(
                self.api.delete_pod(d.pod.namespace, d.pod.name, force=d.reason == "NodeGone")
                for d in plan.deletes
            )
            report.deletes += sum(r.ok for r in results)
            report.errors += sum(not r.ok and r.outcome != kubeapi.Outcome.GONE for r in results)
            preempted = sum(
                r.ok and d.reason == "SliceEnded"
                for d, r in zip(plan.deletes, results, strict=True)
            )
            metrics.PREEMPTIONS.inc(preempted)
            for d in plan.deletes:
                self.pending.pop(d.pod.job_key, None)
        t1 = time.perf_counter()
        report.deletes_s = t1 - t0
        by_job: dict[model.JobKey, list[realise.PodCreate]] = {}
        for c in plan.creates:
            by_job.setdefault(c.job.key, []).append(c)
        if plan.creates:
            results = await kubeapi.gather_limited(
                self.api.create_pod(c.job.namespace, c.manifest) for c in plan.creates
            )
            report.creates += sum(r.outcome == kubeapi.Outcome.OK for r in results)
            for c, r in zip(plan.creates, results, strict=True):
                if not r.ok:
                    report.errors += 1
                    logger.warning("create pod %s/%s: %s", c.job.namespace, c.name, r.message)
        # Queue the gangs: every pod of a job that the store shows unbound, plus the new ones.
        self.pending = {}
        deleted = {d.pod.key for d in plan.deletes}
        for pod in self.store.pods.values():
            if (
                not pod.node
                and pod.planned_node
                and not pod.terminating
                and pod.key not in deleted
                and pod.job_key not in by_job
            ):
                gpus = int(
                    max(
                        (v for r, v in pod.requests.items() if r not in ("cpu", "memory")),
                        default=1,
                    )
                )
                self.pending.setdefault(pod.job_key, []).append(
                    _PendingBind(pod.namespace, pod.name, pod.planned_node, gpus)
                )
        for key, creates in by_job.items():
            self.pending[key] = [_PendingBind(key[0], c.name, c.node, c.gpus) for c in creates]
        t2 = time.perf_counter()
        report.creates_s = t2 - t1
        await self.bind_pending(report)
        report.binds_s = time.perf_counter() - t2

    def _node_usage(self) -> dict[str, dict[str, float]]:
        """Per node, every resource requested by the pods on it (Walras's and foreign ones, those
        being deleted included) and by binds in flight, plus their count under ``"pods"``."""
        now = time.monotonic()
        for key, (_, _, since) in list(self.ledger.items()):
            pod = self.store.pods.get(key)
            if (pod is not None and pod.node) or (pod is None and now - since > 10.0):
                del self.ledger[key]
        usage = snapshot.node_usage([*self.store.pods.values(), *self.store.foreign.values()])
        for node_name, requests, _ in self.ledger.values():
            filters.add_usage(usage.setdefault(node_name, {}), requests)
        return usage

    def _bound_pods(self, key: model.JobKey, jr: realise.JobRound) -> int:
        """The job's live pods bound to this round's nodes: seen bound, or bound by us just now.

        The index of bound pods per job is built once per round (the statuses come right after
        the binds), so a round with thousands of jobs stays linear in the pods.
        """
        if self._bound_index[0] != self.round_no:
            index: dict[model.JobKey, list[str]] = {}
            for pod_key, pod in self.store.pods.items():
                if pod.terminating or pod.finished:
                    continue
                node = pod.node or self.ledger.get(pod_key, ("", {}, 0.0))[0]
                if node:
                    index.setdefault(pod.job_key, []).append(node)
            self._bound_index = (self.round_no, index)
        nodes = set(jr.nodes)
        return sum(n in nodes for n in self._bound_index[1].get(key, ()))

    def _resource_name(self, node: model.NodeInfo) -> str:
        pool = snapshot.node_pool(node, sorted(self.store.pools.values(), key=lambda p: p.name))
        return pool.resource_name if pool else crd.DEFAULT_RESOURCE_NAME

    def _capacity(self, node_name: str) -> int:
        node = self.store.nodes.get(node_name)
        if node is None:
            return -1
        return int(node.resource(self._resource_name(node)))

    def _bind_requests(self, key: model.JobKey, b: _PendingBind) -> dict[str, float]:
        """What one pending pod requests: its own spec once the watch has it, else its job's."""
        pod = self.store.pods.get((b.namespace, b.name))
        if pod is not None:
            return dict(pod.requests)
        node = self.store.nodes.get(b.node)
        resource = self._resource_name(node) if node is not None else crd.DEFAULT_RESOURCE_NAME
        job = self.store.jobs.get(key)
        if isinstance(job, model.JobSpec):
            requests = job.pod_requests(resource)
            requests[resource] = float(b.gpus)
            return requests
        return {resource: float(b.gpus)}

    async def bind_pending(self, report: RoundReport | None = None) -> None:
        """Bind every queued gang whose pods all pass the filters on their nodes now.

        The bind-time filters are the ones that change between rounds: the node exists and is
        not cordoned (else the gang is dropped and the next round re-plans it), and every
        resource fits next to all the pods on the node, those being deleted included (else the
        gang waits).
        """
        if not self.pending or not self.is_leader():
            return
        usage = self._node_usage()
        ready: list[tuple[_PendingBind, dict[str, float]]] = []
        for key in sorted(self.pending):
            gang = self.pending[key]
            nodes = [self.store.nodes.get(b.node) for b in gang]
            if any(n is None or not filters.unschedulable(n, ()).ok for n in nodes):
                del self.pending[key]  # its node is gone or cordoned; the next round re-plans
                continue
            wanted = [(b, self._bind_requests(key, b)) for b in gang]
            trial = {n: dict(usage.get(n, {})) for n in {b.node for b in gang}}
            fits = True
            for b, requests in wanted:
                node = self.store.nodes[b.node]
                if not filters.resource_fit(requests, node.allocatable, trial[b.node]).ok:
                    fits = False
                    break
                filters.add_usage(trial[b.node], requests)
            if fits:
                usage.update(trial)
                ready.extend(wanted)
                del self.pending[key]
        if not ready:
            return
        results = await kubeapi.gather_limited(
            self.api.bind_pod(b.namespace, b.name, b.node) for b, _ in ready
        )
        bound = 0
        for (b, requests), r in zip(ready, results, strict=True):
            if r.outcome == kubeapi.Outcome.OK:
                bound += 1
                self.ledger[(b.namespace, b.name)] = (b.node, requests, time.monotonic())
            elif r.outcome == kubeapi.Outcome.ERROR:
                logger.warning("bind %s/%s to %s: %s", b.namespace, b.name, b.node, r.message)
                if report is not None:
                    report.errors += 1
        metrics.BINDINGS.inc(bound)
        if report is not None:
            report.binds += bound

    # ------------------------------------------------------------------ status

    async def _statuses(self, planned: cycle.CyclePlan, report: RoundReport) -> None:
        snap, view, sol = planned.snapshot, planned.view, planned.solution
        plan, finished, hists = planned.realisation, planned.finished, planned.histories
        now = planned.now
        stamp = model.format_time(now)
        patches: list[tuple[str, str, dict[str, Any]]] = []
        events: list[tuple[model.JobSpec | model.JobDefect, str, str, str, str]] = []
        pending_reasons: dict[str, int] = {}
        by_key = {j.key: j for j in snap.jobs}

        refresh = self._refresh_all
        self._refresh_all = False

        def add(job: model.JobSpec | model.JobDefect, core: dict[str, Any], force: bool) -> None:
            old = job.status
            if not (force or refresh) and not status.changed(core, old):
                return
            full = dict(core)
            full["conditions"] = cond.merge_times(
                core["conditions"], old.get("conditions") or [], stamp
            )
            full["round"] = self.round_no
            hist = hists.get(job.key)
            if hist is not None:
                full.update(hist.status_fields())
            patches.append((job.namespace, job.name, full))

        for r, job in enumerate(sol.jobs):
            jr = plan.jobs[job.key]
            hist = hists[job.key]
            core = status.solved_job_status(
                job,
                r,
                sol,
                jr,
                view,
                has_run=sum(hist.received.values()) > 0,
                bound=self._bound_pods(job.key, jr),
            )
            if core["phase"] == crd.PHASE_PENDING:
                reason = next(
                    c["reason"] for c in core["conditions"] if c["type"] == cond.ALLOCATED
                )
                pending_reasons[reason] = pending_reasons.get(reason, 0) + 1
            add(job, core, force=False)
        for issue in sol.issues:
            job = by_key[issue.key]
            core = status.issue_status(job, job.tenant, issue.field, issue.reason, issue.message)
            pending_reasons[issue.reason] = pending_reasons.get(issue.reason, 0) + 1
            add(job, core, force=False)
            events.append(
                (
                    job,
                    job.uid,
                    "Warning",
                    issue.reason,
                    cond.issue_message(issue.field, issue.message),
                )
            )
        for defect in snap.defects:
            if defect.status.get("phase") in crd.TERMINAL_PHASES:
                continue
            core = status.issue_status(
                defect, defect.tenant, defect.field, defect.reason, defect.message
            )
            pending_reasons[defect.reason] = pending_reasons.get(defect.reason, 0) + 1
            add(defect, core, force=False)
            events.append(
                (
                    defect,
                    defect.uid,
                    "Warning",
                    defect.reason,
                    cond.issue_message(defect.field, defect.message),
                )
            )
        for key, done in finished.items():
            job = by_key[key]
            phase, reason, message = done.phase, done.reason, done.message
            add(job, status.finished_status(job, phase, reason, message), force=True)
            events.append(
                (
                    job,
                    job.uid,
                    "Normal" if phase == crd.PHASE_SUCCEEDED else "Warning",
                    reason,
                    message,
                )
            )

        gpus = {j.key: int(sol.gpus_per_pod[r]) for r, j in enumerate(sol.jobs)}
        pool_cores = status.pool_statuses(snap, view, sol, plan.jobs, gpus)
        pool_patches: list[tuple[str, dict[str, Any]]] = []
        for pool in snap.pools:
            core = pool_cores[pool.name]
            if refresh or status.changed(core, pool.status):
                full = dict(core)
                full["conditions"] = cond.merge_times(
                    core["conditions"], pool.status.get("conditions") or [], stamp
                )
                full["round"] = self.round_no
                pool_patches.append((pool.name, full))
            metrics.ALLOCATED_SHARE.labels(pool=pool.name).set(core["utilisation"])

        new_events = []
        for obj, uid, etype, reason, message in events:
            ref = f"{obj.namespace}/{obj.name}"
            if self.events_posted.get(ref) == (reason, message):
                continue
            self.events_posted[ref] = (reason, message)
            new_events.append((obj, uid, etype, reason, message))

        results = await kubeapi.gather_limited(
            [
                *(self.api.patch_job_status(ns, name, body) for ns, name, body in patches),
                *(self.api.patch_pool_status(name, body) for name, body in pool_patches),
                *(
                    self.api.post_event(
                        obj, uid=uid, event_type=etype, reason=reason, message=message, now=stamp
                    )
                    for obj, uid, etype, reason, message in new_events
                ),
            ]
        )
        report.status_patches = len(patches) + len(pool_patches)
        report.events = len(new_events)
        report.errors += sum(r.outcome == kubeapi.Outcome.ERROR for r in results)
        metrics.PENDING_JOBS.clear()
        for reason, count in pending_reasons.items():
            metrics.PENDING_JOBS.labels(reason=reason).set(count)

    # ------------------------------------------------------------------ metrics

    def _observe(self, report: RoundReport) -> None:
        for phase in ("snapshot", "solve", "realise", "writes", "total"):
            metrics.ROUND_SECONDS.labels(phase=phase).observe(getattr(report, phase))
        metrics.SOLVE_SECONDS.labels(policy=self.config.policy).observe(report.solve)
        metrics.SOLVER_ITERATIONS.labels(policy=self.config.policy).set(report.iterations)
        if self.config.policy == "price-discovery":
            metrics.DUALITY_GAP.set(report.gap)
        for gpu_type, price in report.prices.items():
            metrics.PRICE.labels(gpu_type=gpu_type).set(price)
        metrics.ROUNDS.inc()

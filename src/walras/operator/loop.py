"""The operator's round loop: snapshot -> ``walras.core.cycle.plan`` (worker thread) -> writes.

Started by ``walras.operator.main`` next to the watches. :mod:`walras.operator.triggers` says
when a round runs (a full one every ``round_seconds``, an incremental one soon after a poke) and
when queued binds retry between rounds. One round is these steps (:meth:`RoundLoop._round`):

1. **Snapshot.** Freeze the cluster cache (``walras.operator.cache``) at the round's clock and
   apply the operator's admission rules to it (``walras.core.admission``: ownership, retries,
   holds); adopt restored histories; fold in reported progress and effective throughputs
   (``walras.operator.throughputs``) and the capacity statements of work reserve
   (``walras.operator.sow``). The result is the one immutable snapshot the core sees.
2. **Plan.** ``walras.core.cycle.plan`` in a worker thread: solve, realise, account.
3. **Act.** The gang binder (``walras.operator.binder``) deletes, creates and binds whole gangs;
   then the advance notice (``walras.operator.notices``): the pods of gangs the forecast of the
   next full round (``walras.core.notice``) stops carry ``walras.dev/stop-at``.
4. **Statuses.** The status writer (``walras.operator.status_writer``) patches what changed and
   posts new Events.
5. **Histories.** Persist the schedule histories whose running state changed
   (``walras.operator.history_sync``).

A round writes only while ``is_leader()`` is true, and every request is fenced again right before
it is sent (``walras.kube.writes.Api``). The loop never raises out of a round: a failing round is
logged and counted (``/readyz`` turns 503 after ``max_failed_rounds`` in a row) and the next
round retries on a fresh snapshot. Everything one round knows only while it runs lives in a
:class:`walras.operator.round_scratch.RoundScratch`, never on the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from walras.core import admission, cycle, model, notice, policies, snapshot
from walras.kube import writes as kubeapi
from walras.operator import (
    binder,
    cache,
    gang_repair,
    health,
    history_sync,
    notices,
    round_report,
    sow,
    status_writer,
    throughputs,
    triggers,
)
from walras.operator.round_report import RoundReport
from walras.operator.round_scratch import RoundScratch

logger = logging.getLogger("walras.operator.loop")


@dataclass(frozen=True, slots=True)
class LoopConfig:
    # Which policy, its arguments and POP shards (walras.core.policies.registry.build).
    policy: policies.PolicyConfig = field(default_factory=policies.PolicyConfig)
    round_seconds: float = 360.0
    debounce: float = 0.3
    # /readyz turns 503 after this many failed rounds in a row (walras.operator.health.ROUNDS).
    max_failed_rounds: int = 3
    # The clock rounds plan with (their ``now``, and held jobs' back-off). Injected, as Kueue
    # injects its clock, so the real loop can run on a simulated clock (the same-code-path test).
    clock: Callable[[], float] = time.time
    # How rounds are realised and accounted (restart cost, hold, memory, backfill).
    cycle_options: cycle.CycleOptions = field(default_factory=cycle.CycleOptions)
    # Progress and throughput estimation thresholds (walras.operator.throughputs).
    progress: throughputs.Settings = field(default_factory=throughputs.Settings)
    # Where the schedule history's ConfigMaps live (walras.operator.history_store): "" = in each
    # job's namespace; a name = all in that namespace (a namespaced Role is enough).
    history_namespace: str = ""
    # Commit a gang that fits its nodes now by creating its last member with spec.nodeName set,
    # after the others, which are bound right after it (walras.operator.binder); False: every
    # pod is created unbound and bound through the pods/binding subresource.
    bind_at_create: bool = True


def build_policy(
    config: LoopConfig, distributed_reader: policies.DistributedReader | None
) -> policies.Policy:
    """The round's policy, from the loop's settings (the one place the operator builds it)."""
    return policies.build(
        config.policy,
        policies.Handle(
            round_seconds=config.round_seconds,
            restart_seconds=config.cycle_options.restart_s,
            distributed_reader=distributed_reader,
        ),
    )


class RoundLoop:
    """Runs rounds over its collaborators; owns the round counter and the core's cycle state."""

    def __init__(
        self,
        store: snapshot.Store,
        api: kubeapi.Api,
        config: LoopConfig,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        distributed_reader: policies.DistributedReader | None = None,
    ) -> None:
        self.config = config
        self.is_leader = is_leader
        self.policy = build_policy(config, distributed_reader)
        self.cache = cache.ClusterCache(store, clock=config.clock)
        self.store = self.cache.store
        self.rules = admission.Admission(config.clock)
        self.throughputs = throughputs.Throughputs.configured(
            config.progress, config.round_seconds, restarts=self.cache.restarts
        )
        self.binder = binder.GangBinder(
            api, self.cache, self.rules, is_leader, bind_at_create=config.bind_at_create
        )
        self.statuses = status_writer.StatusWriter(api, self.cache, self.rules, self.throughputs)
        self.notices = notices.NoticeWriter(api, self.cache)
        self.histories = history_sync.HistorySync(api, config.history_namespace, is_leader)
        self.triggers = triggers.Triggers(config.round_seconds, config.debounce)
        self.sow = sow.SowRunner(api, config.round_seconds, self.poke)
        self.state = cycle.CycleState()
        self.round_no = 0
        self.rounds_done = 0
        self.last_report: RoundReport | None = None
        self.last_solution: policies.Solution | None = None
        # The first round after start-up or after winning the Lease reloads the persisted
        # histories and rewrites every status once.
        self._refresh_all = True

    def poke(self) -> None:
        """A job arrived or finished: run an incremental round soon."""
        self.triggers.poke()

    def poke_binds(self) -> None:
        """A pod went away: queued binds may fit now."""
        if self.binder.queue:
            self.triggers.poke_binds()

    async def bind_pending(self) -> None:
        """Bind the queued gangs that fit now (between rounds)."""
        await self.binder.bind_pending()

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds and binds as the triggers say (``walras.operator.triggers``), until ``stop``."""
        self.triggers.start()
        self.round_no = self._initial_round()
        while await self.triggers.wait(stop, binds_queued=bool(self.binder.queue)):
            if not self.is_leader():
                self.triggers.stand_by()
                self._refresh_all = True
                self.binder.queue.clear()
                continue
            if self._refresh_all:
                # Just started or just won the Lease: the previous leader may have used rounds
                # above ours meanwhile; stay above them so no pod name is ever reused. Its
                # persisted histories replace ours.
                await self.histories.restore(self.state)
                self.round_no = max(self.round_no, self._initial_round())
                # The predecessor's half-bound gangs are finished or undone before any round.
                await gang_repair.repair(self.store, self.binder.api, self.cache.owns)
            kind = await self.triggers.due()
            if kind is not None:
                await self.run_round(incremental=kind is triggers.Round.INCREMENTAL)
                self.triggers.ran(kind)
            self.triggers.binds_tried()
            if self.binder.queue:
                await self.binder.bind_pending()

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

    async def run_round(self, *, incremental: bool = False) -> RoundReport:
        """One round; never raises (a failure is logged and the next round retries)."""
        self.round_no += 1
        report = RoundReport(round=self.round_no, incremental=incremental)
        scratch = RoundScratch(
            self.round_no, self.config.clock(), incremental, self._refresh_all, report
        )
        t0 = time.perf_counter()
        health.ROUNDS.limit = self.config.max_failed_rounds
        try:
            await self._round(scratch, t0)
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
        round_report.observe(report, self.policy.name, reports_gap=self.policy.reports_gap)
        self.last_report = report
        self.rounds_done += 1
        logger.info("round %s", json.dumps(dataclasses.asdict(report), sort_keys=True))
        return report

    async def _round(self, scratch: RoundScratch, t0: float) -> None:
        report = scratch.report
        # 1. Snapshot: the one the core sees, immutable from here on.
        snap = await self._snapshot(scratch)
        costs = self._restart_costs(snap, scratch.now)
        # 2. Plan: solve, realise and account, off the event loop.
        planned = await asyncio.to_thread(
            cycle.plan,
            self.state,
            self.policy,
            snap,
            now=scratch.now,
            round_no=scratch.round_no,
            incremental=scratch.incremental,
            options=self.config.cycle_options,
            restart_costs=costs,
        )
        self._report_plan(planned, report, t0)
        # 3. Act: deletes, whole-gang creates and binds.
        t3 = time.perf_counter()
        await self.binder.act(planned.realisation, scratch)
        # 3b. The advance notice on the pods of gangs the next full round stops.
        await self._notify(planned, scratch, costs)
        # 4. Statuses and Events (a refresh round rewrites them all, once).
        t4 = time.perf_counter()
        self._refresh_all = False
        await self.statuses.write(planned, scratch)
        report.status_s = time.perf_counter() - t4
        # 5. Histories whose running state changed.
        await self.histories.save(planned, report)
        report.writes = time.perf_counter() - t3

    async def _snapshot(self, scratch: RoundScratch) -> snapshot.Snapshot:
        """The cache frozen at the round's clock; the admission rules applied (what they ask to
        delete and say goes to ``scratch``); restored histories adopted; reported progress,
        effective throughputs and the capacity statements of work reserve folded in."""
        now = scratch.now
        admitted = self.rules.apply(self.store.freeze(now), now, self.cache.facts)
        scratch.retry_deletes, scratch.retry_events = admitted.retry_deletes, admitted.retry_events
        self.histories.adopt(admitted.snapshot, self.state)
        snap = self.throughputs.prepare(admitted.snapshot, now)
        self.throughputs.observe_metrics()
        return await self.sow.round(snap, now, refresh=scratch.refresh)

    async def _notify(
        self, planned: cycle.CyclePlan, scratch: RoundScratch, costs: dict[model.JobKey, float]
    ) -> None:
        """Forecast the next full round (``walras.core.notice``) and annotate what it stops."""
        # The next full round: a period after a full round; what is left of it after an
        # incremental one (which never stops a running gang).
        until = self.triggers.seconds_to_full() if scratch.incremental else None
        round_s = self.config.round_seconds if until is None else until
        if not round_s > 0:
            return  # the full round is due now: it decides, no time to announce anything
        t0 = time.perf_counter()
        stops = await asyncio.to_thread(
            notice.next_stops,
            planned,
            round_s=round_s,
            options=self.config.cycle_options,
            restart_costs=costs,
        )
        scratch.report.notices = await self.notices.write(planned, stops, scratch)
        scratch.report.notice_s = time.perf_counter() - t0

    def _restart_costs(self, snap: snapshot.Snapshot, now: float) -> dict[model.JobKey, float]:
        """Each job's measured restart cost (``walras.core.restarts``), for the realiser.

        The pod watch feeds the tracker as readings change; this pass at the round's clock also
        takes the pods it could not attribute then (delivered before their job) and drops the
        jobs that are gone. Forked jobs are not measured: their copies count from zero.
        """
        tracker = self.cache.restarts
        tracker.forget(j.uid for j in snap.jobs)
        pods = snap.pods_by_job()
        measured = [j for j in snap.active_jobs if not j.forkable]
        for job in measured:
            self.cache.observe_job(job, pods.get(job.key, ()), now)
        return tracker.costs(measured)

    def _report_plan(self, planned: cycle.CyclePlan, report: RoundReport, t0: float) -> None:
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

"""One scheduling cycle: snapshot + clock → completions → policy → round plan. Both shells run it.

The operator (``walras.operator.loop``) calls :func:`plan` every round on a snapshot of the live
cluster and its wall clock, then carries the plan out as API writes; the simulator
(``walras.sim``) calls the same function on a snapshot of its simulated cluster and its simulated
clock, then applies the plan to that cluster. Only the clock and the cluster differ, so a policy or
realiser change is measured in simulation exactly as it will behave in production.

The pipeline (Kueue's numbered scheduling cycle, with per-phase timings):

1. **Completions.** Jobs this process finished earlier keep their terminal phase even if the
   snapshot predates the status write; histories are advanced to ``now``
   (``History.advance``: time eligible, time received per group, work done); jobs that finished
   since the last round (``walras.core.completion``) are marked finished in the snapshot.
2. **Solve.** ``policy.solve(snapshot, view)``: target fractions per (job, group); a policy that
   keys its plans (:class:`PlanKeyed`: Hadar) re-plans only when that key changes, and the last
   solution is reused meanwhile.
3. **Realise.** ``walras.core.realise.realise``: this round's placements, as pods to create,
   keep and delete (``incremental`` rounds only fill free GPUs).
4. **Account.** Each job's history records the group it runs in from ``now`` on, at its
   throughput there.
5. **Quotas.** Per Tenant and GPU type: guaranteed, in use, borrowed and lent after the round,
   and the jobs that wait on a maximum or lost GPUs to a guarantee's owner
   (``walras.core.tenant_usage``); the operator shows them, the simulator ignores them.

:class:`CycleState` is everything the cycle remembers between rounds; the shell owns it (one per
operator process or simulation run). Nothing here reads a clock, calls the API or logs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from walras.core import completion, history, model, placements, realise, tenant_usage
from walras.core import snapshot as snapshots
from walras.core.policies import Policy, Solution
from walras.core.policies.base import SolutionMemo


class PlanKeyed(Protocol):
    """A policy that re-plans only when what it plans from changes.

    ``plan_key(snap, view)`` returns a key of the inputs that decide its plan (or ``None``: plan
    afresh this round); while the key stays the one of the last solve, :func:`solve` hands back
    that solve's solution instead of running the policy again. Both shells get it, because both
    call :func:`plan`.
    """

    def plan_key(
        self, snap: snapshots.Snapshot, view: snapshots.ClusterView
    ) -> Hashable | None: ...


@dataclass(frozen=True, slots=True)
class CycleOptions:
    """How the cycle realises and accounts a round (the same in both shells).

    Attributes:
        restart_s: seconds a gang placed afresh does no work (its checkpoint reload).
        hold_s: the realiser's credit for a running gang on its group: it keeps its slice until it
            is this far ahead of its target, so it is served in blocks (fewer restarts).
        history_half_life_s: the realiser's memory of received time (infinite: since arrival).
        backfill: GPUs no positive target could use go to waiting jobs that can use them.
        min_run_s: a gang placed afresh runs at least this long before the realiser may stop or
            move it (0: no minimum; the operator's ``--min-run-seconds``).
    """

    restart_s: float = 0.0
    hold_s: float = 0.0
    history_half_life_s: float = math.inf
    backfill: bool = False
    min_run_s: float = 0.0


@dataclass(slots=True)
class CycleState:
    """What the cycle remembers between rounds, owned by one shell.

    Attributes:
        histories: per job UID, its schedule history (rebuilt from the persisted status the first
            time a job is seen, so a restarted operator continues the schedule).
        finished: per job UID, the terminal phase this process gave it (its status patch may not
            have come back through the watch yet).
        plans: the last solution of a policy that keys its plans (:func:`solve`), and its key.
    """

    histories: dict[str, history.History] = field(default_factory=dict)
    finished: dict[str, str] = field(default_factory=dict)
    plans: SolutionMemo = field(default_factory=SolutionMemo)


@dataclass(frozen=True, slots=True)
class CyclePlan:
    """The outcome of one cycle: what to write (operator) or to apply (simulator)."""

    round_no: int
    now: float
    incremental: bool
    snapshot: snapshots.Snapshot
    view: snapshots.ClusterView
    active: tuple[model.JobSpec, ...]
    finished: Mapping[model.JobKey, completion.Completion]
    solution: Solution
    realisation: realise.Realisation
    histories: Mapping[model.JobKey, history.History]
    timings: Mapping[str, float]
    # Per Tenant and GPU type: guaranteed, in use, borrowed, lent; the jobs that wait on or lost
    # GPUs to a quota (walras.core.tenant_usage).
    quotas: tenant_usage.QuotaRound = tenant_usage.EMPTY


def rate(job: model.JobSpec, group: str, snap: snapshots.Snapshot) -> float:
    """Work per second of ``job`` in ``group`` (a GPU type, or a node name under PS-DSF)."""
    if group in job.throughput:
        return job.throughput[group]
    node = next((n for n in snap.nodes if n.name == group), None)
    if node is None:
        return 0.0
    pool = snapshots.node_pool(node, snap.pools)
    return job.throughput.get(pool.gpu_type, 0.0) if pool is not None else 0.0


def _with_phases(snap: snapshots.Snapshot, phases: Mapping[str, str]) -> snapshots.Snapshot:
    """``snap`` with the given terminal phase (by job UID) on jobs not finished in it yet."""
    if not phases:
        return snap
    jobs = tuple(
        dataclasses.replace(j, status={**j.status, "phase": phases[j.uid]})
        if j.uid in phases and not j.finished
        else j
        for j in snap.jobs
    )
    return dataclasses.replace(snap, jobs=jobs)


def _history(state: CycleState, job: model.JobSpec, snap: snapshots.Snapshot) -> history.History:
    hist = state.histories.get(job.uid)
    if hist is None:
        hist = history.History.from_status(job.status, {})
        if hist.running_group:
            hist.running_rate = rate(job, hist.running_group, snap)
        state.histories[job.uid] = hist
    return hist


def solve(
    state: CycleState, policy: Policy, snap: snapshots.Snapshot, view: snapshots.ClusterView
) -> Solution:
    """The policy's solution for this round: its last one when the policy keys its plans
    (``plan_key(snap, view)``, see :class:`PlanKeyed`) and the key is the last solve's, else a
    fresh solve. ``None`` as the key always solves afresh."""
    keyed = getattr(policy, "plan_key", None)
    key = keyed(snap, view) if keyed is not None else None
    if key is not None:
        reused = state.plans.get(key, snap)
        if reused is not None:
            return reused
    sol = policy.solve(snap, view)
    state.plans.put(key, sol)
    return sol


def plan(
    state: CycleState,
    policy: Policy,
    snap: snapshots.Snapshot,
    *,
    now: float,
    round_no: int,
    incremental: bool = False,
    restart_s: float = 0.0,
    hold_s: float = 0.0,
    history_half_life_s: float = math.inf,
    backfill: bool = False,
    min_run_s: float = 0.0,
    options: CycleOptions | None = None,
    restart_costs: Mapping[model.JobKey, float] | None = None,
) -> CyclePlan:
    """Plan one round (see the module docstring); updates ``state`` in place.

    ``restart_s``: seconds a gang placed afresh (not kept on its nodes) works nothing (its
    checkpoint reload); the history's work accounting leaves them out. ``hold_s``: the
    realiser's credit for running gangs (serve in blocks; see ``walras.allocator.rounds``).
    ``history_half_life_s``: the realiser's memory of received time (``History.advance``).
    ``backfill``: GPUs left over by the targets go to waiting jobs that can use them (always on
    for a policy with ``work_conserving = True``). ``min_run_s``: a gang placed afresh runs at
    least this long before the realiser stops or moves it (``walras.core.realise``).

    ``options`` (a :class:`CycleOptions`) overrides the five keyword arguments above.
    ``restart_costs``: per job, its own measured restart cost
    (``walras.core.restarts.Tracker.costs``): it prices the job's restarts in the realiser and
    its reload time in the accounting, instead of ``restart_s``.

    Raises whatever the policy raises (e.g. ``PolicyUnavailableError``); the shell decides whether
    a failed round is retried.
    """
    if options is not None:
        restart_s, hold_s = options.restart_s, options.hold_s
        history_half_life_s, backfill = options.history_half_life_s, options.backfill
        min_run_s = options.min_run_s
    costs = restart_costs or {}
    t0 = time.perf_counter()
    live = {j.uid for j in snap.jobs}
    state.finished = {u: p for u, p in state.finished.items() if u in live}
    snap = _with_phases(snap, state.finished)
    view = snapshots.cluster_view(snap)
    active = snap.active_jobs
    hists: dict[model.JobKey, history.History] = {}
    for job in active:
        hist = _history(state, job, snap)
        hist.advance(now, history_half_life_s)
        hists[job.key] = hist
    for uid in [u for u in state.histories if u not in live]:
        del state.histories[uid]

    progress: dict[model.JobKey, snapshots.JobProgress] = {}
    for job in active:
        hist = hists[job.key]
        progress[job.key] = snapshots.JobProgress(
            work_done=hist.work_done,
            elapsed=hist.elapsed,
            received=sum(hist.received.values()),
            arrival=job.created,
        )
    snap = snap.with_progress(progress)
    finished = completion.completions(snap, hists)
    if finished:
        by_key = {j.key: j for j in active}
        for key, done in finished.items():
            state.finished[by_key[key].uid] = done.phase
        snap = _with_phases(snap, state.finished)
    t1 = time.perf_counter()

    sol = solve(state, policy, snap, view)
    t2 = time.perf_counter()

    if sol.placements is not None:
        real = placements.realise_placements(sol, snap, view, round_no)
    else:
        real = realise.realise(
            sol,
            snap,
            view,
            hists,
            round_no,
            incremental=incremental,
            hold=hold_s,
            restart_s=restart_s,  # priced against the gain of a switch (core.switching)
            # A policy that guarantees work conservation (PS-DSF, Theorem 2) always gets it.
            backfill=backfill or policy.work_conserving,
            now=now,
            min_run_s=min_run_s,
            restart_costs=costs,
        )
    for job in sol.jobs:
        jr = real.jobs[job.key]
        speed = sol.rates.get(job.key) if sol.placements is not None else None
        hists[job.key].run_in(
            jr.group,
            (speed if speed is not None else rate(job, jr.group, snap)) if jr.group else 0.0,
            now,
            restarted=bool(jr.group) and not jr.kept,
            restart_s=costs.get(job.key, restart_s),
        )
    solved = {j.key for j in sol.jobs}
    for job in active:
        if job.key not in solved:
            hists[job.key].run_in("", 0.0, now)
    quotas = tenant_usage.quota_round(snap, view, sol, real)
    t3 = time.perf_counter()
    return CyclePlan(
        round_no=round_no,
        now=now,
        incremental=incremental,
        snapshot=snap,
        view=view,
        active=active,
        finished=finished,
        solution=sol,
        realisation=real,
        histories=hists,
        timings={"snapshot": t1 - t0, "solve": t2 - t1, "realise": t3 - t2},
        quotas=quotas,
    )

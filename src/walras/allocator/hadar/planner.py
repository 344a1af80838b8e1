"""One round of Hadar or HadarE: :func:`plan_round` (docs/algorithms.md#hadar-and-hadare).

Pipeline (each step only sees the GPUs the previous ones left free):

0. **Horizon (opt-in, ``horizon=Horizon()``)**: :mod:`~walras.allocator.hadar.horizon` solves the
   fluid makespan LP of the remaining work, restricts each job to the GPU types of its LP support
   and raises the utility weight of the jobs that must run now for the queue to drain by the
   horizon. The payoff keeps the paper's form (utility at the projected finish − price); only
   the per-job utility constants and the usable types change from round to round. HadarE's
   forked-mode jobs are covered by the forking form of the LP (no one-type-at-a-time row); their
   copies (step 4) fill idle nodes on their support's types first, then on every type they can
   use.
1. **Keep or move running jobs** (incremental Hadar). A job is *running* if it holds a whole
   gang now (not forked). All running jobs first hold their GPUs. Then, in job order, each one
   releases its own GPUs and compares, at the current prices, keeping them (no restart) with its
   best FIND_ALLOC allocation elsewhere, whose projected completion includes the restart::

       move  iff  U_j(e + restart + rem/rate_new) − cost_new  >  U_j(e + rem/rate_now) − cost_now

   i.e. only when moving gains more than the restart costs. Hadar never preempts a running job
   to make room for a waiting one (the paper's incremental mode; only new or waiting jobs are
   allocated).

   With ``preempt=True`` this step is skipped: every active job is re-queued each round, in order
   of its per-GPU utility at its best rate (highest first; a batch has no arrival order to
   honour), and competes with the waiting ones. Restart-aware (``restart_aware``, default): a
   running job carries a *stay* option, keeping its GPUs per type with no restart, beside its
   FIND_ALLOC allocations, which pay it (:mod:`~walras.allocator.hadar.admission`). So it moves
   only when the move's payoff beats staying by more than the restart costs it, and a waiting job
   takes its GPUs only when that payoff exceeds the running job's with the restart seconds it
   saves credited. A running job that is chosen again on the same GPU types keeps its nodes (laid
   out first, below), so it pays no restart; one that loses its GPUs is preempted at the round
   boundary. Deviation from the paper's incremental mode: on a batch it is what lets short jobs
   finish first while the critical long jobs of the horizon keep their GPUs.
2. **Admit from the queue**: waiting jobs (and, under HadarE, every forked-mode job) go through
   :mod:`~walras.allocator.hadar.admission` (exact payoff DP, or the greedy rule). Then
   :func:`~walras.allocator.hadar.find_alloc.layout` puts the admitted and backfilled jobs on
   nodes, those that keep their GPU types first (on their current nodes), then the others.
3. **Backfill (opt-in, ``backfill=True``)**: GPUs that no positive-payoff job wanted would stay
   idle this round. The primal-dual rule keeps them for better jobs that may arrive, but Hadar
   re-plans every round anyway, so an operator that values utilisation (makespan) can give them
   to the remaining waiting jobs: in queue order, each at its FIND_ALLOC allocation, whatever
   its payoff (``JobPlan.backfilled``). Off by default: it departs from the paper's rule.
4. **HadarE only**: :mod:`~walras.allocator.hadar.forking` fills the remaining room with copies
   (in the end game, after the horizon's fluid plan), trims jobs in their last round to their
   fastest gangs, gives back the dropped gangs no other job took, and splits the steps so that a
   job's gangs finish together (:mod:`~walras.allocator.hadar.endgame`).

Prices follow every allocation (pooled per type, :mod:`~walras.allocator.hadar.prices`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from walras.allocator.hadar.admission import (
    DP_MAX_CELLS,
    Market,
    Method,
    QueueJob,
    admit_all,
    choose,
)
from walras.allocator.hadar.find_alloc import find_alloc, layout
from walras.allocator.hadar.forking import (
    GangState,
    fork,
    pooled,
    projected_utilities,
    restore,
    split_steps,
)
from walras.allocator.hadar.horizon import Horizon, apply_horizon
from walras.allocator.hadar.inputs import HadarInputs
from walras.allocator.hadar.prices import capacity, competitive_ratio, default_bounds, job_utility
from walras.allocator.hadar.results import Gang, HadarPlan, JobPlan

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def plan_round(
    inputs: HadarInputs,
    *,
    fork_jobs: bool = False,
    method: Method = "auto",
    dp_max_cells: int = DP_MAX_CELLS,
    backfill: bool = False,
    preempt: bool = False,
    horizon: Horizon | None = None,
    restart_aware: bool = True,
) -> HadarPlan:
    """Plan one round: Hadar (``fork_jobs=False``) or HadarE (``fork_jobs=True``).

    Args:
        inputs: the validated round (:func:`~walras.allocator.hadar.inputs.make_inputs`).
        fork_jobs: run HadarE's copies for forkable jobs.
        method: queue choice, ``"auto"`` (DP when small enough), ``"dp"`` or ``"greedy"``.
        dp_max_cells: ``auto`` uses the DP while ``queue length × pooled states`` is at most this.
        backfill: give GPUs left idle to waiting jobs whatever their payoff (step 3).
        preempt: re-plan every job each round (step 1 replaced, see the module docstring).
        horizon: the makespan horizon of :mod:`~walras.allocator.hadar.horizon` (step 0).
        restart_aware: with ``preempt``, a running job may keep its GPUs without paying the
            restart (``QueueJob.stay``); ``False`` re-plans it as if it were waiting.
    """
    biggest = int(inputs.node_free.max()) if inputs.n_nodes else 0
    forking = inputs.forkable & (inputs.replicas <= biggest) & fork_jobs
    given = inputs
    share = None
    if horizon is not None:
        # Forked-mode jobs are covered with the forking LP (no one-type-at-a-time row).
        none = np.zeros(inputs.n_jobs, dtype=bool)
        planned = apply_horizon(inputs, horizon, none, forked=forking)
        inputs, share = planned.inputs, planned.share
    cap = capacity(inputs)
    u_min, u_max = default_bounds(inputs)
    market = Market(cap, u_min, u_max)
    thr = inputs.throughput
    active = (inputs.remaining > 0) & (thr.max(axis=1) > 0)
    rows = inputs.current.sum(axis=1)
    forked_mode = active & forking
    free = inputs.node_free.astype(np.int64).copy()
    gangs: dict[int, list[GangState]] = {}

    running = np.flatnonzero(active & ~forked_mode & (rows == inputs.replicas) & (not preempt))
    rates_now = {int(j): _current_rate(inputs, int(j)) for j in running}
    keepers = [int(j) for j in running if rates_now[int(j)] > 0]
    for j in keepers:
        free -= inputs.current[j]
    for j in keepers:
        gangs[j] = [_keep_or_move(inputs, j, rates_now[j], free, market)]

    waiting = [int(j) for j in np.flatnonzero(active) if int(j) not in gangs]
    waiting.sort(key=lambda j: (-float(inputs.elapsed[j]), j))
    utils = _utils_at_speeds(inputs, np.array(waiting, dtype=np.int64))
    queue = [QueueJob(j, thr[j], int(inputs.replicas[j]), utils[i]) for i, j in enumerate(waiting)]
    if preempt and waiting:
        if restart_aware:
            queue = _with_stays(inputs, queue, forked_mode)
        # A re-planned round has no arrival order to honour: highest per-GPU utility first
        # (a running job's counted at the better of staying and moving).
        density = [max(float(q.utils.max()), q.stay_utility) / q.gang for q in queue]
        order = sorted(range(len(queue)), key=lambda i: (-density[i], queue[i].job))
        queue = [queue[i] for i in order]
    pool = pooled(inputs, free)
    admitted, used = choose(queue, pool, market, method, dp_max_cells)
    filled: set[int] = set()
    if backfill:
        taken = {a.job for a in admitted}
        rest = [q for q in queue if q.job not in taken and not forked_mode[q.job]]
        left = pool - sum((a.counts for a in admitted), np.zeros_like(pool))
        extra = admit_all(rest, left, market)
        filled = {a.job for a in extra}
        admitted = [*admitted, *extra]
    # Jobs that keep their GPU types are laid out first, on their own nodes, so that a job placed
    # before them in queue order does not take those nodes (any type counts within the pooled
    # free GPUs can be laid out, in any order).
    for a in sorted(admitted, key=lambda a: not _same_types(inputs, a.job, a.counts)):
        prefer = inputs.current[a.job] if rows[a.job] > 0 else None
        nodes = layout(a.counts, free, inputs.node_type, prefer)
        gangs[a.job] = [GangState(nodes, a.rate, _is_kept(inputs, a.job, nodes), a.cost)]

    last: set[int] = set()
    if fork_jobs:
        # Copies fill idle nodes first on the types of the jobs' LP support, then on every usable
        # type: a node no job's support covers would otherwise idle (the LP plans fractions, not
        # whole nodes).
        jobs = np.flatnonzero(forked_mode)
        dropped: dict[int, list[GangState]] = {}
        last = fork(inputs, jobs, gangs, free, market, dropped, share)
        if given is not inputs:
            last |= fork(given, jobs, gangs, free, market, dropped, share)
        inputs = given
        # End game: GPUs that no other job took go back to the jobs in their last round.
        restore(inputs, dropped, gangs, free)

    utilities = projected_utilities(inputs, gangs)
    plans = [
        _job_plan(inputs, j, gangs[j], bool(forked_mode[j]), j in last, j in filled, utilities[j])
        for j in sorted(gangs)
    ]
    plans = [p for p in plans if p.gangs]
    placed = {p.job for p in plans}
    final = market.prices(pooled(inputs, free))
    alpha, alpha_eff = competitive_ratio(u_min, u_max, cap, int(inputs.replicas.max(initial=1)))
    return HadarPlan(
        jobs=tuple(plans),
        waiting=tuple(int(j) for j in np.flatnonzero(active) if int(j) not in placed),
        type_prices=tuple(float(p) for p in final),
        node_prices=tuple(float(final[t]) for t in inputs.node_type),
        u_min=tuple(float(x) for x in u_min),
        u_max=tuple(float(x) for x in u_max),
        alpha=alpha,
        alpha_eff=alpha_eff,
        method=used,
        total_payoff=float(sum(p.payoff for p in plans)),
    )


def _value(inputs: HadarInputs, j: int) -> Callable[[FloatArray], FloatArray]:
    """Utility of job ``j`` started now (restart paid) at rates ``(S,)``."""
    start = float(inputs.elapsed[j]) + inputs.restart_seconds
    rem = float(inputs.remaining[j])
    # ``job_utility`` for one job, with its constants hoisted: the queue DP calls this per job.
    ideal = np.array([float(inputs.total_work[j]) / float(inputs.throughput[j].max())])
    scale = float(inputs.weight[j]) * int(inputs.replicas[j])
    shape = inputs.utility

    def value(rate: FloatArray) -> FloatArray:
        return np.asarray(scale * shape(start + rem / rate, ideal), dtype=np.float64)

    return value


def _utils_at_speeds(inputs: HadarInputs, jobs: IntArray) -> FloatArray:
    """``(n, T)``: utility of each job started now (restart paid) at each type's rate."""
    speed = inputs.throughput[jobs]
    start = inputs.elapsed[jobs] + inputs.restart_seconds
    with np.errstate(divide="ignore"):
        tau = start[:, None] + inputs.remaining[jobs, None] / np.where(speed > 0, speed, 0.0)
    return np.where(speed > 0, job_utility(inputs, jobs[:, None], tau), 0.0)


def _with_stay(inputs: HadarInputs, q: QueueJob) -> QueueJob:
    """Job ``q`` with its stay option: keep its GPUs now, no restart (whole, non-forked gangs at
    a positive rate only; after the horizon, a type it may no longer use gives rate 0).

    One job at a time; :func:`_with_stays` is the same for a whole queue (the planner's form,
    pinned against this one in ``tests/unit/test_hadar_batched.py``)."""
    j = q.job
    now = inputs.current[j]
    rate = _current_rate(inputs, j)
    if int(now.sum()) != int(inputs.replicas[j]) or rate <= 0:
        return q
    counts = np.bincount(inputs.node_type, weights=now, minlength=inputs.n_types)
    tau = float(inputs.elapsed[j]) + float(inputs.remaining[j]) / rate
    util = float(job_utility(inputs, np.array([j]), np.array([tau]))[0])
    return dataclasses.replace(q, stay=counts.astype(np.int64), stay_utility=util, stay_rate=rate)


def _with_stays(
    inputs: HadarInputs, queue: list[QueueJob], forked_mode: npt.NDArray[np.bool_]
) -> list[QueueJob]:
    """:func:`_with_stay` for every job of ``queue`` not in forked mode, in one pass over arrays:
    the same element-wise operations on the same numbers, so the same floats."""
    jobs = np.array([q.job for q in queue], dtype=np.int64)
    onehot = (inputs.node_type[:, None] == np.arange(inputs.n_types)[None, :]).astype(np.int64)
    counts = inputs.current[jobs] @ onehot
    thr = inputs.throughput[jobs]
    # The slowest type the job holds a pod on (``_current_rate``); 0 where it holds none.
    held = counts > 0
    rate = np.where(held, thr, np.inf).min(axis=1)
    rate = np.where(held.any(axis=1), rate, 0.0)
    ok = (counts.sum(axis=1) == inputs.replicas[jobs]) & (rate > 0) & ~forked_mode[jobs]
    util = np.zeros(jobs.size)
    if ok.any():
        tau = inputs.elapsed[jobs[ok]] + inputs.remaining[jobs[ok]] / rate[ok]
        util[ok] = job_utility(inputs, jobs[ok], tau)
    out = list(queue)
    for i in np.flatnonzero(ok):
        q = queue[i]
        out[i] = QueueJob(
            q.job, q.speed, q.gang, q.utils, counts[i].copy(), float(util[i]), float(rate[i])
        )
    return out


def _keep_or_move(
    inputs: HadarInputs, j: int, rate_now: float, free: IntArray, market: Market
) -> GangState:
    """Step 1 for running job ``j`` (its GPUs are held in ``free``; updates ``free``)."""
    here = inputs.current[j]
    free += here
    pool = pooled(inputs, free)
    prices = market.prices(pool)
    counts_now = np.bincount(inputs.node_type, weights=here, minlength=inputs.n_types)
    cost_now = float((counts_now * np.where(counts_now > 0, prices, 0.0)).sum())
    tau_now = float(inputs.elapsed[j]) + float(inputs.remaining[j]) / rate_now
    keep = float(job_utility(inputs, np.array([j]), np.array([tau_now]))[0]) - cost_now
    alt = find_alloc(
        inputs.throughput[j],
        int(inputs.replicas[j]),
        pool[None, :],
        prices[None, :],
        _value(inputs, j),
    )
    if alt.payoff[0] > keep + 1e-12 * max(1.0, abs(keep)):
        nodes = layout(alt.counts[0], free, inputs.node_type, here)
        return GangState(nodes, float(alt.rate[0]), _is_kept(inputs, j, nodes), float(alt.cost[0]))
    free -= here
    nodes = tuple((int(k), int(here[k])) for k in np.flatnonzero(here))
    return GangState(nodes, rate_now, True, cost_now)


def _job_plan(
    inputs: HadarInputs,
    j: int,
    gangs: list[GangState],
    forked_mode: bool,
    last: bool,
    filled: bool,
    utility: float,
) -> JobPlan:
    """Job ``j``'s plan; ``utility``: its projected utility (``forking.projected_utility``)."""
    rem = float(inputs.remaining[j])
    steps = split_steps(inputs, j, gangs) if forked_mode else [rem] * len(gangs)
    row = np.zeros(inputs.n_nodes, dtype=np.int64)
    for g in gangs:
        for k, pods in g.nodes:
            row[k] += pods
    utility = utility if gangs else 0.0
    cost = float(sum(g.cost for g in gangs))
    kept = bool((row == inputs.current[j]).all())
    return JobPlan(
        job=j,
        placement=tuple((int(k), int(row[k])) for k in np.flatnonzero(row)),
        gangs=tuple(Gang(g.nodes, g.rate, s, g.kept) for g, s in zip(gangs, steps, strict=True)),
        rate=float(sum(g.rate for g in gangs)),
        utility=utility,
        cost=cost,
        payoff=utility - cost,
        kept=kept,
        moved=bool(inputs.current[j].sum() > 0) and not kept,
        forked=len(gangs) > 1,
        last_round=last,
        backfilled=filled,
    )


def _current_rate(inputs: HadarInputs, j: int) -> float:
    """Rate of job ``j``'s current gang: its slowest member's type (0 if a type is unusable)."""
    types = inputs.node_type[inputs.current[j] > 0]
    return float(inputs.throughput[j, types].min()) if types.size else 0.0


def _same_types(inputs: HadarInputs, j: int, counts: IntArray) -> bool:
    """Job ``j`` now holds exactly ``counts`` GPUs of each type."""
    now = np.bincount(inputs.node_type, weights=inputs.current[j], minlength=inputs.n_types)
    return bool(inputs.current[j].any()) and bool((now == counts).all())


def _is_kept(inputs: HadarInputs, j: int, nodes: tuple[tuple[int, int], ...]) -> bool:
    return all(int(inputs.current[j, k]) == pods for k, pods in nodes)

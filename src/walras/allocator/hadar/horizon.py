"""Makespan horizon for Hadar: long-run type eligibility and deadline urgency (opt-in).

Hadar's prices are per round: they say how busy a type is *now*, not which jobs the cluster
should keep on which type to drain the whole queue soonest. A batch then finishes late: short
jobs take the fast GPUs first and the long jobs, started last or on slow types, set the total time
to done (TTD). This module adds the long run, as an LP relaxation solved every round.

**Fluid makespan LP.** Over the active jobs ``j`` and the GPU types ``r`` where the job's whole gang
fits (``W_j ≤ c^r``, pooled), with ``d_jr = rem_j / X_j^r`` seconds::

    T* = min T   s.t.  Σ_r x_jr = 1                      (each job's remaining work, split)
                       Σ_j x_jr · W_j · d_jr ≤ c^r · T    (type r's GPU-seconds)
                       Σ_r x_jr · d_jr ≤ T                (a job runs on one type at a time)
                       x ≥ 0

``T*`` is a lower bound on the time left to drain the queue (any schedule's fractions satisfy the
constraints), and the LP's dual prices of the capacity rows rank types by what a job's GPU-second
there is worth; its solution ``x`` puts each job on the types where it is comparatively fastest.

**Eligibility.** A job may use only the types in the support of ``x`` (``x_jr > 10⁻⁶``) this round;
its other throughputs are set to 0 before Hadar runs. A running job whose current types are all
in its support may use only those (it moves when the LP drops its type, not between types the LP
finds equally good). The LP is re-solved every round on the
remaining work, so the support follows the queue. Gangs that fit no single type are left
unchanged. HadarE's forked-mode jobs (``forked``) are covered without their one-type-at-a-time row:
their copies run on several types at once, so only the capacity rows bind them; the support then
says on which types such a job is admitted and where its copies go first (the planner then lets
copies fill idle nodes of any usable type), and they are never made critical.

**Urgency.** A job whose remaining time on its fastest eligible type, ``D_j = rem_j / max X_j^r``,
leaves it less slack than ``w = window · H`` against the horizon ``H = T* · (1 + margin)``
(``slack_j = H − D_j < w``) is *critical*: if it waits, the queue cannot drain by ``H``.
Its utility weight is scaled so that its per-GPU utility at its best rate is
``weight_j · (boost + (w − slack_j) / w)``; with every shape of
:mod:`~walras.allocator.hadar.utilities` at most 1 per GPU, ``boost > 1`` ranks every critical job
above every other, the least slack first. Within a round the utility stays non-increasing in the
completion time (only the per-job constant changes), so FIND_ALLOC's exactness argument holds.

Worked example: one type of 2 GPUs, three 1-GPU jobs needing 10 h, 1 h and 1 h: ``T* = 10 h``
(the long job alone takes 10 h; 12 GPU-hours over 2 GPUs only 6 h), ``H = 10.5 h`` at margin
0.05, ``w = 1.05 h`` at window 0.1. The long job's slack is 0.5 h < ``w``: it is critical (level
``2 + 0.55/1.05``) and starts now; the short jobs (slack 9.5 h) are not. Shortest-first alone
would run both short jobs first and finish at 11 h instead of 10 h.

Deviation from the Hadar paper (documented in :mod:`~walras.allocator.hadar.planner`): it has no
horizon; its utilities are fixed per job. Here the weight is re-derived each round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator import highs
from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar.inputs import HadarInputs
from walras.allocator.hadar.prices import capacity, job_utility

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

SUPPORT_TOL = 1e-6
"""A type is in a job's support when the LP gives it more than this fraction of the job."""


@dataclass(frozen=True, slots=True)
class Horizon:
    """Options of the makespan horizon (see the module docstring).

    Attributes:
        margin: ``H = T* · (1 + margin)``; the LP's ``T*`` ignores whole gangs and rounds, which a
            real schedule cannot, so the horizon is a little longer.
        window: a job is critical with less slack than this fraction of ``H``.
        boost: per-GPU utility level of a critical job at its best rate (relative to its weight);
            above 1, the largest per-GPU value of every utility shape.
    """

    margin: float = 0.05
    window: float = 0.1
    boost: float = 2.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.margin) and self.margin >= 0):
            raise InvalidProblem(f"margin must be >= 0, got {self.margin}", field="margin")
        if not (np.isfinite(self.window) and 0 < self.window <= 1):
            raise InvalidProblem(f"window must be in (0, 1], got {self.window}", field="window")
        if not (np.isfinite(self.boost) and self.boost > 1):
            raise InvalidProblem(f"boost must be > 1, got {self.boost}", field="boost")


@dataclass(frozen=True, slots=True)
class HorizonResult:
    """What the horizon did this round.

    Attributes:
        inputs: the round's inputs with non-eligible throughputs set to 0 and critical jobs'
            weights raised.
        t_star: the LP's ``T*`` in seconds (0 when no job is covered).
        eligible: ``(J, T)`` types each job may use (the original usable types where uncovered).
        critical: ``(J,)`` jobs whose weight was raised.
        share: ``(J, T)`` GPUs of each type the LP's plan gives each job on average until
            ``T*`` (``x_jr · W_j · d_jr / T*``; 0 for uncovered jobs).
    """

    inputs: HadarInputs
    t_star: float
    eligible: BoolArray
    critical: BoolArray
    share: FloatArray


def apply_horizon(
    inputs: HadarInputs,
    options: Horizon,
    skip: BoolArray,
    *,
    forked: BoolArray | None = None,
) -> HorizonResult:
    """Eligibility and urgency for the round (module docstring); ``skip (J,)``: leave unchanged;
    ``forked (J,)``: jobs in HadarE's forked mode, covered by the LP without the one-type-at-a-
    time row (their copies run on several types at once) and never made critical (their copies
    fill every node they may use anyway)."""
    thr = inputs.throughput
    cap = capacity(inputs)
    rem = inputs.remaining
    fits = (thr > 0) & (inputs.replicas[:, None] <= cap[None, :])
    par = np.zeros(inputs.n_jobs, dtype=bool) if forked is None else forked & ~skip
    covered = (rem > 0) & fits.any(axis=1) & ~skip
    eligible = thr > 0
    critical = np.zeros(inputs.n_jobs, dtype=bool)
    jobs = np.flatnonzero(covered)
    share = np.zeros(thr.shape)
    if jobs.size == 0:
        return HorizonResult(inputs, 0.0, eligible, critical, share)
    on = np.zeros((jobs.size, inputs.n_types), dtype=bool)
    for r in range(inputs.n_types):
        on[:, r] = inputs.current[jobs][:, inputs.node_type == r].sum(axis=1) > 0
    x, t_star = fluid_makespan(
        thr[jobs],
        inputs.replicas[jobs],
        rem[jobs],
        cap,
        fits[jobs],
        running_on=on,
        restart_seconds=inputs.restart_seconds,
        parallel=par[jobs],
    )
    if t_star > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            seconds = np.where(
                fits[jobs], rem[jobs, None] / np.where(fits[jobs], thr[jobs], 1.0), 0
            )
        share[jobs] = x * inputs.replicas[jobs, None] * seconds / t_star
    eligible = eligible.copy()
    support = x > SUPPORT_TOL
    # A running job whose types are all in its support stays on them: moving between types the
    # LP finds equally good would only cost restarts (re-planned rounds re-rank every job).
    stay = on.any(axis=1) & ~(on & ~support).any(axis=1)
    support[stay] = on[stay]
    eligible[jobs] = support
    new_thr = np.where(eligible, thr, 0.0)
    best = new_thr[jobs].max(axis=1)
    duration = rem[jobs] / best
    horizon = t_star * (1.0 + options.margin)
    window = options.window * horizon
    slack = horizon - duration
    hot = (slack < window) & ~par[jobs]
    weight = inputs.weight.copy()
    if hot.any():
        crit = jobs[hot]
        tau = inputs.elapsed[crit] + inputs.restart_seconds + duration[hot]
        # Per-GPU utility of the job at its best rate, with its current weight.
        probe = dataclasses.replace(inputs, throughput=new_thr)
        per_gpu = job_utility(probe, crit, tau) / inputs.replicas[crit]
        level = inputs.weight[crit] * (options.boost + (window - slack[hot]) / window)
        usable = per_gpu > 0
        weight[crit[usable]] = weight[crit[usable]] * level[usable] / per_gpu[usable]
        critical[crit[usable]] = True
    out = dataclasses.replace(inputs, throughput=new_thr, weight=weight)
    return HorizonResult(out, t_star, eligible, critical, share)


def fluid_makespan(
    throughput: FloatArray,
    replicas: npt.NDArray[np.int64],
    remaining: FloatArray,
    cap: FloatArray,
    allowed: BoolArray,
    *,
    running_on: BoolArray | None = None,
    restart_seconds: float = 0.0,
    parallel: BoolArray | None = None,
    copies: FloatArray | None = None,
) -> tuple[FloatArray, float]:
    """Solve the fluid makespan LP; returns ``(x (n, T), T*)`` (seconds).

    Every row of ``allowed`` must have a type (the caller covers only such jobs). The LP is
    degenerate (many ``x`` reach ``T*``), so a second LP picks, among the plans with
    ``T ≤ T*``, one that uses the fewest GPU-seconds: ``Σ x_jr W_j (d_jr + restart)``, the
    restart counted for a type the job does not run on now (``running_on (n, T)``; a job that
    runs nowhere pays it everywhere). Faster types are preferred where capacity allows, and a
    job stays on its type when moving gains nothing, so the support does not flip between
    rounds. Jobs flagged ``parallel (n,)`` (forked copies) have no one-type-at-a-time row; with
    ``copies (n, T)``, the most copies of a parallel job's gang that type ``r`` can hold at once
    (one per node with room), they get ``x_jr · d_jr ≤ copies_jr · T`` instead.
    """
    n, T = throughput.shape
    dur = np.where(allowed, remaining[:, None] / np.where(allowed, throughput, 1.0), 0.0)
    nv = n * T + 1
    var = np.arange(n * T).reshape(n, T)
    # Capacity rows: Σ_j x_jr W_j d_jr / c^r - T ≤ 0 (scaled by c^r so that T is in seconds).
    gpu_seconds = dur * replicas[:, None] / np.where(cap > 0, cap, 1.0)[None, :]
    rows = [np.repeat(np.arange(T)[None, :], n, axis=0).ravel(), np.arange(T)]
    cols = [var.ravel(), np.full(T, nv - 1)]
    vals = [gpu_seconds.ravel(), -np.ones(T)]
    # One type at a time: Σ_r x_jr d_jr - T ≤ 0 (vacuous, 0 ≤ T, for a parallel job).
    if parallel is not None:
        dur_row = np.where(np.asarray(parallel, dtype=bool)[:, None], 0.0, dur)
    else:
        dur_row = dur
    rows += [T + np.repeat(np.arange(n), T), T + np.arange(n)]
    cols += [var.ravel(), np.full(n, nv - 1)]
    vals += [dur_row.ravel(), -np.ones(n)]
    n_rows = T + n
    if parallel is not None and copies is not None:
        # Per (parallel job, type): its copies there work at most copies_jr · T seconds.
        pj, pr = np.nonzero(np.asarray(parallel, dtype=bool)[:, None] & allowed)
        m = pj.size
        rows += [n_rows + np.arange(m), n_rows + np.arange(m)]
        cols += [var[pj, pr], np.full(m, nv - 1)]
        vals += [dur[pj, pr], -np.asarray(copies, dtype=np.float64)[pj, pr]]
        n_rows += m
    # The ≤ rows, then the = rows (Σ_r x_jr = 1), column by column (``highs.solve``).
    rows += [n_rows + np.repeat(np.arange(n), T)]
    cols += [var.ravel()]
    vals += [np.ones(n * T)]
    row_idx, col_idx, val = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    order = np.lexsort((row_idx, col_idx))
    indptr = np.zeros(nv + 1, dtype=np.int64)
    np.cumsum(np.bincount(col_idx, minlength=nv), out=indptr[1:])
    indices, data = row_idx[order], val[order]
    row_lower = np.concatenate([np.full(n_rows, -np.inf), np.ones(n)])
    row_upper = np.concatenate([np.zeros(n_rows), np.ones(n)])
    lower = np.zeros(nv)
    upper = np.append(np.where(allowed, 1.0, 0.0).ravel(), np.inf)
    cost = np.zeros(nv)
    cost[-1] = 1.0
    problem = highs.Lp(cost, indptr, indices, data, row_lower, row_upper, lower, upper)
    first = highs.solve(problem)
    if first is None:
        # Cannot happen for valid inputs (x = 1 on any allowed type is feasible); keep every
        # allowed type rather than fail the round.
        return allowed.astype(np.float64), 0.0
    t_star = float(first[-1])
    moving = np.ones((n, T), dtype=bool)
    if running_on is not None:
        runs = np.asarray(running_on.any(axis=1), dtype=bool)
        moving = ~running_on | ~runs[:, None]
    used = replicas[:, None] * (dur + restart_seconds * moving)
    second = np.append(np.where(allowed, used, 0.0).ravel(), 0.0)
    # Relative slack on T: the second LP must stay feasible at the first one's rounded optimum.
    upper = upper.copy()
    upper[-1] = t_star * (1.0 + 1e-9) + 1e-9
    cost2 = second / max(float(second.max()), 1.0)
    again = highs.solve(dataclasses.replace(problem, cost=cost2, col_upper=upper))
    best = again if again is not None else first
    return best[:-1].reshape(n, T), t_star

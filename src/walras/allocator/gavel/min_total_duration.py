"""Gavel's makespan policy: ``min_total_duration_perf`` and the agnostic ``min_total_duration``.

Heterogeneity-aware (Gavel ``MinTotalDurationPolicyWithPerf``): the smallest horizon ``T`` (s) in
which every active job can finish at a constant rate, with ``n[j]`` its remaining steps::

    minimise T   subject to   Σ_t thr[j, t] · x[j, t] ≥ n[j] / T   for every job j,
                              x ≥ 0,  Σ_t x[j, t] ≤ 1,  Σ_j k[j] · x[j, t] ≤ cap[t]

For a fixed ``T`` this is an LP feasibility problem, and feasibility is monotone in ``T``, so
Gavel bisects with its own bracket and stopping rule, and returns the allocation of the last
feasible ``T`` it *tried*, not of the optimum: start with ``[lo, hi] = [100, 10⁶]``; while
``1.05·lo < hi``, test ``T = (lo + hi)/2`` and move ``hi`` (feasible) or ``lo`` (infeasible) to
it. If no ``T`` in the bracket was feasible, repeat on ``[10⁶, 10⁷]``, then ``[10⁷, 10⁸]``, ….
The result is within 5 % above the optimum ``T*``.

We replay exactly that sequence of ``T`` with one LP instead of one per test: ``T`` is feasible
iff ``T ≥ T* = 1/u*`` with ``u* = max_x min_j Σ_t thr[j, t] x[j, t] / n[j]`` (over jobs with
``n[j] > 0``), a max-min LP solved once with HiGHS. So the final ``T`` is Gavel's to the last
bit (barring a tested ``T`` within solver tolerance of ``T*``), at the cost of one LP. Between
rounds only the remaining steps move, so the LP starts from the last call's final basis when the
jobs are the same (``MinTotalDuration.warm_start``): a few pivots instead of a solve from scratch.

Gavel's feasibility problem has the constant objective ``maximise 1``, so every feasible ``x`` is
optimal; its interior-point solver returns (approximately) the analytic center of that feasible
polytope, and so does this module by default (:mod:`.center`).

The agnostic variant (Gavel ``MinTotalDurationPolicy``) runs the same bisection with every type's
throughput replaced by the job's ``v100`` throughput (Gavel hard-codes the type name).

Worked example: one type with 1 GPU, two 1-GPU jobs with 100 steps left at 1 step/s. Together they
need 200 GPU-seconds, so ``T* = 200`` (``x = (½, ½)``). The bisection tests 500,050, 250,075, …,
halving ``hi`` until the tested ``T`` drops below 200, then closes in; it stops with the smallest
feasible tested ``T`` in ``[200, 210)``.
"""

from __future__ import annotations

import numpy as np

from walras.allocator import highs
from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import center, lp
from walras.allocator.gavel.inputs import FloatArray, GavelInputs

FIRST_BRACKET = (100.0, 1_000_000.0)
"""Gavel's initial ``(min_T, max_T)`` in seconds."""

STOP_RATIO = 1.05
"""Gavel bisects while ``STOP_RATIO · min_T < max_T``."""

MAX_BRACKETS = 12
"""Brackets ``[10⁶·10ⁱ, 10⁷·10ⁱ]`` tried before giving up (10¹⁸ s: the jobs cannot run at all)."""


def gavel_horizon(t_star: float) -> float:
    """The ``T`` Gavel's bisection ends with when exactly the ``T ≥ t_star`` are feasible."""
    lo, hi = FIRST_BRACKET
    top = hi
    for _ in range(MAX_BRACKETS):
        best: float | None = None
        while STOP_RATIO * lo < hi:
            T = (lo + hi) / 2.0
            if t_star <= T:
                best, hi = T, T
            else:
                lo = T
        if best is not None:
            return best
        lo, hi, top = top, top * 10.0, top * 10.0
    raise lp.SolverError(f"min_total_duration: no horizon up to {top:.3g} s is feasible")


class MinTotalDuration:
    """``min_total_duration_perf`` (``aware=True``) or ``min_total_duration`` (``aware=False``).

    ``central=True`` returns the analytic center of the feasible polytope at the final ``T``
    (what Gavel's ECOS returns for ``maximise 1``); ``False`` returns HiGHS's feasible vertex.
    """

    def __init__(self, *, aware: bool, central: bool = True) -> None:
        self.aware = aware
        self.central = central
        self.name = "min_total_duration_perf" if aware else "min_total_duration"
        self.last_horizon: float | None = None
        """The final ``T`` of the last call (for diagnostics and tests)."""
        self.warm_start = True
        """Start the LP from the last call's final basis when the jobs and types are the same
        (``_start``); ``False``: from scratch every call (linprog's answer bit-for-bit). Started,
        HiGHS may end at another optimal vertex: the same ``T*`` and the same analytic center
        (to its precision). Only with ``central``: without it the vertex is the answer, so it is
        always linprog's."""
        self._start: tuple[tuple[int, ...], bytes, int, highs.Basis] | None = None

    def allocate(self, inputs: GavelInputs) -> FloatArray:
        J, T = inputs.n_jobs, inputs.n_types
        remaining = inputs.require("num_steps_remaining", self.name)
        if J == 0 or T == 0:
            return np.zeros((J, T))
        thr = inputs.throughputs
        if not self.aware:
            ref = inputs.reference_column(self.name)
            thr = np.repeat(thr[:, ref : ref + 1], T, axis=1)
        k, cap = inputs.scale_factors, inputs.capacity
        active = remaining > 0.0
        live = cap > 0.0
        stuck = active & ~(thr[:, live] > 0.0).any(axis=1)
        if stuck.any():
            j = int(np.argmax(stuck))
            raise InvalidProblem(
                f"job {inputs.job_ids[j]}: {remaining[j]:g} steps left but throughput 0 on "
                "every type with GPUs, so no horizon is feasible",
                field="throughputs",
                index=j,
            )
        poly = lp.base_polytope(k, cap)
        coef = thr / np.where(active, remaining, 1.0)[:, None]
        # Between rounds only the remaining work moves (one coefficient per job and type), so
        # the last round's optimal basis is nearly optimal again: HiGHS starts from it.
        key = (tuple(int(i) for i in inputs.job_ids), active.tobytes(), T)
        warm = self.warm_start and self.central
        start = self._start[3] if warm and self._start and self._start[:3] == key else None
        x_opt, u_star, basis = lp.max_min_from(start, poly, coef, active)
        self._start = None if basis is None else (*key, basis)
        horizon = gavel_horizon(1.0 / u_star if u_star > 0.0 else np.inf)
        self.last_horizon = horizon
        x_opt = lp.finish(x_opt, k, cap)
        if self.central:
            x_opt = feasible_center(x_opt, u_star * horizon, thr, remaining / horizon, inputs)
        return lp.finish(x_opt, k, cap)


def feasible_center(
    x_opt: FloatArray, ratio: float, coef: FloatArray, lower: FloatArray, inputs: GavelInputs
) -> FloatArray:
    """Analytic center of Gavel's polytope ∩ ``{coef·x ≥ lower}`` (:mod:`.center`).

    ``x_opt`` is feasible with ``coef·x_opt ≥ ratio·lower`` for a ``ratio ≥ 1``. The start
    ``(1 − ε)·x_opt + ε·x_in`` (``x_in`` strictly inside the base polytope) keeps
    ``coef·x > lower`` for ``ε < 1 − 1/ratio``. If ``ratio`` is 1 to rounding (the tested
    horizon is the optimum itself), the polytope has no interior: every feasible point is on the
    optimal face and ``x_opt`` is returned. Jobs with nothing left (``lower = 0`` and a zero
    row) get the slack row ``0 ≥ −1`` instead of ``0 ≥ 0``, which has no interior.
    """
    k, cap = inputs.scale_factors, inputs.capacity
    eps = 0.5 * (1.0 - 1.0 / ratio) if np.isfinite(ratio) else 0.5
    if eps <= 1e-12:
        return x_opt
    start = (1.0 - eps) * x_opt + eps * lp.strictly_inside(k, cap)
    live = cap > 0.0
    lower = np.where((coef[:, live] > 0.0).any(axis=1), lower, -1.0)
    try:
        return center.analytic_center(start, coef, lower, k, cap)
    except lp.SolverError:
        return x_opt

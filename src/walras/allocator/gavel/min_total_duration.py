"""Gavel's makespan policy: ``min_total_duration_perf`` and the agnostic ``min_total_duration``.

Heterogeneity-aware (Gavel ``MinTotalDurationPolicyWithPerf``): the smallest horizon ``T`` (s) in
which every active job can finish at a constant rate, with ``n[j]`` its remaining steps::

    minimise T   subject to   Σ_t thr[j, t] · x[j, t] ≥ n[j] / T   for every job j,
                              x ≥ 0,  Σ_t x[j, t] ≤ 1,  Σ_j k[j] · x[j, t] ≤ cap[t]

For a fixed ``T`` this is an LP feasibility problem, and feasibility is monotone in ``T``, so
Gavel bisects, and so do we, with Gavel's exact bracket and stopping rule (the result depends on
them, because Gavel returns the allocation of the last feasible ``T`` it *tried*, not of the
optimum): start with ``[lo, hi] = [100, 10⁶]``; while ``1.05·lo < hi``, test ``T = (lo + hi)/2``
and move ``hi`` (feasible) or ``lo`` (infeasible) to it. If no ``T`` in the bracket was feasible,
repeat on ``[10⁶, 10⁷]``, then ``[10⁷, 10⁸]``, and so on. The result is the allocation at the
smallest feasible ``T`` tried, which is within 5 % of the optimum ``T*``.

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

from walras.allocator.gavel import center, lp
from walras.allocator.gavel.inputs import FloatArray, GavelInputs

FIRST_BRACKET = (100.0, 1_000_000.0)
"""Gavel's initial ``(min_T, max_T)`` in seconds."""

STOP_RATIO = 1.05
"""Gavel bisects while ``STOP_RATIO · min_T < max_T``."""

MAX_BRACKETS = 12
"""Brackets ``[10⁶·10ⁱ, 10⁷·10ⁱ]`` tried before giving up (10¹⁸ s: the jobs cannot run at all)."""


def bisect_horizon(
    poly: lp.Polytope, throughputs: FloatArray, remaining: FloatArray
) -> tuple[float, FloatArray]:
    """Gavel's bisection; returns the smallest feasible tested ``T`` and the LP's ``x`` there."""
    lo, hi = FIRST_BRACKET
    top = hi
    for _ in range(MAX_BRACKETS):
        best: tuple[float, FloatArray] | None = None
        while STOP_RATIO * lo < hi:
            T = (lo + hi) / 2.0
            x = lp.feasible_point(poly, throughputs, remaining / T)
            if x is None:
                lo = T
            else:
                best, hi = (T, x), T
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

    def allocate(self, inputs: GavelInputs) -> FloatArray:
        J, T = inputs.n_jobs, inputs.n_types
        remaining = inputs.require("num_steps_remaining", self.name)
        if J == 0 or T == 0:
            return np.zeros((J, T))
        thr = inputs.throughputs
        if not self.aware:
            ref = inputs.reference_column(self.name)
            thr = np.repeat(thr[:, ref : ref + 1], T, axis=1)
        poly = lp.base_polytope(inputs.scale_factors, inputs.capacity)
        horizon, x = bisect_horizon(poly, thr, remaining)
        self.last_horizon = horizon
        if self.central:
            x = feasible_center(poly, thr, remaining / horizon, inputs, fallback=x)
        return lp.finish(x, inputs.scale_factors, inputs.capacity)


def feasible_center(
    poly: lp.Polytope,
    coef: FloatArray,
    lower: FloatArray,
    inputs: GavelInputs,
    *,
    fallback: FloatArray,
) -> FloatArray:
    """Analytic center of ``poly ∩ {coef·x ≥ lower}``, from the max-margin point (:mod:`.lp`).

    If the polytope has (numerically) no interior, i.e. the tested horizon is the optimum to
    solver precision, every feasible point is on the optimal face already and ``fallback`` (a
    feasible LP point) is returned.
    """
    start, margin = lp.interior_point(poly, coef, lower)
    if margin <= 1e-9:
        return fallback
    try:
        return center.analytic_center(start, coef, lower, inputs.scale_factors, inputs.capacity)
    except lp.SolverError:
        return fallback

"""A solve whose gap stalls near the certificate ends early, within a bound cvxpy confirms.

Many jobs with the same throughput row (Gavel's table gives whole groups of jobs the same one)
make the dual kinked at p*: whole groups flip between types together, and neither the scaled
nor the averaged responses nor the polish certify ε·n, however long the price iteration runs.
The solver then stops once its gap is within ``STALL_WITHIN``·ε·n and shrank by less than
``STALL_SHRINK`` over ``STALL_EVALUATIONS`` evaluations. What it returns must still be what it
claims: a feasible allocation worth its reported utility, an upper bound no lower than the
optimum, and so an allocation within the reported gap (≤ ``STALL_WITHIN``·ε·n) of cvxpy's optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from pricing_helpers import assert_feasible, cvxpy_optimum, utility

from walras.allocator import pricing
from walras.allocator.pricing import solver

EPS = 1e-3


def _tied_round(seed: int) -> tuple[pricing.PricingProblem, np.ndarray]:
    """A round of eight kinds of jobs (gangs of 1-8 GPUs) on 20:20:20 GPUs, and the prices of
    the round before it (one job more), as the operator warm-starts it."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 300))
    rows = rng.uniform(0.05, 1.0, size=(8, 3))[rng.integers(0, 8, n)]
    gang = rng.choice([1, 1, 1, 2, 4, 8], size=n).astype(float)
    capacity = np.full(3, 20.0)

    def problem(keep: slice) -> pricing.PricingProblem:
        A = rows[keep] * gang[keep, None]  # the whole gang's rate
        return pricing.PricingProblem(throughput=A, capacity=capacity, demand=gang[keep])

    before = pricing.solve(problem(slice(None)), eps=EPS, strict=False)
    return problem(slice(1, None)), np.asarray(before.prices)


def test_a_stalled_solve_stops_early_within_its_gap_of_the_optimum() -> None:
    k, within, shrink = solver.STALL_EVALUATIONS, solver.STALL_WITHIN, solver.STALL_SHRINK
    outcomes = []
    for seed in range(12):
        problem, warm = _tied_round(seed)
        result = pricing.solve(problem, warm_prices=warm, eps=EPS, max_iter=100, strict=False)
        eps_n = EPS * problem.n
        gaps = [d - p for d, p in _best_bounds(result.history)]
        # Where the rule would fire: near the certificate and barely shrinking.
        fires = [
            i
            for i in range(k, len(gaps))
            if gaps[i] <= within * eps_n and gaps[i] > shrink * gaps[i - k]
        ]
        if result.converged:
            outcomes.append("certified")
        elif result.iterations < 100:
            outcomes.append("stalled")
            assert fires == [len(gaps) - 1]  # it stopped at the first evaluation that fired
            assert result.gap <= within * eps_n
        else:
            outcomes.append("cap")
            assert fires == []  # ran to the cap only while the rule never fired
        assert_feasible(problem, result.allocation)
        t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
        assert utility(problem, t) == pytest.approx(result.utility, rel=1e-9, abs=1e-9)
        optimum = cvxpy_optimum(problem)
        tol = 1e-6 * max(1.0, abs(optimum))  # Clarabel's relative accuracy
        assert result.dual_bound >= optimum - tol
        assert result.utility >= optimum - result.gap - tol
    assert "stalled" in outcomes, outcomes  # the rule was exercised, not only the other ends


def _best_bounds(history: tuple[tuple[float, float], ...]) -> list[tuple[float, float]]:
    """The best upper and lower bounds after each evaluation, from the solve's history."""
    out, dual, primal = [], np.inf, -np.inf
    for g, p in history:
        dual, primal = min(dual, g), max(primal, p)
        out.append((dual, primal))
    return out

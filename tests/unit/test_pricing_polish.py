"""The elastic-job polish and the start-price BFGS against independent oracles.

The polish builds a candidate allocation from one evaluation of the dual; the solver keeps it
only as a lower bound. Whatever prices it starts from, that allocation must be feasible, its
reported utility must be its own (recomputed here with ``pricing_helpers.utility``), it cannot
beat the optimum U* (cvxpy), the dual bound g(p) cannot fall below U*, and the solver never
keeps a candidate worse than the plain column-scaled responses (computed here from
``best_response``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pricing_helpers import assert_feasible, cvxpy_optimum, random_problem, utility

from walras.allocator import pricing
from walras.allocator.pricing import bfgs, solver
from walras.allocator.pricing.instances import paper_problem


def _scaled_utility(problem: pricing.PricingProblem, prices: np.ndarray) -> float:
    """U of the best responses at ``prices`` with columns scaled by min(1, R_j / r_j)."""
    X = pricing.best_response(problem, prices)
    use = (problem.demand_matrix() * X).sum(axis=0)
    R = np.asarray(problem.capacity)
    scale = np.where(use > R, R / use, 1.0)
    return utility(problem, (np.asarray(problem.throughput) * X * scale).sum(axis=1))


@pytest.mark.parametrize("kind", ["log", "alpha"])
@pytest.mark.parametrize("per_type_demand", [False, True])
@pytest.mark.parametrize("noise", [0.02, 0.2])
def test_polished_allocation_is_feasible_and_bounded_by_cvxpy(
    monkeypatch: pytest.MonkeyPatch, kind: str, per_type_demand: bool, noise: float
) -> None:
    # Small problems normally take the averaged recovery; send them through the polish, and
    # polish whatever the plain gap is.
    monkeypatch.setattr(solver, "AVERAGE_MAX_JOBS_PER_TYPE", 0)
    monkeypatch.setattr(solver, "POLISH_WITHIN", math.inf)
    rng = np.random.default_rng(7)
    problem = random_problem(rng, 500, 3, kind, per_type_demand=per_type_demand, zeros=0.2)
    optimum = cvxpy_optimum(problem)
    near = pricing.solve(problem, eps=1e-6, max_iter=300).prices
    # Start from prices off by up to ±noise: at 20 % many jobs leave their hull edge and
    # are re-solved on the whole hull.
    p = np.asarray(near) * (1.0 + noise * rng.uniform(-1.0, 1.0, problem.m))
    result = pricing.solve(problem, warm_prices=p, max_iter=1, eps=1e-12)
    assert result.iterations == 1
    assert result.timings["polish_steps"] >= 1  # the polish ran
    assert_feasible(problem, result.allocation)
    t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
    np.testing.assert_allclose(result.throughput, t, rtol=1e-12, atol=1e-12)
    assert utility(problem, t) == pytest.approx(result.utility, rel=1e-9, abs=1e-9)
    tol = 1e-6 * max(1.0, abs(optimum))  # Clarabel's relative accuracy
    assert result.utility <= optimum + tol  # a feasible allocation cannot beat U*
    assert result.dual_bound >= optimum - tol  # g(p) is an upper bound
    assert result.utility >= _scaled_utility(problem, p) - 1e-9 * abs(optimum)


def test_polish_certifies_after_one_evaluation_at_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    # The paper's §6.2 log instance above the sampled-start size: the first full evaluation with
    # the polish certifies 1e-3 per job, so scipy's L-BFGS-B is never needed.
    def no_lbfgsb() -> None:
        raise AssertionError("L-BFGS-B was needed")

    monkeypatch.setattr(solver, "_minimize", no_lbfgsb)
    n = solver.COARSE_MIN_JOBS
    problem = paper_problem(n, seed=1, utility="log")
    result = pricing.solve(problem)
    assert result.iterations == 1 and result.converged
    assert result.gap <= 1e-3 * n
    assert_feasible(problem, result.allocation)
    t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
    assert utility(problem, t) == pytest.approx(result.utility, rel=1e-12)


def test_bfgs_docstring_example() -> None:
    # f(p) = (p − 2)² from p = 0: a unit step to 1, then the BFGS step lands on 2.
    seen: list[float] = []

    def f(p: np.ndarray) -> tuple[float, np.ndarray]:
        seen.append(float(p[0]))
        return float((p[0] - 2.0) ** 2), np.array([2.0 * (p[0] - 2.0)])

    state = bfgs.State(np.array([0.0]))
    bfgs.minimize_nonneg(f, state, 3)
    assert seen == pytest.approx([0.0, 1.0, 2.0])
    assert state.p == pytest.approx([2.0])


@pytest.mark.parametrize("seed", range(5))
def test_bfgs_matches_cvxpy_on_bounded_quadratics(seed: int) -> None:
    import cvxpy as cp

    rng = np.random.default_rng(seed)
    m = 5
    B = rng.normal(size=(m, m))
    Q = B @ B.T + 0.1 * np.eye(m)
    c = rng.normal(size=m)  # some coordinates want to be negative: the bound is active

    def f(p: np.ndarray) -> tuple[float, np.ndarray]:
        return float(0.5 * (p - c) @ Q @ (p - c)), Q @ (p - c)

    state = bfgs.State(np.ones(m))
    bfgs.minimize_nonneg(f, state, 200)
    x = cp.Variable(m, nonneg=True)
    cp.Problem(cp.Minimize(0.5 * cp.quad_form(x - c, Q))).solve(solver="CLARABEL")
    assert (state.p >= 0).all()
    # f is strongly convex (λ_min(Q) ≥ 0.1): f(p) − f* ≤ 1e-9 puts p within √(2e-9/0.1) of p*.
    assert f(state.p)[0] <= f(np.asarray(x.value))[0] + 1e-9
    np.testing.assert_allclose(state.p, np.maximum(x.value, 0.0), atol=2e-4)

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
import pathlib
from typing import Any

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


def _kinked(seed: int, m: int = 4, centre: float = 0.0) -> tuple[Any, Any]:
    """Convex, kinked f(p) = max_k (c_k·(p − z) + b_k) + ½‖p − z‖² (z = centre·1), its gradient."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(6, m))
    b = rng.normal(size=6)
    z = np.full(m, centre)

    def f(p: np.ndarray) -> tuple[float, np.ndarray]:
        values = C @ (p - z) + b
        k = int(np.argmax(values))
        return float(values[k] + 0.5 * (p - z) @ (p - z)), C[k] + (p - z)

    return f, (C, b)


@pytest.mark.parametrize("seed", range(5))
def test_wolfe_step_meets_both_conditions(seed: int) -> None:
    # Along a ray that stays in p ≥ 0 (d ≥ 0), f is convex and grows without bound, so a
    # descent direction has points meeting both weak Wolfe conditions and the bracketing
    # finds one: f(q) ≤ f(p) + c1 ∇f·s and ∇f(q)·s ≥ c ∇f·s (s = q − p), checked with f itself.
    f, _ = _kinked(seed, centre=3.0)
    rng = np.random.default_rng(100 + seed)
    p = rng.uniform(0.0, 1.0, 4)
    f_p, g_p = f(p)
    d = np.maximum(-g_p, 0.0)
    assert float(g_p @ d) < 0  # near 0, far below the centre: some price wants to rise
    found = bfgs._wolfe(f, p, f_p, g_p, d, 100, 0.1)
    assert found is not None
    q, f_q, g_q, used = found
    assert 1 <= used <= bfgs.WOLFE_TRIALS
    np.testing.assert_array_equal(q, np.maximum(q, 0.0))
    s = q - p
    assert f(q)[0] == f_q
    assert f_q <= f_p + bfgs.ARMIJO * float(g_p @ s)
    assert float(g_q @ s) >= 0.1 * float(g_p @ s)


@pytest.mark.parametrize("seed", range(5))
def test_wolfe_bfgs_descends_and_stays_feasible_on_kinked_functions(seed: int) -> None:
    import cvxpy as cp

    f, (C, b) = _kinked(seed)
    state = bfgs.State(np.ones(4))
    start = f(state.p)[0]
    bfgs.minimize_nonneg(f, state, 200, curvature=0.1)
    x = cp.Variable(4, nonneg=True)
    optimum = cp.Problem(cp.Minimize(cp.max(C @ x + b) + 0.5 * cp.sum_squares(x))).solve(
        solver="CLARABEL"
    )
    assert (state.p >= 0).all()
    value = f(state.p)[0]
    # Every accepted step satisfies Armijo, so f never rises; a feasible point cannot beat the
    # optimum (up to Clarabel's 1e-8 accuracy).
    assert value <= start
    assert value >= optimum - 1e-7


@pytest.mark.parametrize("kind", ["target", "linear"])
def test_kinked_start_prices_without_scipy(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    # Above the sampled-start size a kinked utility's start prices come from the Wolfe BFGS on
    # one sample, never from scipy's L-BFGS-B; the full problem's certificate still decides.
    calls: list[int] = []
    real = solver._minimize

    def counted() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(solver, "_minimize", counted)
    sample_calls: list[float | None] = []
    real_min = bfgs.minimize_nonneg

    def spy(fun: Any, state: bfgs.State, max_evals: int, *, curvature: float | None = None) -> None:
        sample_calls.append(curvature)
        real_min(fun, state, max_evals, curvature=curvature)

    monkeypatch.setattr(bfgs, "minimize_nonneg", spy)
    monkeypatch.setattr(solver, "_optimize_loaded", lambda: False)  # a fresh process
    n = solver.COARSE_MIN_JOBS
    problem = paper_problem(n, seed=2, utility=kind)
    result = pricing.solve(problem)
    assert sample_calls == [solver.WOLFE_CURVATURE]
    assert result.converged and result.gap <= 1e-3 * n
    # scipy is needed only when the first full evaluation does not certify.
    assert len(calls) == (0 if result.iterations == 1 else 1)
    assert_feasible(problem, result.allocation)
    t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
    assert utility(problem, t) == pytest.approx(result.utility, rel=1e-12)


def test_kinked_start_prices_use_lbfgsb_once_scipy_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With scipy.optimize already imported, the sample is solved by L-BFGS-B (no Wolfe BFGS);
    # either way the full problem's own certificate decides.
    import scipy.optimize  # noqa: F401  (the state this test is about)

    def no_bfgs(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the Wolfe BFGS ran although scipy.optimize is imported")

    monkeypatch.setattr(bfgs, "minimize_nonneg", no_bfgs)
    n = solver.COARSE_MIN_JOBS
    problem = paper_problem(n, seed=2, utility="target")
    result = pricing.solve(problem)
    assert result.timings["coarse_iterations"] >= 1
    assert result.converged and result.gap <= 1e-3 * n
    assert_feasible(problem, result.allocation)
    t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
    assert utility(problem, t) == pytest.approx(result.utility, rel=1e-12)


D5_ROUNDS = (
    pathlib.Path(__file__).parents[1] / "data" / "gavel" / "d5_price_discovery_warm_rounds.npz"
)
_D5_FIELDS = ("throughput", "demand", "weight", "capacity")


@pytest.mark.parametrize("tag", ["a", "b", "c", "d"])
def test_warm_started_rounds_of_d5_are_certified(tag: str) -> None:
    # Rounds of a price-discovery simulation of Gavel's D5 trace, each with the prices the round
    # before handed it. Gavel's table gives many jobs the same throughput row, so near p* whole
    # groups of identical jobs flip between types and the scaled and averaged responses stall at
    # 1-2 eps from the dual bound (these four ran to max_iter = 100 that way). The polish of the
    # elastic jobs must close the gap: a certificate within the iteration cap, an allocation
    # that is feasible and worth what it claims, and cvxpy's optimum between the two bounds.
    with np.load(D5_ROUNDS) as data:
        arrays = {name: data[f"{tag}_{name}"] for name in _D5_FIELDS}
        warm = data[f"{tag}_warm_prices"]
    problem = pricing.PricingProblem(kind="log", **arrays)
    result = pricing.solve(problem, warm_prices=warm, eps=1e-3, max_iter=100, strict=False)
    assert result.converged and result.iterations < 100
    assert result.gap <= 1e-3 * problem.n
    assert_feasible(problem, result.allocation)
    t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
    assert utility(problem, t) == pytest.approx(result.utility, rel=1e-9, abs=1e-9)
    optimum = cvxpy_optimum(problem)
    tol = 1e-6 * max(1.0, abs(optimum))  # Clarabel's relative accuracy
    assert result.utility <= optimum + tol
    assert result.dual_bound >= optimum - tol
    assert result.utility >= optimum - 1e-3 * problem.n - tol

"""Price discovery against certificates and independent oracles.

The oracles are listed in docs/algorithms.md#price-discovery.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pricing_helpers import (
    assert_feasible,
    brute_force_job,
    cvxpy_optimum,
    random_problem,
    utility,
)

from walras.allocator import pricing
from walras.allocator.pricing import solver, subproblem
from walras.allocator.pricing.backend import get_backend
from walras.allocator.pricing.instances import paper_problem
from walras.allocator.pricing.utilities import UTILITIES, Params

KINDS = ["linear", "log", "alpha", "target"]


@pytest.mark.parametrize("kind", KINDS)
def test_weak_duality_at_every_iterate_and_final_feasibility(kind: str) -> None:
    problem = random_problem(np.random.default_rng(1), 1200, 4, kind, zeros=0.2)
    result = pricing.solve(problem)
    assert len(result.history) == result.iterations >= 1
    for dual, primal in result.history:
        assert primal <= dual + 1e-9 * max(1.0, abs(dual))
    assert result.dual_bound == min(d for d, _ in result.history)
    assert result.utility == max(p for _, p in result.history)
    assert result.gap == pytest.approx(result.dual_bound - result.utility)
    assert result.converged and result.gap <= 1e-3 * problem.n
    assert_feasible(problem, result.allocation)
    # The reported utility and throughput belong to the returned allocation.
    t = (np.asarray(problem.throughput) * result.allocation).sum(axis=1)
    np.testing.assert_allclose(result.throughput, t, atol=1e-12)
    assert utility(problem, t) == pytest.approx(result.utility, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("kind", ["log", "alpha"])
def test_complementary_slackness(kind: str) -> None:
    problem = random_problem(np.random.default_rng(2), 500, 3, kind)
    result = pricing.solve(problem, eps=1e-6, max_iter=300)
    use = result.allocation.sum(axis=0)
    R = np.asarray(problem.capacity)
    # p_j > 0 ⇒ type j is saturated; an unsaturated type is free.
    for j in range(problem.m):
        if result.prices[j] > 1e-3 * result.prices.max():
            assert use[j] >= R[j] * (1 - 1e-2)
        if use[j] < R[j] * (1 - 1e-2):
            assert result.prices[j] <= 1e-3 * result.prices.max()


CVX_CASES = [(kind, m) for kind in KINDS for m in (1, 2, 4, 8)]


@pytest.mark.parametrize(("kind", "m"), CVX_CASES)
def test_agrees_with_cvxpy(kind: str, m: int) -> None:
    rng = np.random.default_rng(100 + m)
    # The primal recovery loses O(m) jobs' worth of utility (jobs split at p*), so ε-accuracy in
    # average utility needs n of a few hundred per type.
    n = min(2000, 400 * m)
    problem = random_problem(rng, n, m, kind, zeros=0.1, alpha=0.5 if m % 2 else 2.0)
    eps = 1e-3
    result = pricing.solve(problem, eps=eps)
    assert result.converged
    best = cvxpy_optimum(problem)
    # Our allocation is feasible, so it cannot beat the optimum (up to Clarabel's accuracy);
    # and it is within ε of it in average utility.
    assert result.utility <= best + 1e-6 * max(1.0, abs(best))
    assert (best - result.utility) / n <= eps
    assert result.dual_bound >= best - 1e-6 * max(1.0, abs(best))


@pytest.mark.slow
def test_agrees_with_cvxpy_n2000() -> None:
    problem = random_problem(np.random.default_rng(7), 2000, 4, "log", zeros=0.1)
    result = pricing.solve(problem)
    best = cvxpy_optimum(problem)
    assert abs(best - result.utility) / problem.n <= 1e-3


def test_mixed_kinds_and_per_type_demand_agree_with_cvxpy() -> None:
    rng = np.random.default_rng(5)
    n = 800
    kinds = [KINDS[i % 4] for i in range(n)]
    problem = random_problem(rng, n, 3, kinds, per_type_demand=True, zeros=0.2)
    result = pricing.solve(problem)
    assert result.converged
    assert_feasible(problem, result.allocation)
    best = cvxpy_optimum(problem)
    assert result.utility <= best + 1e-6 * abs(best)
    assert (best - result.utility) / n <= 1e-3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [1, 2, 3])
def test_per_job_optimality_by_brute_force(kind: str, m: int) -> None:
    """At the final prices no job can do better on a fine grid of allocations."""
    rng = np.random.default_rng(20 + m)
    problem = random_problem(rng, 60, m, kind, per_type_demand=True, zeros=0.2)
    result = pricing.solve(problem)
    X = pricing.best_response(problem, result.prices)
    A = np.asarray(problem.throughput)
    D = problem.demand_matrix()
    w, tgt, al = problem.weight, problem.target, problem.alpha
    for i in range(0, problem.n, 6):
        pi = D[i] * result.prices

        def u(t: np.ndarray, i: int = i) -> np.ndarray:
            return utility_one(kind, t, w[i], tgt[i], al[i])

        ours = float(u(np.array([A[i] @ X[i]]))[0] - pi @ X[i])
        grid = brute_force_job(A[i], pi, u, steps=200 if m < 3 else 40)
        assert ours >= grid - 1e-9
        assert X[i].min() >= 0 and X[i].sum() <= 1 + 1e-12
        assert (X[i] > 1e-12).sum() <= 2


def utility_one(kind: str, t: np.ndarray, w: float, tgt: float, al: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        if kind == "linear":
            return w * t
        if kind == "log":
            return w * np.log(t)
        if kind == "alpha":
            return w * np.power(t, 1 - al) / (1 - al)
        return w * np.minimum(t - tgt, 0.0)


def test_paper_figure_example() -> None:
    """Paper Fig. 1–3 data (u = 4 log t): the hull is (0,0)→(2,1)→(5,6), t* = 2.4."""
    b = get_backend("numpy")
    par = Params(np.array([4.0]), np.zeros(1), np.full(1, 2.0))
    A = np.array([[1.0, 2.0, 3.0, 5.0]])
    g = subproblem.prepare(b, UTILITIES["log"], 0, A, np.ones(1), par)
    res = subproblem.respond(b, g, np.array([1.0, 1.0, 4.0, 6.0]), 0, 1)
    assert res.t[0] == pytest.approx(2.4)
    assert {int(res.type_lo[0]), int(res.type_hi[0])} == {1, 3}
    assert res.x_lo[0] == pytest.approx(13 / 15)
    assert res.x_hi[0] == pytest.approx(2 / 15)


def test_ties_and_duplicate_types() -> None:
    """Identical GPU types (equal throughput) and equal prices: still optimal and feasible."""
    rng = np.random.default_rng(9)
    n = 200
    a = rng.uniform(0.1, 1.0, n)
    A = np.stack([a, a, a * rng.uniform(0.3, 0.7, n), np.zeros(n)], axis=1)
    problem = pricing.PricingProblem(A, [30.0, 30.0, 50.0, 10.0], kind="log")
    result = pricing.solve(problem)
    assert result.converged
    assert_feasible(problem, result.allocation)
    assert result.allocation[:, 3].max() == 0.0  # nobody can use type 3
    assert abs(cvxpy_optimum(problem) - result.utility) / n <= 1e-3


def test_single_job_and_single_type() -> None:
    one = pricing.PricingProblem([[0.5, 2.0]], [1.0, 1.0], demand=[1.0], kind="log")
    r = pricing.solve(one)
    assert_feasible(one, r.allocation)
    # Alone, the job runs all the time on its faster type.
    np.testing.assert_allclose(r.allocation, [[0.0, 1.0]], atol=1e-3)
    half = pricing.PricingProblem([[0.5, 2.0]], [1.0, 0.5], demand=[0.5], kind="log")
    np.testing.assert_allclose(pricing.solve(half).allocation, [[0.0, 1.0]], atol=1e-3)
    m1 = pricing.PricingProblem(np.linspace(0.1, 1.0, 50)[:, None], [10.0], kind="log")
    r1 = pricing.solve(m1)
    assert_feasible(m1, r1.allocation)
    assert r1.allocation.sum() == pytest.approx(10.0, rel=1e-6)
    assert abs(cvxpy_optimum(m1) - r1.utility) / 50 <= 1e-3


def test_warm_start_from_optimal_prices_converges_at_once() -> None:
    problem = random_problem(np.random.default_rng(3), 300, 4, "log")
    cold = pricing.solve(problem, eps=1e-4)
    warm = pricing.solve(problem, eps=1e-4, warm_prices=cold.prices)
    assert warm.iterations <= 2
    assert warm.utility == pytest.approx(cold.utility, abs=1e-4 * problem.n)


def test_result_is_immutable() -> None:
    problem = random_problem(np.random.default_rng(4), 50, 2, "log")
    result = pricing.solve(problem)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.gap = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        result.allocation[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        result.prices[0] = 1.0
    assert set(result.timings) >= {"setup", "subproblems", "recovery", "total"}


def test_max_iter_reports_not_converged() -> None:
    problem = random_problem(np.random.default_rng(6), 300, 4, "target")
    result = pricing.solve(problem, eps=1e-9, max_iter=3)
    assert result.iterations == 3
    assert not result.converged
    assert_feasible(problem, result.allocation)
    assert result.utility <= result.dual_bound


def test_subgradient_fallback_keeps_bounds_valid() -> None:
    """Tiny ε forces L-BFGS-B to stop on a kinked dual; the fallback must keep going safely."""
    problem = random_problem(np.random.default_rng(8), 200, 3, "linear")
    result = pricing.solve(problem, eps=1e-12, max_iter=60)
    for dual, primal in result.history:
        assert primal <= dual + 1e-9 * max(1.0, abs(dual))
    assert_feasible(problem, result.allocation)


def _best_on_simplex_edges(a: np.ndarray, pi: np.ndarray, u: object) -> float:
    """max u(a^T x) − π^T x over x ≥ 0, 1^T x ≤ 1, independently of the hull walk.

    Fixing t = a^T x leaves a linear program whose basic solutions have at most two nonzeros
    among x and the idle time, so the optimum lies on an edge of the simplex (two types, or
    one type and idle time); each edge is a 1-D concave problem, solved by bounded Brent.
    """
    from scipy.optimize import minimize_scalar

    m = len(a)
    best = -np.inf
    for i in range(-1, m):
        for j in range(i + 1, m):
            lo_a, lo_p = (0.0, 0.0) if i < 0 else (a[i], pi[i])

            def neg(s: float, lo_a: float = lo_a, lo_p: float = lo_p, j: int = j) -> float:
                t = (1 - s) * lo_a + s * a[j]
                return -(float(u(np.array([t]))[0]) - (1 - s) * lo_p - s * pi[j])

            res = minimize_scalar(
                neg, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-12}
            )
            best = max(best, -res.fun, -neg(0.0), -neg(1.0))
    return best


@pytest.mark.parametrize("kind", ["log", "alpha"])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("per_type_demand", [False, True])
def test_smooth_responses_without_ties_are_optimal(
    kind: str, m: int, per_type_demand: bool
) -> None:
    """Smooth utilities and distinct throughputs take the edge found from the vertices alone
    (``subproblem._edge_by_derivative``): each response is optimal on the whole simplex."""
    rng = np.random.default_rng(40 + m)
    problem = random_problem(rng, 80, m, kind, per_type_demand=per_type_demand, alpha=0.5)
    A = np.asarray(problem.throughput)
    assert all(len(set(row)) == m for row in A.tolist())  # no ties: that path is taken
    prices = rng.uniform(0.0, 3.0, m)
    X = pricing.best_response(problem, prices)
    D = problem.demand_matrix()
    w, tgt, al = problem.weight, problem.target, problem.alpha
    for i in range(problem.n):
        pi = D[i] * prices

        def u(t: np.ndarray, i: int = i) -> np.ndarray:
            return utility_one(kind, t, w[i], tgt[i], al[i])

        ours = float(u(np.array([A[i] @ X[i]]))[0] - pi @ X[i])
        # Brent's xatol 1e-12 on a share puts the oracle within ~1e-12 of each edge's maximum.
        assert ours == pytest.approx(_best_on_simplex_edges(A[i], pi, u), abs=1e-9)
        assert X[i].min() >= 0 and X[i].sum() <= 1 + 1e-12
        assert (X[i] > 0).sum() <= 2


@pytest.mark.parametrize(
    ("n", "kinds"),
    [
        (600, "mixed"),  # one chunk: the same ties, the same path, the same numbers
        (solver.COARSE_MIN_JOBS, "log"),  # sampled start and the polish's re-sorted subsets
    ],
)
def test_sorting_per_evaluation_changes_nothing(
    n: int, kinds: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lazy group (each evaluation sorts its chunks) solves exactly like a sorted one."""
    if kinds == "mixed":
        rng = np.random.default_rng(31)
        problem = random_problem(
            rng, n, 4, [KINDS[i % 4] for i in range(n)], per_type_demand=True, zeros=0.2
        )
    else:
        problem = paper_problem(n, seed=5, utility=kinds)
    monkeypatch.setattr(solver, "SORT_PER_EVALUATION_MIN_JOBS", 10**12)
    eager = pricing.solve(problem)
    monkeypatch.setattr(solver, "SORT_PER_EVALUATION_MIN_JOBS", 1)
    lazy = pricing.solve(problem)
    assert lazy.iterations == eager.iterations
    assert lazy.timings["polish_steps"] == eager.timings["polish_steps"]
    np.testing.assert_array_equal(lazy.prices, eager.prices)
    np.testing.assert_array_equal(lazy.allocation, eager.allocation)
    np.testing.assert_array_equal(lazy.throughput, eager.throughput)
    assert (lazy.utility, lazy.dual_bound) == (eager.utility, eager.dual_bound)

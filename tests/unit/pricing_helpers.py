"""Shared oracles for the price-discovery tests: feasibility, cvxpy optimum, brute force."""

from __future__ import annotations

from typing import Any

import numpy as np

from walras.allocator import pricing


def random_problem(
    rng: np.random.Generator,
    n: int,
    m: int,
    kind: str | list[str] = "log",
    *,
    per_type_demand: bool = False,
    zeros: float = 0.0,
    alpha: float = 2.0,
) -> pricing.PricingProblem:
    """Throughputs U(0.05, 1) (a fraction ``zeros`` set to 0, never a whole row), scarce R."""
    A = rng.uniform(0.05, 1.0, size=(n, m))
    if zeros:
        A[rng.random((n, m)) < zeros] = 0.0
        A[np.arange(n), rng.integers(0, m, n)] = rng.uniform(0.05, 1.0, n)
    D = rng.integers(1, 4, size=(n, m)).astype(float) if per_type_demand else None
    R = rng.uniform(0.1, 0.5, size=m) * n / m * (2.0 if per_type_demand else 1.0)
    return pricing.PricingProblem(
        throughput=A,
        capacity=R,
        demand=D,
        kind=kind,
        weight=rng.uniform(0.5, 2.0, n),
        target=rng.uniform(0.1, 0.6, n),
        alpha=alpha,
    )


def utility(problem: pricing.PricingProblem, t: np.ndarray[Any, Any]) -> float:
    """Σ u_i(t_i), written independently of the solver's utilities module."""
    w = np.asarray(problem.weight)
    tgt = np.asarray(problem.target)
    al = np.asarray(problem.alpha)
    kinds = np.array(problem.kinds())
    with np.errstate(divide="ignore"):
        u = np.select(
            [kinds == "linear", kinds == "log", kinds == "alpha", kinds == "target"],
            [
                w * t,
                w * np.log(t),
                w * np.power(t, 1 - al) / (1 - al),
                w * np.minimum(t - tgt, 0.0),
            ],
        )
    return float(u.sum())


def assert_feasible(problem: pricing.PricingProblem, X: np.ndarray[Any, Any]) -> None:
    """X ≥ 0, row sums ≤ 1, Σ_i d_i x_i ≤ R (1e-6 relative)."""
    assert X.shape == (problem.n, problem.m)
    assert np.all(np.isfinite(X))
    assert X.min() >= 0.0
    assert X.sum(axis=1).max() <= 1.0 + 1e-9
    use = (problem.demand_matrix() * X).sum(axis=0)
    assert np.all(use <= np.asarray(problem.capacity) * (1 + 1e-6) + 1e-12)


def cvxpy_optimum(problem: pricing.PricingProblem) -> float:
    """The optimal total utility by cvxpy + Clarabel (the independent oracle)."""
    import cvxpy as cp

    n, m = problem.n, problem.m
    A = np.asarray(problem.throughput)
    X = cp.Variable((n, m), nonneg=True)
    t = cp.sum(cp.multiply(A, X), axis=1)
    w = np.asarray(problem.weight)
    tgt = np.asarray(problem.target)
    kinds = np.array(problem.kinds())
    terms = []
    for kind in ("linear", "log", "alpha", "target"):
        idx = np.flatnonzero(kinds == kind)
        if len(idx) == 0:
            continue
        ti, wi = t[idx], w[idx]
        if kind == "linear":
            terms.append(wi @ ti)
        elif kind == "log":
            terms.append(wi @ cp.log(ti))
        elif kind == "alpha":
            beta = float(np.asarray(problem.alpha)[idx[0]])
            terms.append(wi @ cp.power(ti, 1 - beta, approx=False) / (1 - beta))
        else:
            terms.append(wi @ cp.minimum(ti - tgt[idx], 0.0))
    cons = [
        cp.sum(X, axis=1) <= 1,
        cp.sum(cp.multiply(problem.demand_matrix(), X), axis=0) <= np.asarray(problem.capacity),
    ]
    prob = cp.Problem(cp.Maximize(sum(terms)), cons)
    prob.solve(solver="CLARABEL")
    assert prob.status == "optimal", prob.status
    return float(prob.value)


def brute_force_job(
    a: np.ndarray[Any, Any],
    pi: np.ndarray[Any, Any],
    u: Any,
    steps: int = 200,
) -> float:
    """max u(a^T x) − π^T x over a grid of x ≥ 0, 1^T x ≤ 1 (m ≤ 3)."""
    m = len(a)
    grid = np.linspace(0.0, 1.0, steps + 1)
    mesh = np.stack(np.meshgrid(*([grid] * m), indexing="ij"), axis=-1).reshape(-1, m)
    mesh = mesh[mesh.sum(axis=1) <= 1.0 + 1e-12]
    with np.errstate(divide="ignore"):
        vals = u(mesh @ a) - mesh @ pi
    return float(vals.max())

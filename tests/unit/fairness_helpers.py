"""Shared helpers for the PS-DSF tests: random instances and independent oracles.

The oracles never call the code under test: a cvxpy Eisenberg–Gale model (TDM), and linear
programs (scipy HiGHS) that look for a Pareto improvement of a given allocation.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import scipy.optimize as opt

from walras.allocator.fairness import FairnessProblem, monopoly_tasks

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPER_EXAMPLE = ROOT / "examples" / "fairshare-paper.json"


def paper_problem() -> FairnessProblem:
    data = json.loads(PAPER_EXAMPLE.read_text())
    return FairnessProblem(
        capacity=np.array(data["capacity"]),
        demand=np.array(data["demand"]),
        weight=np.array(data["weight"]),
        eligible=np.array(data["eligible"]),
        tenant_names=data["tenant_names"],
        node_names=data["node_names"],
        resource_names=data["resource_names"],
    )


def random_problem(
    seed: int,
    K: int,
    N: int,
    M: int = 3,
    *,
    p_eligible: float = 0.6,
    weights: bool = True,
    caps: bool = False,
    sparse_demand: bool = True,
) -> FairnessProblem:
    """Random heterogeneous instance; every tenant is eligible on at least one node."""
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(4.0, 64.0, size=(K, M))
    demand = rng.uniform(0.2, 4.0, size=(N, M))
    if sparse_demand and M > 1:
        # Some tenants do not use some resources (as with CPU-only or GPU tenants).
        off = rng.random((N, M)) < 0.25
        off[np.arange(N), rng.integers(0, M, N)] = False
        demand[off] = 0.0
    eligible = rng.random((N, K)) < p_eligible
    eligible[np.arange(N), rng.integers(0, K, N)] = True
    weight = rng.choice([1.0, 2.0, 3.0], size=N) if weights else np.ones(N)
    cap = None
    if caps:
        gamma = np.where(eligible, 1.0, 0.0) * _fit(capacity, demand)
        cap = np.where(rng.random(N) < 0.4, rng.uniform(0.05, 0.5, N) * gamma.sum(1), np.inf)
    return FairnessProblem(
        capacity=capacity, demand=demand, weight=weight, eligible=eligible, cap=cap
    )


def _fit(capacity: np.ndarray, demand: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        ratio = np.where(demand[:, None, :] > 0, capacity[None, :, :] / demand[:, None, :], np.inf)
    return ratio.min(axis=2)


def eisenberg_gale_totals(problem: FairnessProblem) -> np.ndarray:
    """Tenant totals of ``max Σ φ log x`` over the TDM polytope, by cvxpy + Clarabel."""
    import cvxpy as cp

    gamma = np.asarray(monopoly_tasks(problem))
    N, K, _ = problem.shape
    y = cp.Variable((N, K), nonneg=True)
    x = cp.sum(cp.multiply(gamma, y), axis=1)
    cons = (
        [cp.sum(y, axis=0) <= 1, y[gamma <= 0] == 0]
        if (gamma <= 0).any()
        else [cp.sum(y, axis=0) <= 1]
    )
    finite = np.isfinite(problem.caps)
    if finite.any():
        cons.append(x[np.flatnonzero(finite)] <= problem.caps[finite])
    objective = cp.Maximize(cp.sum(cp.multiply(problem.phi, cp.log(x))))
    cp.Problem(objective, cons).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10
    )
    return np.asarray(gamma * y.value).sum(axis=1)


def pareto_gain(problem: FairnessProblem, tasks: np.ndarray, mode: str) -> float:
    """Largest total gain of a feasible allocation that gives every tenant at least its tasks.

    LP over ``x' ≥ 0`` on eligible pairs: ``Σ_i x'_{n,i} ≥ x_n`` for all n, feasibility of
    ``mode`` and caps; maximise ``Σ x' − Σ x``. Zero means ``tasks`` is Pareto optimal.
    """
    gamma = np.asarray(monopoly_tasks(problem))
    N, K, M = problem.shape
    n_of, i_of = np.nonzero(gamma > 0)
    P = len(n_of)
    A, b = [], []
    if mode == "tdm":
        for i in range(K):
            row = np.zeros(P)
            sel = i_of == i
            row[sel] = 1.0 / gamma[n_of[sel], i]
            A.append(row)
            b.append(1.0)
    else:
        for i in range(K):
            for r in range(M):
                row = np.zeros(P)
                sel = i_of == i
                row[sel] = problem.demand[n_of[sel], r]
                A.append(row)
                b.append(problem.capacity[i, r])
    totals = tasks.sum(axis=1)
    for n in range(N):
        row = np.zeros(P)
        row[n_of == n] = -1.0
        A.append(row)
        b.append(-totals[n] * (1 - 1e-9))
        if np.isfinite(problem.caps[n]):
            A.append(-row)
            b.append(problem.caps[n])
    res = opt.linprog(
        -np.ones(P), A_ub=np.array(A), b_ub=np.array(b), bounds=(0, None), method="highs"
    )
    assert res.status == 0, res.message
    return float(-res.fun - totals.sum())

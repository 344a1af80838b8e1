"""The central path's linear algebra and its warm start (``walras.allocator.gavel.center``).

Oracles: the barrier's Hessian assembled densely from its definition (``Aᵀ diag(1/s²) A`` over
every inequality) and solved with ``numpy.linalg.solve``; cvxpy (CLARABEL) for the max-min
optimum; hand-derived unique optima.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np
import pytest

from walras.allocator.gavel import GavelInputs, center
from walras.allocator.gavel.max_min_fairness import MaxMinFairness, coefficients

OBJ_RTOL = 1e-5  # the path stops at a relative gap of center.GAP_REL = 1e-6; CLARABEL ~1e-8


def dense_hessian(x: np.ndarray, C: np.ndarray, lower: np.ndarray, k: np.ndarray, cap: np.ndarray):
    """``∇²Φ`` for ``Φ = −Σ log(slack)``, slack = ``A·vec(x) + b``: ``Aᵀ diag(1/slack²) A``."""
    J, T = x.shape
    n = J * T
    rows: list[np.ndarray] = []
    slack: list[float] = []
    for i in range(n):  # x[j, t] ≥ 0
        a = np.zeros(n)
        a[i] = 1.0
        rows.append(a)
        slack.append(x.flat[i])
    for j in range(J):  # 1 − Σ_t x[j, t] ≥ 0
        a = np.zeros(n)
        a[j * T : (j + 1) * T] = -1.0
        rows.append(a)
        slack.append(1.0 - x[j].sum())
    for t in range(T):  # cap[t] − Σ_j k[j] x[j, t] ≥ 0
        a = np.zeros(n)
        a[t::T] = -k
        rows.append(a)
        slack.append(cap[t] - k @ x[:, t])
    for j in range(J):  # Σ_t C[j, t] x[j, t] − lower[j] ≥ 0
        a = np.zeros(n)
        a[j * T : (j + 1) * T] = C[j]
        rows.append(a)
        slack.append(C[j] @ x[j] - lower[j])
    A, s = np.array(rows), np.array(slack)
    assert s.min() > 0.0
    return A.T @ (A / s[:, None] ** 2)


@pytest.mark.parametrize("seed", range(6))
def test_hessian_solver_matches_dense_solve(seed: int) -> None:
    rng = np.random.default_rng(seed)
    J, T = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    C = rng.uniform(0.1, 3.0, (J, T))
    k = rng.choice(np.array([1.0, 2.0, 4.0]), J)
    x = rng.uniform(0.01, 1.0 / (T + 1), (J, T))
    cap = k @ x + rng.uniform(0.01, 2.0, T)
    # Thin throughput slacks (1e-3 of the value) as near the end of the path.
    lower = (C * x).sum(axis=1) * (1.0 - rng.choice(np.array([1e-3, 0.5]), J))
    prob = center._Problem(C, lower, k, cap)
    r = rng.standard_normal((J, T))
    got = center._hessian_solver(prob, x)(r)
    want = np.linalg.solve(dense_hessian(x, C, lower, k, cap), r.ravel()).reshape(J, T)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12 * np.abs(want).max())


def cvxpy_value(coef: np.ndarray, k: np.ndarray, cap: np.ndarray) -> float:
    x = cp.Variable(coef.shape)
    kk = np.tile(k[:, None], (1, coef.shape[1])).astype(float)
    prob = cp.Problem(
        cp.Maximize(cp.min(cp.sum(cp.multiply(coef, x), axis=1))),
        [x >= 0, cp.sum(cp.multiply(kk, x), axis=0) <= cap, cp.sum(x, axis=1) <= 1],
    )
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return float(prob.value)


class PathSpy:
    """Records whether each ``central_path`` call started warm (``start_level`` given)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.warm: list[bool] = []
        real = center.central_path

        def spy(*args: Any, **kwargs: Any) -> center.PathEnd:
            self.warm.append(kwargs.get("start_level") is not None)
            return real(*args, **kwargs)

        monkeypatch.setattr(center, "central_path", spy)


def inputs(thr: np.ndarray, k: np.ndarray, cap: np.ndarray, ids: np.ndarray) -> GavelInputs:
    return GavelInputs(throughputs=thr, scale_factors=k, capacity=cap, job_ids=ids)


@pytest.mark.parametrize("seed", range(8))
def test_warm_start_after_jobs_leave_reaches_the_optimum(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    J, T = 14, 3
    thr = rng.uniform(0.5, 10.0, (J, T))
    k = rng.choice(np.array([1, 2, 4]), J)
    cap = rng.integers(2, 9, T).astype(float)
    ids = np.arange(J) * 7 + 3
    spy = PathSpy(monkeypatch)
    policy = MaxMinFairness(aware=True)
    keep = np.arange(J)
    for _ in range(4):  # each call drops a few jobs, as completions do between Gavel's solves
        inp = inputs(thr[keep], k[keep], cap, ids[keep])
        x = policy.allocate(inp)
        coef = coefficients(inp, inp.throughputs)
        value = float((coef * x).sum(axis=1).min())
        assert value == pytest.approx(cvxpy_value(coef, inp.scale_factors, cap), rel=OBJ_RTOL)
        assert x.min() > 0.0  # central: strictly inside every x ≥ 0
        keep = np.sort(rng.choice(keep, size=keep.size - int(rng.integers(1, 4)), replace=False))
    assert spy.warm == [False, True, True, True]


def test_warm_start_unique_optimum_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # One type, 2 GPUs, jobs of 1, 1 and 2 GPUs (max_min_fairness docstring): s* = 2/3 and
    # x = (2/3, 2/3, 1/3) is the only optimum. Solved after a fourth job has left, warm.
    spy = PathSpy(monkeypatch)
    policy = MaxMinFairness(aware=True)
    policy.allocate(
        inputs(np.array([[5.0], [1.0], [7.0], [3.0]]), np.array([1, 1, 2, 1]), np.array([2.0]),
               np.arange(4))
    )  # fmt: skip
    x = policy.allocate(
        inputs(np.array([[5.0], [1.0], [7.0]]), np.array([1, 1, 2]), np.array([2.0]), np.arange(3))
    )
    assert spy.warm == [False, True]
    np.testing.assert_allclose(x[:, 0], [2 / 3, 2 / 3, 1 / 3], atol=1e-5)


@pytest.mark.parametrize("change", ["new job", "capacity", "throughput", "warm off"])
def test_cold_start_when_the_checkpoint_does_not_apply(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    thr = np.array([[4.0, 1.0], [1.0, 2.0], [3.0, 3.0]])
    k, cap, ids = np.array([1, 2, 1]), np.array([2.0, 2.0]), np.array([10, 11, 12])
    spy = PathSpy(monkeypatch)
    policy = MaxMinFairness(aware=True, warm=change != "warm off")
    policy.allocate(inputs(thr[:2], k[:2], cap, ids[:2]))
    second = {
        "new job": inputs(thr, k, cap, ids),
        "capacity": inputs(thr[:2], k[:2], cap + 1.0, ids[:2]),
        # (scaling all of a job's throughputs would leave its normalised row as it was)
        "throughput": inputs(thr[:2] * np.array([[1.5, 1.0]]), k[:2], cap, ids[:2]),
        "warm off": inputs(thr[:1], k[:1], cap, ids[:1]),
    }[change]
    x = policy.allocate(second)
    assert spy.warm == [False, False]
    coef = coefficients(second, second.throughputs)
    value = float((coef * x).sum(axis=1).min())
    assert value == pytest.approx(
        cvxpy_value(coef, second.scale_factors, second.capacity), rel=OBJ_RTOL
    )

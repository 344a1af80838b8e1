"""``walras.allocator.highs.solve`` gives ``linprog(method="highs")``'s answer to the last bit.

Oracle: the same LP through ``scipy.optimize.linprog`` (the path :func:`highs.solve` falls back
to, and the one the horizon used before). HiGHS is deterministic, and the direct path passes it
the very model and options linprog does, so the solutions must be equal, not merely close.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from walras.allocator import highs
from walras.allocator.gavel import lp
from walras.allocator.hadar.horizon import fluid_makespan


def _linprog_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if scipy's HiGHS binding were missing: every solve goes through linprog."""
    monkeypatch.setattr(highs, "_CORE", None)
    monkeypatch.setattr(highs, "_CORE_LOADED", True)


def _random_horizon(seed: int) -> tuple[tuple[object, ...], dict[str, object]]:
    """A fluid makespan problem of the horizon's shape: up to 60 jobs, 1–3 types, some types
    unusable, some jobs running, parallel (forked) jobs and their copies rows on some seeds."""
    rng = np.random.default_rng(seed)
    n, T = int(rng.integers(1, 60)), int(rng.integers(1, 4))
    thr = rng.uniform(0.1, 3.0, (n, T)) * (rng.random((n, T)) < 0.8)
    thr[:, 0] = np.where(thr.max(axis=1) == 0, 1.0, thr[:, 0])
    replicas = rng.choice([1, 2, 4, 8], n).astype(np.int64)
    remaining = rng.uniform(100.0, 1e5, n)
    cap = rng.choice([4.0, 8.0, 16.0], T)
    kwargs: dict[str, object] = {
        "running_on": rng.random((n, T)) < 0.2,
        "restart_seconds": 10.0,
        "parallel": rng.random(n) < 0.3 if seed % 2 else None,
        "copies": rng.integers(1, 4, (n, T)).astype(np.float64) if seed % 4 == 1 else None,
    }
    return (thr, replicas, remaining, cap, thr > 0), kwargs


@pytest.mark.parametrize("seed", range(40))
def test_fluid_makespan_equals_linprog_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    args, kwargs = _random_horizon(seed)
    x_direct, t_direct = fluid_makespan(*args, **kwargs)  # type: ignore[arg-type]
    assert highs._CORE is not None, "scipy's HiGHS binding was not found: the test is vacuous"
    _linprog_only(monkeypatch)
    x_linprog, t_linprog = fluid_makespan(*args, **kwargs)  # type: ignore[arg-type]
    assert t_direct == t_linprog
    assert np.array_equal(x_direct, x_linprog)


@pytest.mark.parametrize("seed", range(10))
def test_general_lp_equals_linprog(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``≤`` rows then ``=`` rows, bounded columns: linprog's own call on ``A_ub``, ``A_eq``,
    bit-for-bit, on the direct path and on the fallback."""
    rng = np.random.default_rng(seed)
    m_ub, m_eq, n = 6, 2, 12
    a = rng.uniform(-1.0, 1.0, (m_ub + m_eq, n)) * (rng.random((m_ub + m_eq, n)) < 0.6)
    x0 = rng.uniform(0.0, 1.0, n)  # a feasible point: the rows are built around it
    b = a @ x0 + np.concatenate([np.ones(m_ub), np.zeros(m_eq)])
    lower = np.concatenate([np.full(m_ub, -np.inf), b[m_ub:]])
    cost = rng.uniform(-1.0, 1.0, n)
    csc = sp.csc_matrix(a)
    csc.sort_indices()
    problem = highs.Lp(
        cost,
        csc.indptr.astype(np.int64),
        csc.indices.astype(np.int64),
        csc.data,
        lower,
        b,
        np.zeros(n),
        np.full(n, 2.0),
    )
    ref = linprog(
        cost,
        A_ub=sp.csr_matrix(a[:m_ub]),
        b_ub=b[:m_ub],
        A_eq=sp.csr_matrix(a[m_ub:]),
        b_eq=b[m_ub:],
        bounds=(0.0, 2.0),
        method="highs",
    )
    assert ref.status == 0
    got = highs.solve(problem)
    assert got is not None and np.array_equal(got, ref.x)
    _linprog_only(monkeypatch)
    fallback = highs.solve(problem)
    assert fallback is not None and np.array_equal(fallback, ref.x)


def _one_variable(row: tuple[float, float], column: tuple[float, float]) -> highs.Lp:
    """``min x  s.t.  row[0] ≤ x ≤ row[1],  column[0] ≤ x ≤ column[1]``."""
    return highs.Lp(
        np.array([1.0]),
        np.array([0, 1], dtype=np.int64),
        np.array([0], dtype=np.int64),
        np.array([1.0]),
        np.array([row[0]]),
        np.array([row[1]]),
        np.array([column[0]]),
        np.array([column[1]]),
    )


def test_rows_other_than_le_or_eq_are_refused() -> None:
    with pytest.raises(ValueError, match="≤ row"):
        _one_variable(row=(0.5, 1.0), column=(0.0, 1.0))


@pytest.mark.parametrize("direct", [True, False])
def test_infeasible_is_none(direct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``x = 1`` with ``0 ≤ x ≤ 0.5``: no optimum, ``None`` on both paths."""
    if not direct:
        _linprog_only(monkeypatch)
    problem = _one_variable(row=(1.0, 1.0), column=(0.0, 0.5))
    assert highs.solve(problem) is None


@pytest.mark.parametrize("seed", range(20))
def test_gavel_max_min_equals_linprog(seed: int) -> None:
    """Gavel's max-min LP (``lp.max_min``) against ``linprog`` on the same ``A_ub``, bit-for-bit:
    what min-total-duration, max-min and finish-time fairness solved before."""
    rng = np.random.default_rng(100 + seed)
    J, T = int(rng.integers(1, 80)), int(rng.integers(1, 4))
    k = rng.choice([1, 2, 4, 8], J).astype(np.int64)
    cap = rng.choice([0.0, 4.0, 16.0, 32.0], T)
    coef = rng.uniform(0.0, 2.0, (J, T)) * (rng.random((J, T)) < 0.8)
    active = rng.random(J) < 0.9
    poly = lp.base_polytope(k, cap)
    x, s = lp.max_min(poly, coef, active)
    rows = lp.per_job_rows(coef)[np.flatnonzero(active)]
    m = rows.shape[0]
    if m == 0:
        assert s == np.inf
        return
    a_ub = sp.vstack(
        [
            sp.hstack([-rows, sp.csr_matrix(np.ones((m, 1)))]),
            sp.hstack([poly.rows, sp.csr_matrix((J + T, 1))]),
        ],
        format="csr",
    )
    c = np.zeros(J * T + 1)
    c[-1] = -1.0
    ref = linprog(
        c,
        A_ub=a_ub,
        b_ub=np.concatenate([np.zeros(m), poly.rhs]),
        bounds=[(0.0, None)] * (J * T + 1),
        method="highs",
    )
    assert ref.status == 0
    assert s == ref.x[-1]
    assert np.array_equal(x, ref.x[:-1].reshape(J, T))

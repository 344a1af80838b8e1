"""Sparse linear programs shared by the Gavel policies, solved with scipy's HiGHS.

Every Gavel LP (space sharing off) lives on the same polytope of time fractions ``x[j, t]``
(``Policy.get_base_constraints`` in Gavel)::

    x ≥ 0,    Σ_t x[j, t] ≤ 1  (a job runs on one type at a time),
    Σ_j scale[j] · x[j, t] ≤ capacity[t]  (a gang of scale[j] GPUs holds all of them),

plus one row per job that the policy adds: a lower bound on a weighted throughput
``Σ_t C[j, t] · x[j, t] ≥ lower[j]`` (min-total-duration, finish-time fairness) or ``≥ s``
with ``s`` maximised (max-min fairness). Variables are flattened row-major, ``x[j, t]`` at
``j·T + t``; the constraint matrix has ``J·T`` columns and ``2J + T`` rows with ``3·J·T``
non-zeros, so HiGHS solves 2,048 jobs × 3 types in well under a second.

Called by :mod:`.max_min_fairness`, :mod:`.min_total_duration`, :mod:`.finish_time_fairness`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from walras.allocator import highs
from walras.allocator.gavel.inputs import FloatArray, IntArray

if TYPE_CHECKING:
    import scipy.sparse as sp

# scipy is imported inside the functions that build or solve LPs: importing scipy.optimize costs
# ~0.4 s CPU, a tenth of a whole `walras simulate` run of max-min fairness, which needs none of it
# (its path-following is numpy only, :mod:`.center`).

FEASIBLE = 0
"""``scipy.optimize.linprog``'s status code of an optimum."""


class SolverError(RuntimeError):
    """HiGHS stopped without an optimum or an infeasibility proof (numerical trouble)."""


@dataclass(frozen=True, slots=True)
class Polytope:
    """Gavel's base constraints as ``A_ub @ x ≤ b_ub`` over the flattened ``x`` (``J·T``)."""

    n_jobs: int
    n_types: int
    rows: sp.csr_matrix  # (J + T, J·T): the J row sums, then the T capacity rows
    rhs: FloatArray  # (J + T,)


def base_polytope(scale_factors: IntArray, capacity: FloatArray) -> Polytope:
    """Row-sum and capacity rows of Gavel's ``get_base_constraints`` (``x ≥ 0`` is a bound)."""
    import scipy.sparse as sp

    J, T = scale_factors.shape[0], capacity.shape[0]
    cols = np.arange(J * T)
    job_of_col, type_of_col = np.divmod(cols, T)
    data = np.concatenate([np.ones(J * T), np.repeat(scale_factors.astype(np.float64), T)])
    row = np.concatenate([job_of_col, J + type_of_col])
    rows = sp.csr_matrix((data, (row, np.concatenate([cols, cols]))), shape=(J + T, J * T))
    return Polytope(J, T, rows, np.concatenate([np.ones(J), capacity]))


def per_job_rows(coef: FloatArray) -> sp.csr_matrix:
    """``(J, J·T)`` matrix whose row ``j`` is ``Σ_t coef[j, t] · x[j, t]``."""
    import scipy.sparse as sp

    J, T = coef.shape
    cols = np.arange(J * T)
    return sp.csr_matrix((coef.ravel(), (cols // T, cols)), shape=(J, J * T))


def max_min(
    poly: Polytope, coef: FloatArray, active: npt.NDArray[np.bool_] | None = None
) -> tuple[FloatArray, float]:
    """``max s  s.t.  Σ_t coef[j, t] x[j, t] ≥ s`` for every (``active``) job, ``x`` in ``poly``.

    Returns ``(x, s*)``; ``s*`` is ``inf`` when no job is active.
    """
    x, s, _ = max_min_from(None, poly, coef, active)
    return x, s


def max_min_from(
    start: highs.Basis | None,
    poly: Polytope,
    coef: FloatArray,
    active: npt.NDArray[np.bool_] | None = None,
) -> tuple[FloatArray, float, highs.Basis | None]:
    """:func:`max_min` started from the final basis of an earlier one with the same jobs and
    types (``None``: from scratch, linprog's answer bit-for-bit), and its own final basis.

    Started, HiGHS may end at another optimal ``x`` of the same ``s*`` (the LP is degenerate);
    callers that need one particular optimum (the analytic center) must not depend on which.
    """
    import scipy.sparse as sp

    J, T = poly.n_jobs, poly.n_types
    rows = per_job_rows(coef)
    if active is not None:
        rows = rows[np.flatnonzero(active)]
    n_rows = rows.shape[0]
    if n_rows == 0:
        return np.zeros((J, T)), np.inf, None
    # Variables (x, s): rows  s − Σ_t coef·x ≤ 0,  then the base rows (no s).
    A = sp.vstack(
        [
            sp.hstack([-rows, sp.csr_matrix(np.ones((n_rows, 1)))]),
            sp.hstack([poly.rows, sp.csr_matrix((J + T, 1))]),
        ],
        format="csr",
    )
    b = np.concatenate([np.zeros(n_rows), poly.rhs])
    c = np.zeros(J * T + 1)
    c[-1] = -1.0
    # linprog(c, A_ub=A, b_ub=b, bounds=(0, None))'s answer without its set-up (walras.allocator.
    # highs: the same model to HiGHS, bit-for-bit the same solution).
    A = A.tocsc()
    A.sort_indices()
    n = J * T + 1
    problem = highs.Lp(
        c,
        A.indptr,
        A.indices,
        A.data,
        np.full(b.shape[0], -np.inf),
        b,
        np.zeros(n),
        np.full(n, np.inf),
    )
    v, basis = highs.solve_from(start, problem)
    if v is None:  # x = 0, s = 0 is always feasible: only numerical trouble ends here
        raise SolverError("HiGHS found no optimum of the max-min LP")
    return v[:-1].reshape(J, T), float(v[-1]), basis


def finish(x: FloatArray, scale_factors: IntArray, capacity: FloatArray) -> FloatArray:
    """Clip to ``[0, 1]`` as Gavel does, then remove solver-tolerance overshoot (≈1e-9).

    Rows whose sum exceeds 1 and types whose GPU use exceeds capacity are scaled down, so the
    result is feasible exactly, which the rounds mechanics and POP's merge rely on.
    """
    x = np.clip(x, 0.0, 1.0) + 0.0  # + 0.0 turns the -0.0 that clipping keeps into 0.0
    row = x.sum(axis=1)
    over = row > 1.0
    x[over] /= row[over, None]
    used = scale_factors.astype(np.float64) @ x
    scale = np.where(used > capacity, capacity / np.where(used > 0.0, used, 1.0), 1.0)
    return np.asarray(x * scale[None, :], dtype=np.float64)


def strictly_inside(scale_factors: IntArray, capacity: FloatArray) -> FloatArray:
    """A point strictly inside the base polytope: every row sum 1/2, every type half used at most.

    ``x[j, t] = min(1 / (2T), cap[t] / (2 Σ_j k[j]))`` on types with GPUs, 0 elsewhere.
    """
    T = capacity.shape[0]
    per = np.minimum(1.0 / (2 * T), capacity / (2.0 * float(scale_factors.sum())))
    return np.tile(np.where(capacity > 0.0, per, 0.0), (scale_factors.shape[0], 1))

"""The central optimum: which of an LP's many optimal ``x`` Gavel's interior-point solver returns.

Gavel's LPs often have a whole face of optimal solutions (max-min fairness fixes only the
bottleneck jobs' value; min-total-duration's feasibility problem ``maximise 1`` has every feasible
point optimal; the agnostic max-min is symmetric across types). Which optimum a policy returns
changes what the rounds mechanism runs, so it matters for reproducing Gavel's simulations. Gavel
solves with ECOS, a primal-dual interior-point method, whose iterates follow the central path;
that path ends at the *analytic center* of the optimal face (Güler & Ye, 1993). A simplex solver
such as HiGHS returns a vertex instead, which e.g. puts each job of the agnostic max-min on one
type, where ECOS spreads it over all types.

This module computes that analytic center for Gavel's polytope, with the cap ``lower`` on each
job's weighted throughput and optionally the epigraph variable ``s`` of a max-min objective::

    maximise  Σ_{j,t} log x[j,t] + Σ_j log(1 − Σ_t x[j,t]) + Σ_t log(cap[t] − Σ_j k[j] x[j,t])
              + Σ_j log(Σ_t C[j,t] x[j,t] − g·s − lower[j]) + g·log(s − s_lo)

with ``g = 1`` (max-min: ``s_lo`` a hair below the LP optimum ``s*``, so the slab
``s ≥ s_lo`` is the optimal face thickened by ``s* − s_lo``; its center is the central-path point
with that duality gap) or ``g = 0`` (a feasibility polytope, e.g. min-total-duration's
``throughput ≥ remaining / T``, whose center is what an interior-point method returns for
``maximise 1``). The barrier terms are exactly the inequalities of Gavel's cvxpy problems, so the
center is the same point ECOS converges to.

Newton's method with a backtracking line search that keeps every slack positive. The Hessian is
block diagonal per job (``T × T``: ``x ≥ 0``, row sum, throughput row), plus rank ``T`` from the
capacity rows (Woodbury) and rank 1 from ``s`` (Schur complement), so one step costs
``O(J·T³)``: a few milliseconds at 2,048 jobs. Types with no GPUs are fixed at 0 (no interior).

Worked example: one type with 4 GPUs, two 1-GPU jobs, no throughput rows (``C = 0, lower = −1``).
By symmetry ``x0 = x1 = y``; maximise ``2 log y + 2 log(1 − y) + log(4 − 2y)``: the derivative
``2/y − 2/(1 − y) − 1/(2 − y) = 0`` gives ``5y² − 11y + 4 = 0``, ``y = (11 − √41)/10 ≈ 0.4597``
(the capacity term pulls ``y`` below the row-sum midpoint 1/2).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from walras.allocator.gavel.inputs import FloatArray, IntArray
from walras.allocator.gavel.lp import SolverError

MAX_NEWTON = 200
"""Newton steps; the damped phase usually ends within ~30 from the LP-based start."""

DECREMENT_TOL = 1e-12
"""Stop when the Newton decrement λ² (the barrier's predicted decrease) is below this."""


def analytic_center(
    start: FloatArray,
    coef: FloatArray,
    lower: FloatArray,
    scale_factors: IntArray,
    capacity: FloatArray,
    *,
    s_start: float | None = None,
    s_lower: float | None = None,
) -> FloatArray:
    """The analytic center described in the module docstring, from a strictly feasible ``start``.

    ``s_start``/``s_lower`` switch on the max-min epigraph variable (``g = 1``); ``start`` (and
    ``s_start``) must satisfy every inequality strictly, except on types with ``capacity == 0``,
    whose columns are returned as 0.
    """
    live = capacity > 0.0
    x = np.array(start[:, live], dtype=np.float64)
    C = np.asarray(coef[:, live], dtype=np.float64)
    cap = capacity[live]
    k = scale_factors.astype(np.float64)
    use_s = s_start is not None
    s = float(s_start) if s_start is not None else 0.0
    s_lo = float(s_lower) if s_lower is not None else 0.0
    g = 1.0 if use_s else 0.0

    def slacks(x: FloatArray, s: float) -> tuple[FloatArray, FloatArray, FloatArray, float]:
        row = 1.0 - x.sum(axis=1)
        capsl = cap - k @ x
        thr = (C * x).sum(axis=1) - g * s - lower
        return row, capsl, thr, (s - s_lo) if use_s else 1.0

    def barrier(x: FloatArray, s: float) -> float:
        row, capsl, thr, ssl = slacks(x, s)
        if min(x.min(), row.min(), capsl.min(), thr.min(), ssl) <= 0.0:
            return np.inf
        total = np.log(x).sum() + np.log(row).sum() + np.log(capsl).sum() + np.log(thr).sum()
        return -float(total + (np.log(ssl) if use_s else 0.0))

    f = barrier(x, s)
    if not np.isfinite(f):
        raise SolverError("analytic center: the start point is not strictly feasible")
    J, T = x.shape
    for _ in range(MAX_NEWTON):
        row, capsl, thr, ssl = slacks(x, s)
        # Gradient of f = −Σ log(slack): d slack / dx is +1 (x), −1 (row), −k (cap), +C (thr).
        ix, ir, ic, it = 1.0 / x, 1.0 / row, 1.0 / capsl, 1.0 / thr
        grad_x = -ix + ir[:, None] + k[:, None] * ic[None, :] - C * it[:, None]
        grad_s = g * float(it.sum()) - (1.0 / ssl if use_s else 0.0)
        # Per-job T×T blocks: diag(1/x²) + (1/row²)·11ᵀ + (1/thr²)·C_j C_jᵀ.
        B = np.zeros((J, T, T))
        B[:, np.arange(T), np.arange(T)] = ix**2
        B += (ir**2)[:, None, None]
        B += (it**2)[:, None, None] * C[:, :, None] * C[:, None, :]
        h = (g * it**2)[:, None] * -C  # d²f / dx ds
        h_ss = g * float((it**2).sum()) + (1.0 / ssl**2 if use_s else 0.0)
        solve = _block_woodbury(B, k, ic**2)
        dx = -solve(grad_x)
        ds = 0.0
        if use_s:
            Mh = solve(h)
            schur = h_ss - float((h * Mh).sum())
            ds = (-grad_s + float((h * -dx).sum())) / schur
            dx = dx - Mh * ds
        decrement = -float((grad_x * dx).sum()) - grad_s * ds
        if decrement < DECREMENT_TOL:
            break
        step = 1.0
        while True:  # backtracking: stay strictly feasible and decrease f (Armijo, 1/4)
            f_new = barrier(x + step * dx, s + step * ds)
            if f_new <= f - 0.25 * step * decrement:
                break
            step *= 0.5
            if step < 1e-14:
                raise SolverError("analytic center: line search stalled (ill-conditioned)")
        x, s, f = x + step * dx, s + step * ds, f_new
    out = np.zeros(start.shape)
    out[:, live] = x
    return out


def _block_woodbury(
    B: npt.NDArray[np.float64], k: FloatArray, d_cap: FloatArray
) -> Callable[[FloatArray], FloatArray]:
    """``r ↦ (B + U diag(d_cap) Uᵀ)⁻¹ r`` with ``B`` block diagonal and ``U[(j,t), t] = k[j]``."""
    B_inv = np.linalg.inv(B)  # (J, T, T); the blocks are SPD
    # Uᵀ B⁻¹ U is T×T: Σ_j k[j]² (B_j⁻¹)[t, u].
    small = np.einsum("j,jtu->tu", k**2, B_inv) + np.diag(1.0 / d_cap)

    def apply(r: FloatArray) -> FloatArray:
        y = np.einsum("jtu,ju->jt", B_inv, r)  # B⁻¹ r
        corr = np.linalg.solve(small, k @ y)  # (Uᵀ B⁻¹ U + D⁻¹)⁻¹ Uᵀ B⁻¹ r
        return np.asarray(y - np.einsum("jtu,j,u->jt", B_inv, k, corr), dtype=np.float64)

    return apply

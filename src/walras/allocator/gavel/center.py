"""The central optimum: which of an LP's many optimal ``x`` Gavel's interior-point solver returns.

Gavel's LPs often have a whole face of optimal solutions (max-min fairness fixes only the
bottleneck jobs' value; min-total-duration's feasibility problem ``maximise 1`` has every feasible
point optimal; the agnostic max-min is symmetric across types). Which optimum a policy returns
changes what the rounds mechanism runs, so it matters for reproducing Gavel's simulations. Gavel
solves with ECOS, a primal-dual interior-point method whose iterates follow the central path; a
simplex solver such as HiGHS returns a vertex instead, which e.g. puts each job of the agnostic
max-min on one type where ECOS spreads it over all types.

This module follows the same central path with a primal log-barrier method on Gavel's polytope,
``Φ(x) = −Σ_{j,t} log x[j,t] − Σ_j log(1 − Σ_t x[j,t]) − Σ_t log(cap[t] − Σ_j k[j] x[j,t])
− Σ_j log(Σ_t C[j,t] x[j,t] − lower[j])``:

- **Center mode** (:func:`analytic_center`): the minimiser of ``Φ``, the analytic center of the
  polytope. That is what an interior-point method returns for a feasibility problem (Gavel's
  min-total-duration ``maximise 1``). Needs a strictly feasible start.
- **Max-min mode** (:func:`central_max_min`, ``max s s.t. C·x ≥ s·w``): the central point with
  objective value ``l`` is the analytic center with ``lower = l·w``. The level ``l`` rises along
  the path's tangent until the duality gap ``m/τ`` (``m`` inequalities, ``τ = Σ_j w_j/slack_j``)
  is below ``GAP_REL·l``; the path ends at the analytic center of the optimal face (Güler & Ye,
  1993). Each stage moves 90 % of the way to where the tangent leaves the polytope (near the
  face the path is almost straight in ``l``, so that is ≈ ``s* − l``: the gap falls ~10× per
  stage) and re-centers loosely (``λ² < STAGE_DECREMENT``). :func:`central_path` can start from
  a central point of an earlier, larger problem (a warm start, :mod:`.max_min_fairness`).

Each Newton step is ``O(J·T²)``: the Hessian is block diagonal per job (``T × T``: ``x ≥ 0``, row
sum, throughput row) plus rank ``T`` from the capacity rows (Woodbury), applied without forming
any ``T × T`` block (:class:`_BlockInverse`). The step length comes from a ratio test (stay 1 %
inside the boundary) and Armijo backtracking while the Newton decrement is large, and is the full
step without evaluating ``Φ`` once it is small (self-concordance). Types with no GPUs are fixed at
0 (they have no interior).

ECOS runs a homogeneous self-dual embedding from its own starting point, so on a wide optimal face
its final point is near, not at, this one (measured on Gavel's own code: per-entry differences
~1e-6 when capacity is contended, as in D5, up to ~0.1 on lightly loaded clusters).

Worked example (center mode): one type with 4 GPUs, two 1-GPU jobs, no throughput rows. By
symmetry ``x0 = x1 = y`` maximising ``2 log y + 2 log(1 − y) + log(4 − 2y)``: the derivative
``2/y − 2/(1 − y) − 1/(2 − y) = 0`` gives ``5y² − 11y + 4 = 0``, ``y = (11 − √41)/10 ≈ 0.4597``
(the capacity term pulls ``y`` below the row-sum midpoint 1/2).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from walras.allocator.gavel.inputs import FloatArray, IntArray
from walras.allocator.gavel.lp import SolverError

GAP_REL = 1e-6
"""Max-min mode stops when the central path's gap ``m/τ`` is below this times ``|s|``."""

STALL_GAP_REL = 1e-4
"""If rounding stops the path short of ``GAP_REL`` (slacks near 1e-10), a point with a gap below
this is still returned: it is optimal to 1e-4 relative, far below what the rounds mechanism
can resolve (a 360 s round is 1/J of a job's share at best)."""

CORRECTOR_STEPS = 12
"""Newton steps allowed to re-center after a predictor step before the step is shortened."""

MAX_FAILURES = 6
"""Consecutive shortened predictor steps (each 4× shorter) before the path is declared stuck."""

TAU_GROWTH = 10.0
"""``τ`` multiplier per stage of the path-following (short stages keep Newton in its quadratic
region, so each stage takes a handful of steps)."""

STAGE_DECREMENT = 1e-2
FINAL_DECREMENT = 1e-12
"""Newton stops when ``λ²`` (the predicted decrease of ``F``) falls below these. Between stages
``λ² < 1e-2`` (``λ < 0.1``) is well inside Newton's quadratic region, which is all the next
tangent needs; only the returned point is centered to ``FINAL_DECREMENT``."""

STEP_TO_BOUNDARY = 0.9
"""Fraction of the way to the boundary along the path's tangent that a stage moves the level."""

FULL_STEP_DECREMENT = 0.25
"""Below this ``λ`` (square root of the Newton decrement) Newton takes full steps: for a
self-concordant ``Φ`` the iteration then converges quadratically, ``λ⁺ ≤ (λ / (1 − λ))²``."""

POLISH_STEPS = 3
"""Newton steps spent tightening the last center from ``STAGE_DECREMENT`` to ``FINAL_DECREMENT``
(quadratic convergence needs two; more only burn time where rounding stops progress)."""

MAX_STEPS = 400
"""Newton steps in total over all stages; reaching it raises :class:`SolverError`."""


@dataclass(frozen=True, slots=True)
class _Problem:
    C: FloatArray  # (J, T') live types only
    lower: FloatArray  # (J,)
    k: FloatArray  # (J,)
    cap: FloatArray  # (T',)

    def at(self, lower: FloatArray) -> _Problem:
        return _Problem(self.C, lower, self.k, self.cap)

    def slacks(self, x: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        row = 1.0 - x.sum(axis=1)
        capsl = self.cap - self.k @ x
        thr = np.einsum("jt,jt->j", self.C, x) - self.lower
        return row, capsl, thr

    def barrier(self, x: FloatArray) -> float:
        """``Φ(x) = −Σ log slacks``; ``inf`` outside the interior."""
        row, capsl, thr = self.slacks(x)
        if min(x.min(), row.min(), capsl.min(), thr.min()) <= 0.0:
            return np.inf
        logs = np.log(x).sum() + np.log(row).sum() + np.log(capsl).sum() + np.log(thr).sum()
        return -float(logs)


def analytic_center(
    start: FloatArray,
    coef: FloatArray,
    lower: FloatArray,
    scale_factors: IntArray,
    capacity: FloatArray,
) -> FloatArray:
    """Center mode: the analytic center of Gavel's polytope ∩ ``{coef·x ≥ lower}``.

    ``start`` must satisfy every inequality strictly (except columns of types without GPUs).
    """
    prob, live = _problem(coef, lower, scale_factors, capacity)
    x = np.array(start[:, live], dtype=np.float64)
    if not np.isfinite(prob.barrier(x)):
        raise SolverError("analytic center: the start point is not strictly feasible")
    x, _, _ = _newton(prob, x, tol=FINAL_DECREMENT, budget=MAX_STEPS)
    return _widen(x, live, start.shape)


def central_max_min(
    start: FloatArray,
    coef: FloatArray,
    scale_factors: IntArray,
    capacity: FloatArray,
    weights: FloatArray | None = None,
    *,
    s_upper: float | None = None,
) -> tuple[FloatArray, float]:
    """Max-min mode for ``max s s.t. coef·x ≥ s·w``: the end of the central path, and its ``s``.

    ``start`` must be strictly inside the base polytope with ``coef·start > 0`` for every job
    with a weight; ``weights`` ``w`` (default 1) must be ≥ 0 with at least one positive.
    ``s_upper``, an upper bound on the optimum (e.g. an LP's value), caps each move and ends the
    path once the level is within ``GAP_REL`` of it: the gap bound ``m/τ`` alone can exceed the
    true distance by orders of magnitude when the weights span a wide range.
    :func:`central_path` does the work (and can start part-way along the path).
    """
    end = central_path(start, coef, scale_factors, capacity, weights, s_upper=s_upper)
    return end.x, end.level


@dataclass(frozen=True, slots=True)
class PathEnd:
    """Where :func:`central_path` stopped (``x``, ``level``), and the first central point it
    passed whose relative gap bound was at most ``checkpoint_gap`` (``None`` if none was), from
    which a later solve of a nearby problem can start."""

    x: FloatArray
    level: float
    checkpoint_x: FloatArray | None = None
    checkpoint_level: float | None = None


def central_path(
    start: FloatArray,
    coef: FloatArray,
    scale_factors: IntArray,
    capacity: FloatArray,
    weights: FloatArray | None = None,
    *,
    s_upper: float | None = None,
    start_level: float | None = None,
    checkpoint_gap: float = 0.0,
) -> PathEnd:
    """:func:`central_max_min`, optionally warm: from ``start`` at level ``start_level``.

    With ``start_level`` given, ``start`` must satisfy ``coef·start > start_level·w`` strictly
    (e.g. a checkpoint of a problem with more jobs: dropping jobs keeps every inequality
    strict); the path starts by centering there instead of at half the start's worst value.

    The path is followed in its level parameter ``l``: the central point with objective value
    ``s = l`` is the analytic center of ``{base, coef·x ≥ l·w}`` (the stationarity conditions
    of ``F_τ`` and of that center coincide, with ``τ = Σ_j w_j / slack_j``), so no epigraph
    variable enters the Newton systems, whose ``s``-Schur complement would cancel
    catastrophically near the optimum. Each stage moves ``l`` along the path's tangent
    ``STEP_TO_BOUNDARY`` of the way to where the tangent leaves the polytope (at most the gap
    bound ``m/τ``), quartering the move while the predicted point is infeasible or the
    corrector stalls, and re-centers with Newton's method.
    """
    J = coef.shape[0]
    w = np.ones(J) if weights is None else np.asarray(weights, dtype=np.float64)
    prob, live = _problem(coef, np.zeros(J), scale_factors, capacity)
    # Rows with w = 0 are plain ``coef·x ≥ 0``; where coef is 0 on every live type, too, that row
    # is 0 ≥ 0 (no interior), so it becomes 0 ≥ −1, a constant that leaves the center unchanged.
    offset = np.where((w == 0.0) & ~(prob.C > 0.0).any(axis=1), 1.0, 0.0)
    prob = prob.at(-offset)
    x = np.array(start[:, live], dtype=np.float64)
    if start_level is None:
        weighted = w > 0.0
        values = np.einsum("jt,jt->j", prob.C, x)[weighted] / w[weighted]
        level = 0.5 * float(values.min())
    else:
        level = float(start_level)
    m = x.size + 2 * J + prob.cap.size
    budget = MAX_STEPS
    ckpt_x: FloatArray | None = None
    ckpt_level: float | None = None
    cur = prob.at(level * w - offset)
    x, used, solve = _newton(cur, x, tol=STAGE_DECREMENT, budget=budget)
    budget -= used
    while True:
        _, _, thr = cur.slacks(x)
        gap = m / float((w / thr).sum())  # duality gap of the central point at this level
        if s_upper is not None:
            gap = min(gap, s_upper - level)
        if gap <= GAP_REL * abs(level):
            break
        if ckpt_x is None and gap <= checkpoint_gap * abs(level):
            ckpt_x, ckpt_level = _widen(x, live, start.shape), level
        # Tangent of the path: ∂(∇Φ)/∂l = −Σ_j w_j c_j / slack_j², so dx/dl = H⁻¹ (w c / slack²)
        # (the corrector's last Hessian is the one at this x).
        tangent = (solve or _hessian_solver(cur, x))(prob.C * (w / thr**2)[:, None])
        # Near the optimal face the path is nearly straight in ``l`` and the bottleneck jobs'
        # slacks shrink linearly to 0 at ``s*``: the step to the boundary along the tangent
        # estimates ``s* − l`` far better than the bound ``m/τ``; go ``STEP_TO_BOUNDARY`` of it.
        step = min(gap, STEP_TO_BOUNDARY * _max_tangent_step(cur, x, tangent, w))
        failures = 0
        while True:
            nxt = prob.at((level + step) * w - offset)
            guess = x + step * tangent
            if _strictly_inside(nxt, guess):
                try:
                    guess, used, solve = _newton(
                        nxt, guess, tol=STAGE_DECREMENT, budget=CORRECTOR_STEPS
                    )
                    budget -= used
                    break
                except SolverError:
                    budget -= CORRECTOR_STEPS
            failures += 1
            step *= 0.25
            if failures >= MAX_FAILURES or budget <= 0:
                # Rounding stops the path (slacks ~1e-10 of the values): a point this close to
                # the face is returned if its gap is small enough to be called optimal.
                if gap <= STALL_GAP_REL * abs(level):
                    return PathEnd(_widen(x, live, start.shape), level, ckpt_x, ckpt_level)
                raise SolverError("central path: cannot advance the level (ill-conditioned)")
        x, level, cur = guess, level + step, nxt
    with contextlib.suppress(SolverError):  # x is centered to STAGE_DECREMENT already
        x, _, _ = _newton(cur, x, tol=FINAL_DECREMENT, budget=POLISH_STEPS)
    return PathEnd(_widen(x, live, start.shape), level, ckpt_x, ckpt_level)


def _strictly_inside(prob: _Problem, x: FloatArray) -> bool:
    row, capsl, thr = prob.slacks(x)
    return bool(min(x.min(), row.min(), capsl.min(), thr.min()) > 0.0)


def _max_tangent_step(prob: _Problem, x: FloatArray, tangent: FloatArray, w: FloatArray) -> float:
    """Largest ``a`` with ``x + a·tangent`` strictly inside at level ``l + a`` (``inf`` if none)."""
    row, capsl, thr = prob.slacks(x)
    best = math.inf
    for sl, d in (
        (x, tangent),
        (row, -tangent.sum(axis=1)),
        (capsl, -(prob.k @ tangent)),
        (thr, np.einsum("jt,jt->j", prob.C, tangent) - w),
    ):
        neg = d < 0.0
        if neg.any():
            best = min(best, float((-sl[neg] / d[neg]).min()))
    return best


def _problem(
    coef: FloatArray, lower: FloatArray, k: IntArray, capacity: FloatArray
) -> tuple[_Problem, np.ndarray]:
    live = capacity > 0.0
    prob = _Problem(
        np.ascontiguousarray(coef[:, live], dtype=np.float64),
        lower,
        k.astype(np.float64),
        capacity[live],
    )
    return prob, live


def _widen(x: FloatArray, live: np.ndarray, shape: tuple[int, ...]) -> FloatArray:
    out = np.zeros(shape)
    out[:, live] = x
    return out


def _hessian_solver(
    prob: _Problem, x: FloatArray, slacks: tuple[FloatArray, FloatArray, FloatArray] | None = None
) -> Callable[[FloatArray], FloatArray]:
    """``r ↦ ∇²Φ(x)⁻¹ r`` (``slacks`` = ``prob.slacks(x)`` when the caller has them)."""
    row, capsl, thr = prob.slacks(x) if slacks is None else slacks
    # Per-job T×T blocks B_j = diag(1/x²) + (1/row²)·11ᵀ + (1/thr²)·C_j C_jᵀ, plus the capacity
    # rows' rank-T coupling (1/cap_slack²)·k kᵀ per type.
    return _block_woodbury(_BlockInverse(x, 1.0 / row, 1.0 / thr, prob.C), prob.k, capsl)


def _newton(
    prob: _Problem, x: FloatArray, *, tol: float, budget: int
) -> tuple[FloatArray, int, Callable[[FloatArray], FloatArray] | None]:
    """Minimise ``Φ`` from a strictly feasible ``x``; returns ``(x, Newton steps used, H⁻¹)``,
    ``H⁻¹`` applying the Hessian's inverse at the returned ``x`` (None if rounding stopped it).

    The step is the Newton step cut by a ratio test (stay 1 % inside the boundary). ``Φ`` is
    self-concordant, so once ``λ < 1/4`` (``λ²`` the Newton decrement) the full step is strictly
    feasible and decreases ``Φ`` (Nesterov & Nemirovski): it is taken without evaluating ``Φ``.
    Farther out, Armijo backtracking (sufficient decrease 1/4 of the prediction) keeps the long
    steps that a damped step ``1/(1 + λ)`` would forgo.
    """
    C, k = prob.C, prob.k
    f = math.nan  # Φ(x), evaluated only when a line search needs it
    full = False  # the last step was a full step taken without a ratio test
    for step_no in range(budget):
        slacks = prob.slacks(x)
        row, capsl, thr = slacks
        if full and min(x.min(), row.min(), capsl.min(), thr.min()) <= 0.0:
            raise SolverError("central path: a full Newton step left the interior (rounding)")
        full = False
        # ∇Φ: d slack/dx is +1 (x), −1 (row), −k (cap), +C (thr).
        grad = -1.0 / x + (1.0 / row)[:, None] + k[:, None] / capsl[None, :] - C / thr[:, None]
        solve = _hessian_solver(prob, x, slacks)
        dx = -solve(grad)
        decrement = -float((grad * dx).sum())
        if decrement < tol:
            return x, step_no, solve
        if decrement < FULL_STEP_DECREMENT**2:
            # ‖dx‖ in the Hessian's norm is λ < 1/4, so no slack shrinks by more than a quarter
            # (Dikin ellipsoid); the top of the loop still checks, against rounding.
            x, f, full = x + dx, math.nan, True
            continue
        # Ratio test: the largest step keeping every slack positive, then 1 % back.
        alpha = 1.0
        for sl, d in (
            (x, dx),
            (row, -dx.sum(axis=1)),
            (capsl, -(k @ dx)),
            (thr, np.einsum("jt,jt->j", C, dx)),
        ):
            neg = d < 0.0
            if neg.any():
                alpha = min(alpha, 0.99 * float((-sl[neg] / d[neg]).min()))
        if math.isnan(f):
            f = prob.barrier(x)
        while True:  # Armijo backtracking (sufficient decrease 1/4 of the prediction)
            f_new = prob.barrier(x + alpha * dx)
            if f_new <= f - 0.25 * alpha * decrement:
                break
            alpha *= 0.5
            if alpha < 1e-14:
                if decrement < STAGE_DECREMENT:  # converged to rounding precision
                    return x, step_no, solve
                raise SolverError("central path: line search stalled (ill-conditioned)")
        x, f = x + alpha * dx, f_new
    raise SolverError(f"central path: no convergence in {budget} Newton steps")


class _BlockInverse:
    """``r ↦ B_j⁻¹ r_j`` per job for ``B_j = diag(1/x_j²) + ir_j²·11ᵀ + it_j²·C_j C_jᵀ``, stably.

    Near the optimum some slacks are ~1e-9, so ``B_j`` mixes entries of 1 and 1e18: a direct
    inverse is singular in float64, and so is a Woodbury formula through ``UᵀU`` (it squares the
    condition number). With ``S = diag(x_j)``, ``S B_j S = I + U Uᵀ`` for ``U = [u, v]``,
    ``u = ir·x_j``, ``v = it·C_j∘x_j``. Gram–Schmidt ``U = Q R`` (``R`` upper triangular) gives
    ``(I + UUᵀ)⁻¹ = I + Q E Qᵀ`` with ``E = (I + RRᵀ)⁻¹ − I``, and for triangular ``R`` the 2×2
    determinant ``1 + r11² + r12² + r22² + r11²·r22²`` is a sum of positive terms: no
    cancellation. Then ``B_j⁻¹ = S (I + Q E Qᵀ) S = S² + P E Pᵀ`` with ``P = S Q``, applied
    without forming any T×T matrix (every operation is on ``(J, T)`` arrays: fewer, larger
    numpy calls). Where ``v ∥ u``, ``r22 → 0`` and the second direction drops out.
    """

    def __init__(self, x: FloatArray, ir: FloatArray, it: FloatArray, C: FloatArray) -> None:
        u = ir[:, None] * x
        v = it[:, None] * C * x
        r11 = np.sqrt(np.einsum("jt,jt->j", u, u))  # > 0: ir > 0 and x > 0
        q1 = u / r11[:, None]
        r12 = np.einsum("jt,jt->j", q1, v)
        w = v - r12[:, None] * q1
        w -= np.einsum("jt,jt->j", q1, w)[:, None] * q1  # re-orthogonalise (twice is enough)
        r22 = np.sqrt(np.einsum("jt,jt->j", w, w))
        q2 = w / np.where(r22 > 0.0, r22, 1.0)[:, None]
        r11s, r12s, r22s = r11 * r11, r12 * r12, r22 * r22
        det = 1.0 + r11s + r12s + r22s + r11s * r22s
        # (I + RRᵀ)⁻¹ = adj / det, RRᵀ = [[r11² + r12², r12·r22], [r12·r22, r22²]]; E = that − I.
        self.e11 = (1.0 + r22s) / det - 1.0
        self.e12 = -(r12 * r22) / det
        self.e22 = (1.0 + r11s + r12s) / det - 1.0
        self.x2 = x * x
        self.p1 = x * q1
        self.p2 = x * q2

    def apply(self, r: FloatArray) -> FloatArray:
        """``B_j⁻¹ r_j`` for every job (``r`` is ``(J, T)``)."""
        c1 = np.einsum("jt,jt->j", self.p1, r)
        c2 = np.einsum("jt,jt->j", self.p2, r)
        d1 = self.e11 * c1 + self.e12 * c2
        d2 = self.e12 * c1 + self.e22 * c2
        return np.asarray(
            self.x2 * r + self.p1 * d1[:, None] + self.p2 * d2[:, None], dtype=np.float64
        )

    def weighted_sum(self, k2: FloatArray) -> FloatArray:
        """``Σ_j k2[j] · B_j⁻¹`` (T×T)."""
        p1, p2 = self.p1, self.p2
        out = (p1 * (k2 * self.e11)[:, None]).T @ p1 + (p2 * (k2 * self.e22)[:, None]).T @ p2
        mixed = (p1 * (k2 * self.e12)[:, None]).T @ p2
        out += mixed + mixed.T
        out.flat[:: out.shape[0] + 1] += k2 @ self.x2  # the diagonal (a view, no index arrays)
        return np.asarray(out, dtype=np.float64)


def _block_woodbury(
    B_inv: _BlockInverse, k: FloatArray, capsl: FloatArray
) -> Callable[[FloatArray], FloatArray]:
    """``r ↦ (B + U diag(1/capsl²) Uᵀ)⁻¹ r`` given ``B⁻¹`` (block diagonal), ``U[(j,t), t] = k[j]``.

    Woodbury: ``(B + U D Uᵀ)⁻¹ r = y − B⁻¹U (UᵀB⁻¹U + D⁻¹)⁻¹ Uᵀ y`` with ``y = B⁻¹ r``; the
    middle matrix is T×T, ``Σ_j k[j]² B_j⁻¹ + diag(capsl²)``, and ``B⁻¹U c`` is ``B⁻¹`` applied
    to ``k[j]·c`` in every job's block.
    """
    small = B_inv.weighted_sum(k * k)
    small.flat[:: small.shape[0] + 1] += capsl * capsl

    def apply(r: FloatArray) -> FloatArray:
        y = B_inv.apply(r)
        corr = np.linalg.solve(small, k @ y)
        return y - B_inv.apply(k[:, None] * corr[None, :])

    return apply

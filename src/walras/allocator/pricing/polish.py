"""A feasible allocation near the optimum from ONE evaluation of the dual: polish the elastic jobs.

After the responses x̃(p) at prices p, column scaling (``solver._scales``) loses utility of the
order of p·|r(p) − R|: every job on an over-demanded type is cut, every job that could use a
type with spare capacity leaves it unused. When p comes from a 50 000-job sample of a 10⁶-job
problem, |r − R| / R is 0.4–4 % (sampling noise) and the scaled allocation is 4e-3 per job below
the optimum although g(p) is within 1e-5 of it.

Most jobs do not react to a small price change: their best throughput sits at a vertex of their
cost hull (a whole type, no idle time). Only the *elastic* jobs, whose optimum lies inside a hull
edge [lo, hi] (0 < x_hi < 1: two types, or one type and idle time), move. Keeping every job on
its edge, a job's share of ``hi`` is

    θ_i(p) = clip((t_i(α_i) − a_lo) / (a_hi − a_lo), 0, 1),   α_i = (π_hi − π_lo) / (a_hi − a_lo),

with π = d_i ⊙ p and t_i(α) = argmax u_i(t) − α t (``Utility.best_t``; lo = −1 is the origin,
a = π = 0). The polish solves r_fixed + r_elastic(p') = R for p' by Newton's method on the
m × m Jacobian (assembled with one ``bincount``, from dt/dα = ``Utility.slope_derivative``):

    ∂θ_i/∂p_hi = −k_i d_hi / span,  ∂θ_i/∂p_lo = k_i d_lo / span,  k_i = −dt/dα / span ≥ 0,

and usage d_hi θ on hi, d_lo (1 − θ) on lo. Types whose price is 0 with spare capacity, and
types no elastic job uses, keep their price. The elastic jobs take θ(p'), all jobs keep their
types, and the result is scaled column by column to fit (a few ppm now). It is only a candidate
primal: its utility U is computed exactly on the full instance and the duality gap g(p) − U
(g still from the full evaluation at p) decides whether the solve stops. Nothing here weakens
the certificate.

On the paper's n = 10⁶ log instance with sample prices: 35 % of the jobs are elastic, Newton
needs 3–5 steps on them, and the gap falls from 4.0e-3 to under 1e-4 per job: one full
evaluation suffices.

Worked example (log, w = 1, unit demand): a job on edge (lo = type 0, a = 1) – (hi = type 1,
a = 3) at p = (0.5, 1.25) has α = (1.25 − 0.5) / 2 = 0.375, t = 1/α = 8/3, θ = (8/3 − 1)/2 = 5/6.

Called by ``solver._Run.step`` (kinds with ``slope_derivative``; numpy arrays on any backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from walras.allocator.pricing import subproblem

if TYPE_CHECKING:  # the solver imports this module; only its types are needed here
    from walras.allocator.pricing.solver import _Iterate, _Prepared

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NEWTON_STEPS = 12
# Relative residual |r_j − R_j| / R_j at which Newton stops: the scaling after it then costs
# at most ~1e-7 of a job's utility, far below any gap worth certifying.
TOLERANCE = 1e-7


@dataclass(frozen=True)
class Polished:
    """The polished candidate: elastic jobs ``rows`` (solver order) on their edge types.

    ``x_hi`` is each one's share of ``hi`` before scaling (the rest, 1 − x_hi, is on ``lo``;
    lo = −1: idle), as in ``subproblem.Response``; ``throughput`` the whole problem's
    throughput (solver order), ``scale`` the column scaling applied to every job, ``prices``
    where Newton stopped (near market clearing: a good next price vector), ``steps`` the
    Newton steps taken.
    """

    rows: IntArray
    lo: npt.NDArray[np.int8]
    hi: npt.NDArray[np.int8]
    x_hi: FloatArray
    scale: FloatArray
    throughput: FloatArray
    prices: FloatArray
    steps: int


@dataclass
class _Elastic:
    """Price-independent data of one group's elastic jobs.

    ``pair`` = (hi + 1)(m + 1) + (lo + 1) indexes an (m + 1) × (m + 1) table (index 0: the
    origin), so that per-type sums and the Jacobian each take one ``bincount``.
    """

    rows: IntArray  # solver order
    b: Any  # the numpy backend
    group: Any  # the ``subproblem.Group`` the jobs belong to
    util: Any
    par: Any
    lo: IntArray  # −1: the origin
    hi: IntArray
    pair: IntArray
    count: FloatArray  # jobs per pair, (m + 1)²
    a_lo: FloatArray
    a_hi: FloatArray
    span: FloatArray
    inv_span: FloatArray
    d_lo: FloatArray | None  # None when ``unit`` (then d_hi = 1, d_lo = 1 where lo ≥ 0)
    d_hi: FloatArray | None
    unit: bool  # every demand is 1: π = p

    def release_newton_data(self) -> None:
        """Drop the arrays only Newton's steps use (``theta``, ``use``, ``jacobian``)."""
        none = np.empty(0)
        self.pair = none.astype(np.int64)
        self.span = self.inv_span = none

    def demands(self) -> tuple[FloatArray, FloatArray]:
        """(d_lo, d_hi) of every elastic job (0 for the origin end)."""
        if self.d_lo is None or self.d_hi is None:
            return (self.lo >= 0).astype(np.float64), np.ones(self.lo.size)
        return self.d_lo, self.d_hi

    def theta(self, q: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(θ, k) at prices q (k = 0 where θ is clipped to 0 or 1)."""
        P = np.append(0.0, q)  # index 0: the origin's zero price
        if self.unit:  # one gather from the (m + 1)² table of price differences
            alpha = np.take((P[:, None] - P[None, :]).reshape(-1), self.pair)
        else:
            alpha = self.d_hi * np.take(P, self.hi + 1) - self.d_lo * np.take(P, self.lo + 1)
        alpha *= self.inv_span
        b = self.b
        t = self.util.best_t(b, alpha, self.a_lo, self.a_hi, self.par)
        # In place where possible: each temporary is 2.8 MB at n = 1e6, below numpy's
        # huge-page size, so every fresh one costs ~700 page faults.
        theta = t - self.a_lo
        theta *= self.inv_span
        inner = theta > 0.0
        inner &= theta < 1.0
        np.clip(theta, 0.0, 1.0, out=theta)
        k = np.asarray(self.util.slope_derivative(b, t, alpha, self.par), dtype=np.float64)
        k *= self.inv_span  # = −k_i (dt/dα ≤ 0)
        np.copyto(k, 0.0, where=~inner)
        return theta, k

    def use(self, theta: FloatArray, m: int) -> FloatArray:
        """Σ over the elastic jobs of d ⊙ x per type at shares θ on hi, 1 − θ on lo."""
        size = m + 1
        if self.unit:
            W = np.bincount(self.pair, theta, size * size).reshape(size, size)
            use = W.sum(axis=1) + self.count.reshape(size, size).sum(axis=0) - W.sum(axis=0)
        else:
            d_lo, d_hi = self.demands()
            use = np.bincount(self.hi + 1, d_hi * theta, size) + np.bincount(
                self.lo + 1, d_lo * (1.0 - theta), size
            )
        return np.asarray(use[1:], dtype=np.float64)

    def use_of(self, idx: IntArray, theta: FloatArray, m: int) -> FloatArray:
        """The usage (m,) of the elastic jobs ``idx`` at shares ``theta`` (theirs)."""
        size = m + 1
        lo, hi = self.lo[idx], self.hi[idx]
        if self.d_lo is None or self.d_hi is None:  # unit demand
            use = np.bincount(hi + 1, theta, size) + np.bincount(
                lo + 1, np.where(lo >= 0, 1.0 - theta, 0.0), size
            )
        else:
            use = np.bincount(hi + 1, self.d_hi[idx] * theta, size) + np.bincount(
                lo + 1, self.d_lo[idx] * (1.0 - theta), size
            )
        return np.asarray(use[1:], dtype=np.float64)

    def jacobian(self, neg_k: FloatArray, m: int) -> FloatArray:
        """∂ usage / ∂ p (m × m) of the elastic jobs (neg_k = −k_i, 0 where θ is clipped)."""
        size = m + 1
        c = neg_k * self.inv_span  # −k_i / span ≤ 0

        def table(w: FloatArray) -> FloatArray:
            return np.asarray(np.bincount(self.pair, w, size * size), dtype=np.float64).reshape(
                size, size
            )

        if self.unit:
            hh = ll = hl = table(c)
        else:
            d_lo, d_hi = self.demands()
            hh, ll, hl = (
                table(c * d_hi * d_hi),
                table(c * d_lo * d_lo),
                table(c * d_hi * d_lo),
            )
        # Job (hi, lo): J[hi, hi] −= k d_hi²/span, J[lo, lo] −= k d_lo²/span, and
        # J[hi, lo] = J[lo, hi] += k d_hi d_lo/span (c carries the sign −k/span).
        J = np.diag(hh.sum(axis=1) + ll.sum(axis=0)) - hl - hl.T
        return np.asarray(J[1:, 1:], dtype=np.float64)


def applicable(prep: _Prepared) -> bool:
    """Whether every group's utility has a slope derivative (log, α-fair).

    The polish itself runs on numpy arrays; the solver hands it numpy views (CPU torch) or
    copies (CUDA) of a torch solve's data, so that both backends polish alike.
    """
    return all(g.util.smooth for g in prep.groups)


def polish(prep: _Prepared, it: _Iterate, p: FloatArray, r: FloatArray) -> Polished | None:
    """Newton on the elastic jobs' prices from the responses ``it`` at p (use r); see above."""
    m = prep.m
    found = [_elastic(prep, g, it) for g in prep.groups]
    groups = [e for e in found if e is not None]
    if not groups:
        return None
    R = prep.R

    def use_at(thetas: list[tuple[FloatArray, FloatArray]]) -> FloatArray:
        return fixed + sum((e.use(th[0], m) for e, th in zip(groups, thetas, strict=True)), 0.0)

    fixed = r - sum((e.use(it.x_hi[e.rows], m) for e in groups), 0.0)
    # Newton aims just below capacity, so that where it converges no column needs scaling and
    # the fixed jobs keep their responses as they are (2e-7 of a type's capacity is given up).
    goal = R * (1.0 - 2.0 * TOLERANCE)
    q = p.copy()
    thetas = [e.theta(q) for e in groups]
    steps = 0
    while steps < NEWTON_STEPS:
        res = goal - use_at(thetas)
        free = (q <= 0.0) & (res >= 0.0)  # a free type with spare capacity stays free
        if np.all(free | (np.abs(res) <= TOLERANCE * R)):
            break
        J = np.zeros((m, m))
        for e, th in zip(groups, thetas, strict=True):
            J += e.jacobian(th[1], m)
        active = ~free & (np.diag(J) < 0.0)
        if not active.any():
            break
        step = np.zeros(m)
        step[active] = np.linalg.lstsq(J[np.ix_(active, active)], res[active], rcond=None)[0]
        # A trust region: a price at most halves or doubles per step. Far from p* the few
        # interior jobs give a Jacobian that would send prices anywhere.
        q = np.clip(q + step, 0.5 * q, np.where(q > 0.0, 2.0 * q, np.inf))
        thetas = [e.theta(q) for e in groups]
        steps += 1
    use = use_at(thetas)
    # Newton's own arrays are not needed any more: at n = 10⁶ they are 11 MB at the solve's
    # peak of memory, which decides how many fresh pages the kernel zeroes.
    for e in groups:
        e.release_newton_data()
    shares = [theta for theta, _ in thetas]  # the slopes' derivatives k are not needed
    del thetas
    # A job whose share hit an end of its edge would rather, at q, be on a neighbouring edge
    # (or a vertex further on): it gets its full best response at q (the whole cost hull).
    # Without this the allocation keeps too many jobs on one type (13 % instead of 17 % on two
    # types at n = 1e5) although its gap is certified.
    lo, hi, x_lo, x_hi, y_lo, y_hi = [], [], [], [], [], []
    for e, theta in zip(groups, shares, strict=True):
        # theta and the edge arrays are not used after this loop: no copies (at n = 1e6 the
        # elastic arrays are 2.8 MB each, below numpy's huge-page size: every copy faults).
        lo_e, hi_e = e.lo, e.hi
        xh = theta
        # Multiplying by the 0/1 mask instead of np.where: the mask is random (35 % of the jobs
        # have an idle end), where branches per element; θ ∈ [0, 1], so the product is exact.
        xl = (1.0 - theta) * (e.lo >= 0)
        yl, yh = xl * e.a_lo, xh * e.a_hi
        moved = np.flatnonzero((theta <= 0.0) | (theta >= 1.0))
        if moved.size:
            lo_e, hi_e = lo_e.copy(), hi_e.copy()
            sub = subproblem.subset(prep.b, e.group, e.rows[moved] - e.group.start)
            resp = subproblem.respond(prep.b, sub, q, 0, moved.size)
            use += resp.use - e.use_of(moved, theta[moved], m)
            lo_e[moved] = resp.type_lo
            hi_e[moved] = resp.type_hi
            xl[moved], xh[moved] = resp.x_lo, resp.x_hi
            yl[moved], yh[moved] = resp.y_lo, resp.y_hi
        lo.append(lo_e)
        hi.append(hi_e)
        x_lo.append(xl)
        x_hi.append(xh)
        y_lo.append(yl)
        y_hi.append(yh)
    with np.errstate(divide="ignore"):
        scale = np.where(use > R, R / np.maximum(use, 1e-300), 1.0)
    s_ext = np.append(scale, 0.0)  # index −1 (idle) reads the appended 0
    if np.all(scale >= 1.0):
        t = np.asarray(it.y_lo + it.y_hi, dtype=np.float64)  # the responses' t
    else:
        t = subproblem.scaled_throughput(it.type_lo, it.type_hi, it.y_lo, it.y_hi, scale)
    rows = _joined([e.rows for e in groups])
    lo_all, hi_all = _joined(lo), _joined(hi)
    sl, sh = s_ext[lo_all], s_ext[hi_all]
    # The factors become the scaled throughputs in place (no more 2.8 MB temporaries).
    sl *= _joined(y_lo)
    sh *= _joined(y_hi)
    sl += sh
    t[rows] = sl
    return Polished(
        rows=rows,
        # int8 like the iterate's types (numpy): 5 MB less held until the result is written.
        lo=lo_all.astype(np.int8),
        hi=hi_all.astype(np.int8),
        # A copy made last: θ itself was allocated amid the Newton steps' temporaries, and
        # kept alive there it splits their freed memory, so that the 32 MB dense allocation
        # (``solver._finish``) at n = 10⁶ needs 6 400 fresh pages instead of none.
        x_hi=_joined(x_hi).copy(),
        scale=scale,
        throughput=t,
        prices=q,
        steps=steps,
    )


def _joined(parts: list[Any]) -> Any:
    """The groups' arrays end to end (the one array itself when there is one group)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _elastic(prep: _Prepared, g: Any, it: _Iterate) -> _Elastic | None:
    x_hi = it.x_hi[g.start : g.stop]
    local = np.flatnonzero((x_hi > 0.0) & (x_hi < 1.0))
    if local.size == 0:
        return None
    rows = local + g.start if g.start else local
    lo = it.type_lo[rows].astype(np.int64)
    hi = it.type_hi[rows].astype(np.int64)
    m = prep.m
    size = m + 1
    # Exact throughputs from the (masked) problem data, not y / x: the utility reported for
    # the allocation must be that allocation's.
    A = prep.A.reshape(-1)
    has_lo = lo >= 0
    at_hi = rows * m
    at_lo = np.maximum(lo, 0)
    at_lo += at_hi
    at_hi += hi
    a_hi = A[at_hi]
    a_lo = A[at_lo] * has_lo  # exact (finite throughputs); np.where branches on a random mask
    unit = bool(g.unit)
    d_hi: FloatArray | None = None
    d_lo: FloatArray | None = None
    if unit:
        pass  # d = 1: ``_Elastic.demands`` makes them when a non-unit path needs them
    elif prep.D.ndim == 1:
        d_hi = prep.D[rows]
        d_lo = np.where(has_lo, d_hi, 0.0)
    else:
        D = prep.D.reshape(-1)
        d_hi = D[at_hi]
        d_lo = np.where(has_lo, D[at_lo], 0.0)
    pair = hi + 1
    pair *= size
    pair += lo
    pair += 1  # (hi + 1)(m + 1) + (lo + 1)
    span = a_hi - a_lo
    return _Elastic(
        rows=rows,
        b=prep.b,
        group=g,
        util=g.util,
        par=g.par.take(local),
        lo=lo,
        hi=hi,
        pair=pair,
        count=np.bincount(pair, minlength=size * size).astype(np.float64),
        a_lo=a_lo,
        a_hi=a_hi,
        span=span,
        inv_span=1.0 / span,
        d_lo=d_lo,
        d_hi=d_hi,
        unit=unit,
    )

"""Every job's best response to the prices: the vectorised per-job subproblem.

The subproblem of §4 of "Allocation of fungible resources via a fast, scalable price discovery
method" (Agrawal, Boyd et al.).

For job i with throughput a (m,) and effective prices π = d_i ⊙ p, the cheapest way to reach
throughput t is c(t) = min{π^T x : x ≥ 0, 1^T x ≤ 1, a^T x = t}: the lower convex hull of the
points (0, 0), (a_1, π_1), …, (a_m, π_m). The job solves max_t u(t) − c(t), a concave problem.

Instead of all m(m+1)/2 point pairs (that paper's n × m(m+1)/2 temporaries and one log per pair)
we build the hull itself, with O(m²) cheap elementwise operations per job and one log:

1. ``prepare`` sorts each job's throughputs once per solve (price independent); a type the job
   cannot use gets a = 0 and never enters the hull.
2. With all pairwise slopes s(i, j) (sorted order, i = −1 the origin), point j lies on the lower
   hull iff max_{i<j} s(i, j) < min_{k>j} s(j, k); the right-hand side R_j is then the slope of
   the hull edge leaving j. Equal throughputs get slope ±∞ so that only the cheapest survives.
3. On each hull edge e = [lo_e, hi_e] with slope α_e, τ_e = best_t(α_e, lo_e, hi_e). Because u
   is concave and the slopes increase, t* = Σ_e (τ_e − lo_e): the edges before the optimum give
   their full length, the ones after give 0.
4. x interpolates the end points of the edge holding t*, so at most two types are used.

Smooth utilities (log, α-fair: u' > 0 falling, u'(0) = ∞) on jobs without equal throughputs
skip step 3's walk (``_edge_by_derivative``): σ_v (the slope leaving vertex v) rises along the
hull and u'(a_v) falls, so t* lies on the edge from the last vertex with σ_v < u'(a_v) to the
next one, and t* = best_t(σ, lo, hi) there: about 40 % fewer passes over the jobs.

Worked example (paper Fig. 1–3): a = (1, 2, 3, 5), p = (1, 1, 4, 6), u = 4 log t. The hull is
(0,0) → (2,1) → (5,6); edge slopes 1/2 and 5/3; τ = (2, 2.4) so t* = 2 + 0.4 = 2.4, x_2 = 13/15,
x_4 = 2/15.

Called by ``solver.py`` once per iteration, chunk by chunk, and by ``solver.best_response``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from walras.allocator.pricing.backend import Backend
from walras.allocator.pricing.utilities import Params, Utility

INF = float("inf")


@dataclass(frozen=True)
class Group:
    """Price-independent data of jobs [start, stop) that share one utility kind.

    Arrays are type-major (m, n_group) in each job's ascending-throughput order: ``As`` the
    throughputs (0 where the job cannot use the type), ``Ts`` the original type index,
    ``Ds`` the per-type demand in that order (or ``None`` when ``d`` is one number per job).
    ``ties[(i, j)]`` marks jobs whose sorted columns i and j (i = −1: the origin) have equal
    throughput; absent when there is none.

    A *lazy* group (``prepare(..., lazy=True)``, numpy) stores none of the sorted arrays:
    ``rows`` holds the (n_group, m) throughputs as given (``rows_d`` the (n_group, m) demand, if
    per type) and ``respond`` sorts each chunk when it evaluates it (``_sorted_chunk``), in
    cache. For a 10⁶-job problem that is evaluated about once, this saves the 36 MB sorted copy
    (9 000 fresh pages the kernel zeroes) for the same sorting work.
    """

    util: Utility
    start: int
    stop: int
    As: Any
    Ts: Any
    Ds: Any
    d: Any
    par: Params
    ties: dict[tuple[int, int], Any]
    odd: Any  # job index is odd (tie-break between identical types)
    unit: bool = False  # every demand is exactly 1 (the default): π = p, no multiplications
    rows: Any = None  # lazy groups: the unsorted (n_group, m) throughputs (numpy)
    rows_d: Any = None  # lazy groups: the unsorted (n_group, m) demand, when per type

    @property
    def m(self) -> int:
        """The number of resource types."""
        return int(self.rows.shape[1] if self.As is None else self.As.shape[0])


def prepare(
    b: Backend,
    util: Utility,
    start: int,
    A: np.ndarray[Any, Any],
    D: np.ndarray[Any, Any],
    par: Params,
    *,
    lazy: bool = False,
) -> Group:
    """Sort each job's throughputs (A: (n_g, m) numpy, masked) and move the data to ``b``.

    With ``lazy`` (numpy only) nothing is sorted here: each evaluation sorts its chunks.
    """
    if lazy:
        return Group(
            util=util,
            start=start,
            stop=start + A.shape[0],
            As=None,
            Ts=None,
            Ds=None,
            d=b.asarray(D) if D.ndim == 1 else None,
            par=par,
            ties={},
            odd=_odd(b, start, A.shape[0]),
            unit=D.ndim == 1 and bool(np.all(D == 1.0)),
            rows=A,
            rows_d=D if D.ndim == 2 else None,
        )
    As, order, Ds_np = sort_rows(A, D if D.ndim == 2 else None)
    ties = _ties(b, As)
    unit = False
    if D.ndim == 1:
        Ds = None
        d = b.asarray(D)
        unit = bool(np.all(D == 1.0))
    else:
        Ds = b.asarray(Ds_np)
        d = None
    return Group(
        util=util,
        start=start,
        stop=start + A.shape[0],
        As=b.asarray(As),
        # numpy indexes with int8 as well as with int64, in an eighth of the memory.
        Ts=order if b.name == "numpy" else b.asarray(order, integer=True),
        Ds=Ds,
        d=d,
        par=par,
        ties=ties,
        odd=_odd(b, start, A.shape[0]),
        unit=unit,
    )


def _ties(b: Backend, As: np.ndarray[Any, Any]) -> dict[tuple[int, int], Any]:
    """The tie masks of ``Group.ties`` for the sorted, type-major throughputs ``As``."""
    m = As.shape[0]
    ties: dict[tuple[int, int], Any] = {}
    # Sorted ascending (and a ≥ 0), a row has equal entries (or a 0 equal to the origin) only
    # if two neighbours are equal, or its first entry is 0: m tests settle the usual case of
    # no tie at all instead of m(m+1)/2.
    neighbours = [As[0] == 0.0, *(As[j] == As[j - 1] for j in range(1, m))]
    for j in range(m if any(bool(x.any()) for x in neighbours) else 0):
        for i in range(-1, j):
            mask = As[j] == (0.0 if i < 0 else As[i])
            if mask.any():
                ties[(i, j)] = b.asarray(mask).bool() if b.name == "torch" else mask
    return ties


def _sorted_chunk(b: Backend, g: Group, s: int, e: int) -> Group:
    """The jobs [s, e) of a lazy group as a sorted group of their own (``Group``)."""
    As, order, Ds = sort_rows(g.rows[s:e], None if g.rows_d is None else g.rows_d[s:e])
    return Group(
        util=g.util,
        start=g.start + s,
        stop=g.start + e,
        As=As,
        Ts=order,
        Ds=Ds,
        d=None if g.d is None else g.d[s:e],
        par=g.par.slice(s, e),
        ties=_ties(b, As),
        odd=g.odd[s:e],
        unit=g.unit,
    )


def subset(b: Backend, g: Group, idx: np.ndarray[Any, Any]) -> Group:
    """The jobs ``idx`` (group-relative, numpy) of ``g`` as a group of their own (numpy only).

    Used to re-solve a few jobs' subproblems (``polish.py``); ``odd`` keeps each job's original
    parity, so that ties break as in the whole group.
    """
    if g.As is None:  # lazy: sort just these jobs
        D = g.d[idx] if g.rows_d is None else g.rows_d[idx]
        sub = prepare(b, g.util, 0, g.rows[idx], D, g.par.take(idx))
        return replace(sub, odd=g.odd[idx])
    return Group(
        util=g.util,
        start=0,
        stop=len(idx),
        As=g.As[:, idx],
        Ts=g.Ts[:, idx],
        Ds=None if g.Ds is None else g.Ds[:, idx],
        d=None if g.d is None else g.d[idx],
        par=g.par.take(idx),
        ties={k: v[idx] for k, v in g.ties.items()},
        odd=g.odd[idx],
        unit=g.unit,
    )


def _odd(b: Backend, start: int, n: int) -> Any:
    """Mask of the jobs start, …, start + n − 1 whose index is odd."""
    odd = np.zeros(n, dtype=bool)
    odd[(start + 1) % 2 :: 2] = True
    return b.asarray(odd).bool() if b.name == "torch" else odd


def sort_rows(
    A: np.ndarray[Any, Any], D: np.ndarray[Any, Any] | None
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None]:
    """Each row of A (n, m) in ascending order, type-major: (As (m, n), types (m, n) int8, Ds).

    For small m an odd-even transposition network on whole columns (m(m−1)/2 vectorised
    compare-exchanges) is several times faster than ``argsort`` along rows plus the gathers.
    """
    n, m = A.shape
    if m > 16:
        order = np.argsort(A, axis=1, kind="stable")
        As = np.ascontiguousarray(np.take_along_axis(A, order, axis=1).T)
        Ds = None if D is None else np.ascontiguousarray(np.take_along_axis(D, order, axis=1).T)
        return As, np.ascontiguousarray(order.T, dtype=np.int8), Ds
    As = np.array(A.T, order="C")  # a copy: sorted in place below
    T = np.repeat(np.arange(m, dtype=np.int8)[:, None], n, axis=1)
    Ds = None if D is None else np.array(D.T, order="C")
    for s in range(0, n, 16_384):  # blocks that stay in cache
        a = As[:, s : s + 16_384]
        t = T[:, s : s + 16_384]
        d = None if Ds is None else Ds[:, s : s + 16_384]
        for rnd in range(m):
            for i in range(rnd % 2, m - 1, 2):
                j = i + 1
                swap = a[i] > a[j]
                lo = np.fmin(a[i], a[j])
                np.fmax(a[i], a[j], out=a[j])
                a[i] = lo
                # Exchange without branches (``_picker``: the swap mask is random, and
                # ``np.where`` or a masked copy branch per element): the types move by
                # k·(t_j − t_i), k the mask as 0/1, exact modulo 256 for int8.
                k = swap.view(np.int8)
                move = t[j] - t[i]
                move *= k
                t[i] += move
                t[j] -= move
                if d is not None:
                    f = swap.astype(np.float64)
                    di = d[j] * f
                    di += d[i] * (1.0 - f)
                    d[j] = d[i] * f + d[j] * (1.0 - f)
                    d[i] = di
    return As, T, Ds


@dataclass(frozen=True)
class Response:
    """Best responses of a chunk of jobs: x on at most two types ("lo" and "hi" end points).

    ``type_*`` is the original type index or −1 (idle); ``y_*`` = a·x on it; ``use`` (m,) numpy
    = Σ_i d_i ⊙ x_i, the chunk's resource use; ``value`` = Σ_i [u(t_i) − π_i^T x_i] =
    Σ_i u(t_i) − p^T use, the chunk's part of the dual function g(p).
    """

    t: Any
    value: float
    type_lo: Any
    type_hi: Any
    x_lo: Any
    x_hi: Any
    y_lo: Any
    y_hi: Any
    use: np.ndarray[Any, Any]


def respond(b: Backend, g: Group, p: Any, s: int, e: int) -> Response:
    """Best responses of the group's jobs [s, e) (group-relative) at prices p (backend, (m,))."""
    # Slopes to equal-throughput points divide by zero before the tie masks replace them.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _respond(b, g, p, s, e)


def _respond(b: Backend, g: Group, p: Any, s: int, e: int) -> Response:
    xp = b.xp
    if g.As is None:  # a lazy group: sort this chunk first
        g, s, e = _sorted_chunk(b, g, s, e), 0, e - s
    m = g.As.shape[0]
    A = [g.As[j, s:e] for j in range(m)]
    T = [g.Ts[j, s:e] for j in range(m)]
    if g.Ds is None:
        d = g.d[s:e]
        Dj = [d] * m
    else:
        Dj = [g.Ds[j, s:e] for j in range(m)]
    # np.take is cheaper than p[T] for the small int8 index arrays; unit demand needs no product.
    pt = [xp.take(p, T[j]) for j in range(m)]
    P = pt if g.unit else [Dj[j] * pt[j] for j in range(m)]
    par = g.par.slice(s, e)
    zero = 0.0 * A[0]

    def slope(i: int, j: int) -> Any:
        if i < 0:
            sl = P[j] / A[j]
            base = zero
        else:
            sl = (P[j] - P[i]) / (A[j] - A[i])
            base = P[i]
        tie = g.ties.get((i, j))
        if tie is not None:
            # Equal throughput: only the cheaper point can be on the hull. Between identical
            # points (same price too) odd jobs keep the later one, even jobs the earlier one,
            # so that identical GPU types at equal prices share the demand.
            tie = tie[s:e]
            later = (P[j] < base) | ((P[j] == base) & g.odd[s:e] & (i >= 0))
            sl = xp.where(tie, xp.where(later, -INF, INF), sl)
        return sl

    # Left (max over earlier points) and right (min over later points) slopes of every point.
    left: list[Any] = []
    right: list[Any] = [None] * m
    right_origin: Any = None
    # Smooth utilities without equal throughputs find the edge holding t* from the vertices
    # alone (``_edge_by_derivative``): the origin's right slope is not needed.
    by_derivative = g.util.smooth and not g.ties
    for j in range(m):
        lj = None
        for i in range(-1, j):
            sij = slope(i, j)
            lj = sij if lj is None else xp.fmax(lj, sij)
            if i < 0:
                if by_derivative:
                    continue
                right_origin = sij if right_origin is None else xp.fmin(right_origin, sij)
            else:
                right[i] = sij if right[i] is None else xp.fmin(right[i], sij)
        left.append(lj)
    right[m - 1] = zero + INF
    vertex = [left[j] < right[j] if j < m - 1 else left[j] < INF for j in range(m)]
    if by_derivative:
        edge = _edge_by_derivative(b, g, par, A, T, left, right, vertex)
        e_lo_a, e_hi_a, e_lo_t, e_hi_t, t = edge
        x_hi = xp.fmin(xp.fmax((t - e_lo_a) / (e_hi_a - e_lo_a), zero), zero + 1.0)
        # The "lo" end is the origin (type −1, no share) or a type: a 0/1 factor, exact.
        x_lo = (1.0 - x_hi) * (e_lo_t >= 0)
        return _finish(b, g, par, p, s, e, e_lo_a, e_hi_a, e_lo_t, e_hi_t, x_lo, x_hi)

    # Next hull vertex after each point, scanning right to left. (Only throughputs and types
    # are carried: the cost of the response is p^T use, from the per-type use below.)
    pick = _picker(b)
    nxt_a, nxt_t = zero, T[0] * 0 - 1
    edges = []  # (lo_a, hi_a, slope, lo_type, hi_type, valid), left to right
    for j in range(m - 1, -1, -1):
        valid = vertex[j] & (nxt_t >= 0)
        edges.append((A[j], nxt_a, right[j], T[j], nxt_t, valid))
        nxt_a, nxt_t = pick(vertex[j], (A[j], nxt_a), (T[j], nxt_t))
    edges.append((zero, nxt_a, right_origin, nxt_t * 0 - 1, nxt_t, nxt_t >= 0))
    edges.reverse()

    # t* = Σ over hull edges of (τ_e − lo_e).
    t = zero
    for lo_a, hi_a, sl, _, _, valid in edges:
        tau = g.util.best_t(b, sl, lo_a, hi_a, par)
        (t_e,) = pick(valid, (tau - lo_a, zero))
        t = t + t_e

    # The edge holding t*: the last valid edge starting at or before t*.
    e_lo_a, e_hi_a = zero, zero
    e_lo_t = nxt_t * 0 - 1
    e_hi_t = e_lo_t
    for lo_a, hi_a, _, lo_t, hi_t, valid in edges:
        sel = valid & (lo_a <= t)
        e_lo_a, e_hi_a, e_lo_t, e_hi_t = pick(
            sel, (lo_a, e_lo_a), (hi_a, e_hi_a), (lo_t, e_lo_t), (hi_t, e_hi_t)
        )

    span = e_hi_a - e_lo_a
    x_hi = xp.where(e_hi_t >= 0, xp.fmin(xp.fmax((t - e_lo_a) / span, zero), zero + 1.0), zero)
    (x_lo,) = pick(e_lo_t >= 0, (1.0 - x_hi, zero))
    return _finish(b, g, par, p, s, e, e_lo_a, e_hi_a, e_lo_t, e_hi_t, x_lo, x_hi)


def _edge_by_derivative(
    b: Backend,
    g: Group,
    par: Params,
    A: list[Any],
    T: list[Any],
    left: list[Any],
    right: list[Any],
    vertex: list[Any],
) -> tuple[Any, Any, Any, Any, Any]:
    """The hull edge holding t* and t* itself, for a smooth utility (u' > 0 falling, u'(0) = ∞).

    Along the hull the slope σ_v of the edge leaving vertex v rises and u'(a_v) falls, so
    "the optimum lies right of v" (σ_v < u'(a_v)) holds for a prefix of the vertices, the
    origin first (u'(0) = ∞). t* lies on the edge from the last such vertex ("lo") to the
    first vertex where it fails ("hi", the next vertex; the last point, σ = ∞, always fails),
    and t* = best_t(σ, a_lo, a_hi) with σ the slope into hi (``left``: the largest slope from
    an earlier point, the hull edge for a vertex). This replaces the right-to-left walk and
    the sum over all edges: a few selections instead of a pass per edge.

    Needs every ``left`` finite (no equal throughputs: ``g.ties`` empty), so that the 0/1
    blends below are exact sums with one nonzero term.
    """
    m = len(A)
    # Whether the optimum lies right of point j, for the vertices (the last one: never).
    right_of = [vertex[j] & (right[j] < g.util.derivative(b, A[j], par)) for j in range(m - 1)]
    stop = [vertex[j] & ~right_of[j] for j in range(m - 1)] + [vertex[m - 1]]
    # lo: the last vertex the optimum lies right of; hi: the first it does not.
    lo_sel: list[Any] = [None] * (m - 1)
    later = None
    for j in range(m - 2, -1, -1):
        lo_sel[j] = right_of[j] if later is None else right_of[j] & ~later
        later = right_of[j] if later is None else later | right_of[j]
    hi_sel: list[Any] = []
    earlier = None
    for j in range(m):
        hi_sel.append(stop[j] if earlier is None else stop[j] & ~earlier)
        earlier = stop[j] if earlier is None else earlier | stop[j]
    one_of = _one_of(b)
    if m > 1:
        e_lo_a, e_lo_t = one_of(lo_sel, A[: m - 1], T[: m - 1])
    else:  # one type: the edge starts at the origin
        e_lo_a, e_lo_t = 0.0 * A[0], T[0] * 0 - 1
    e_hi_a, sigma, e_hi_t = one_of(hi_sel, A, left, T)
    t = g.util.best_t(b, sigma, e_lo_a, e_hi_a, par)
    return e_lo_a, e_hi_a, e_lo_t, e_hi_t, t


def _one_of(b: Backend) -> Any:
    """``one_of(masks, *columns)``: per job, each column's value where its one true mask is.

    Float columns give 0 and type columns −1 where no mask is true (the origin). At most one
    mask is true per job, so on numpy Σ_j [mask_j]·x_j is exact (one term is x itself, the
    others +0; every x is finite): one multiply and one add per point instead of a branching
    ``where`` on a mask that differs at random from job to job (``_picker``). torch: ``where``.
    """
    xp = b.xp
    if b.name != "numpy":

        def one_of_where(masks: list[Any], *columns: list[Any]) -> tuple[Any, ...]:
            out = []
            for col in columns:
                acc = col[0] * 0.0 if col[0].is_floating_point() else col[0] * 0 - 1
                for mask, x in zip(masks, col, strict=True):
                    acc = xp.where(mask, x, acc)
                out.append(acc)
            return tuple(out)

        return one_of_where

    def one_of_blend(masks: list[Any], *columns: list[Any]) -> tuple[Any, ...]:
        floats = [None] * len(masks)
        out = []
        for col in columns:
            if col[0].dtype.kind == "i":
                # Types shifted by one (the origin's −1 becomes 0), then shifted back.
                acc_t = masks[0].view(np.int8) * (col[0] + 1)
                for mask, x in zip(masks[1:], col[1:], strict=True):
                    acc_t += mask.view(np.int8) * (x + 1)
                acc_t -= 1
                out.append(acc_t)
                continue
            acc = None
            for j, (mask, x) in enumerate(zip(masks, col, strict=True)):
                if floats[j] is None:
                    floats[j] = mask.astype(np.float64)
                term = x * floats[j]
                if acc is None:
                    acc = term
                else:
                    acc += term
            out.append(acc)
        return tuple(out)

    return one_of_blend


def _finish(
    b: Backend,
    g: Group,
    par: Params,
    p: Any,
    s: int,
    e: int,
    e_lo_a: Any,
    e_hi_a: Any,
    e_lo_t: Any,
    e_hi_t: Any,
    x_lo: Any,
    x_hi: Any,
) -> Response:
    """The response from the edge holding t* and the shares of its two ends."""
    m = g.As.shape[0]
    y_lo = e_lo_a * x_lo
    y_hi = e_hi_a * x_hi
    tt = y_lo + y_hi
    if g.unit:
        dx_lo, dx_hi = x_lo, x_hi
    elif g.Ds is None:
        dx_lo, dx_hi = g.d[s:e] * x_lo, g.d[s:e] * x_hi
    else:
        dx_lo = _demand_at(b, g, e_lo_t, s, e) * x_lo
        dx_hi = _demand_at(b, g, e_hi_t, s, e) * x_hi
    # Σ_i d_i x_i per type (index 0 collects the idle share of type −1 and is dropped).
    cnt = b.bincount(e_lo_t + 1, dx_lo, m + 1) + b.bincount(e_hi_t + 1, dx_hi, m + 1)
    use = np.asarray(b.to_numpy(cnt)[1:], dtype=np.float64)
    value = g.util.total(b, tt, par) - float(b.to_numpy(p) @ use)
    return Response(tt, value, e_lo_t, e_hi_t, x_lo, x_hi, y_lo, y_hi, use)


def _picker(b: Backend) -> Any:
    """``pick(mask, (x, y), ...)``: ``where(mask, x, y)`` for each pair, on the backend's arrays.

    The hull masks (which point is a vertex, which edge holds t*) differ from job to job at
    random, and numpy's ``where`` branches per element: on 16 384-element chunks it costs about
    4 ms per 10⁶ jobs with such a mask against 0.5 ms with a predictable one, and the hull walk
    makes some 30 of them per evaluation. On numpy the pairs are blended without branches
    instead (about 1.4 ms per 10⁶ float pairs, 0.2 ms per int8 pair):

    - float pairs as x·f + y·(1 − f), f the mask as 0/1 floats: exact, as one product is x or
      y itself and the other ±0. Every float operand here is finite (throughputs, edge lengths
      clipped by ``best_t``, shares in [0, 1]); an infinite one would give NaN.
    - integer (type index) pairs as y + k·(x − y), k the mask as 0/1 integers: exact (int8
      wraps modulo 256 in between, and the result is a type index again).

    Pairs that share a mask share f. torch keeps ``where``; both give the same numbers.
    """
    xp = b.xp
    if b.name != "numpy":

        def pick_where(mask: Any, *pairs: tuple[Any, Any]) -> tuple[Any, ...]:
            return tuple(xp.where(mask, x, y) for x, y in pairs)

        return pick_where

    def pick_blend(mask: Any, *pairs: tuple[Any, Any]) -> tuple[Any, ...]:
        f = nf = k = None
        out = []
        for x, y in pairs:
            if x.dtype.kind == "i":  # type indices (int8; int64 from a torch problem)
                if k is None:
                    k = mask.view(np.int8)
                out.append(y + k * (x - y))
                continue
            if f is None:
                f = mask.astype(np.float64)
                nf = 1.0 - f
            r = x * f
            r += y * nf
            out.append(r)
        return tuple(out)

    return pick_blend


SCALE_BLOCK = 65_536


def scaled_throughput(
    type_lo: Any, type_hi: Any, y_lo: Any, y_hi: Any, scale: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Each job's throughput after column scaling: s[lo]·y_lo + s[hi]·y_hi (s[−1] = 0, idle).

    numpy arrays (the responses of ``respond``, concatenated). Block by block with ``np.take``
    on the int8 types: the gathered factors and products stay in cache instead of four fresh
    n-element temporaries (at n = 10⁶, 32 MB of new pages the kernel must zero each time).
    Same operations in the same order as the whole-array expression: the same numbers.
    """
    # Index 0 is the idle "type" −1: np.take wraps negative indices element by element, which
    # costs three times as much as shifting the int8 types by one first.
    s_ext = np.append(0.0, np.asarray(scale, dtype=np.float64))
    n = y_lo.shape[0]
    out = np.empty(n)
    for s in range(0, n, SCALE_BLOCK):
        e = min(n, s + SCALE_BLOCK)
        lo = np.take(s_ext, type_lo[s:e] + 1)
        lo *= y_lo[s:e]
        hi = np.take(s_ext, type_hi[s:e] + 1)
        hi *= y_hi[s:e]
        np.add(lo, hi, out=out[s:e])
    return out


def _demand_at(b: Backend, g: Group, types: Any, s: int, e: int) -> Any:
    """d_ij of each job at original type ``types`` (−1 gives an arbitrary value)."""
    xp = b.xp
    m = g.As.shape[0]
    out = 0.0 * g.As[0, s:e]
    for j in range(m):
        out = xp.where(g.Ts[j, s:e] == types, g.Ds[j, s:e], out)
    return out

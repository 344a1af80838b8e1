"""Price discovery: minimise the dual g(p) over prices p ≥ 0.

The method of "Allocation of fungible resources via a fast, scalable price discovery method"
(Agrawal, Boyd et al.), §5:

    g(p) = p^T R + Σ_i max_{x_i ≥ 0, 1^T x_i ≤ 1} [u_i(a_i^T x_i) − (d_i ⊙ p)^T x_i],
    ∇g(p) = R − Σ_i d_i ⊙ x̃_i(p).

Each iteration solves every job's subproblem at p (``subproblem.respond``, vectorised, chunk by
chunk), which gives the upper bound g(p) ≥ U*. Scaling column j of the responses by
min(1, R_j / r_j) gives a feasible allocation X̃ whose utility is a lower bound. The solve stops
when the best upper bound minus the best lower bound is ≤ ε·n (ε = 1e-3: at most 1e-3 below the
optimum in *average* utility) or after ``max_iter`` evaluations of g.

Prices move by bounded L-BFGS (scipy's L-BFGS-B, memory 10) on g/n; if it stops early (its line
search fails on a kinked g, e.g. target-priority) the projected subgradient method with Polyak
steps continues from the best prices. Start prices are the paper's eq. (17),
p¹ = (1/n) Σ_i u_i'(a_i^T x⁰) a_i / d_i with x⁰ = R/(nκ), κ = max(1, 1^T R/n); for n ≥ 200 000
they are first refined on stride samples (capacity scaled). Smooth utilities use nested samples
(5 000 jobs from eq. (17), then 50 000 solved to eps/10) and projected BFGS (``bfgs.py``), whose
curvature carries from one sample to the next. Kinked ones (linear, target) solve one sample of
50 000: by scipy's L-BFGS-B to eps when scipy.optimize is already imported, else by projected
BFGS with a weak Wolfe line search to ``KINKED_EPS_FACTOR``·eps. ``warm_prices`` (the operator's
previous round) replace both. The first point is evaluated before scipy.optimize is imported
(~0.3 s of CPU, as much as a whole 10⁶-job solve): when it already certifies the gap, a solve
never imports it.

When the scaled responses miss the gap by less than ``POLISH_WITHIN``·eps, the elastic-job
polish (``polish.py``: Newton on the prices of the jobs inside a hull edge, the others fixed)
gives another feasible allocation: after the sampled start, scaling alone leaves the first full
evaluation a few eps from certifying, the polish brings it below eps/10, so one evaluation of
the whole problem is enough. That first evaluation after the samples therefore polishes first,
and computes the scaled candidate only if the polished one does not certify the gap.

With few jobs per type (n ≤ 5000·m) g is far from smooth and the scaled response wastes capacity
on the types that jobs pile onto at p*; there each iteration also tries the scaled running
average of the responses and gives capacity left over to jobs with idle time (``_fill``); the
best feasible allocation seen is returned (it may then use more than two types per job). Those
candidates alone often stall at 1–2·ε·n from the dual bound, so at every size an iterate whose
best candidate is within ``POLISH_WITHIN``·ε·n of certifying also tries the polish (every
``POLISH_EVERY``-th evaluation once a solve is long). A solve whose gap is near ε·n
(``STALL_WITHIN``) and no longer shrinking ends early with its best allocation, uncertified
(``converged`` false, the gap reported).

Every loaded BLAS runs on one thread during a solve (``one_blas_thread``, threadpoolctl). With
``WALRAS_PRICING_THREADS=2`` the numpy chunks of an evaluation run on two threads (same result
bit for bit; off by default: on a shared, loaded host they add wall time).

Called by the operator each round, by ``walras solve`` and by the benchmark.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from walras.allocator.errors import InvalidProblem
from walras.allocator.pricing import bfgs, polish, subproblem
from walras.allocator.pricing.backend import Backend, get_backend
from walras.allocator.pricing.problem import (
    KINDS,
    PricingProblem,
    check_jobs,
    fits_everywhere,
    usable,
)
from walras.allocator.pricing.utilities import UTILITIES, Params

COARSE_MIN_JOBS = 200_000
COARSE_SAMPLE = 50_000
# Nested stride samples for the start prices: each solve starts from the next smaller one's.
COARSE_SAMPLES = (COARSE_SAMPLE, 5_000)
COARSE_EPS_FACTOR = 0.1
# Groups of at least this many jobs are sorted chunk by chunk in each evaluation, not once:
# above ``COARSE_MIN_JOBS`` the whole problem is usually evaluated once, and the sorted copy
# would be 36 bytes of fresh memory per job (a second evaluation sorts again: ~10 ms per 10⁶).
SORT_PER_EVALUATION_MIN_JOBS = COARSE_MIN_JOBS
# Up to this many jobs per type, each iteration also recovers from a running average of the
# responses (the plain recovery loses O(m) jobs' worth of utility, which matters when n/m is small).
AVERAGE_MAX_JOBS_PER_TYPE = 5_000
# The elastic-job polish runs when an iterate's best candidate is within this factor of eps (at
# n = 1e6 the first evaluation after the sampled start is at ~4 eps; the polish takes it below
# 0.1 eps). Far from p* many jobs leave their edges and the polish is wasted work.
POLISH_WITHIN = 8.0
# From the POLISH_EVERY_FROM-th evaluation of a solve on, the polish is tried only every
# POLISH_EVERY-th: on D5's remaining-weighted price-discovery rounds 73 % of the polishes of the
# first evaluation certified the gap, 3 % of those from the eighth on, where it cost more than
# the evaluations themselves.
POLISH_EVERY_FROM = 8
POLISH_EVERY = 4
# A solve stops early when its gap is within STALL_WITHIN·eps and shrank by less than a factor
# STALL_SHRINK over the last STALL_EVALUATIONS evaluations. Where many jobs share a throughput
# row (Gavel's table), g is kinked at p* and no candidate certifies: on D5's price-discovery
# rounds such solves stalled at 1–2 eps, and evaluations 40 to 100 shrank their gap by a median
# 10 % while costing most of the run's solver time. Far from the certificate the rule does not
# apply: a slow solve there is still making progress worth having.
STALL_EVALUATIONS = 20
STALL_SHRINK = 0.9
STALL_WITHIN = 4.0
# Weak Wolfe curvature constant of the start-price search on kinked g (``bfgs.py``): a small c
# accepts long steps that cross kinks, which BFGS needs on a piecewise-linear g (on the paper's
# target-priority sample it took fewer evaluations than c = 0.5 or 0.9).
WOLFE_CURVATURE = 0.1
# A kinked g's sample is solved to this fraction of eps, below eps: the full problem's scaled
# responses lose a little more than the sample's, and its first evaluation must still certify
# (else L-BFGS-B takes over: scipy.optimize's import and more evaluations of the whole problem).
KINKED_EPS_FACTOR = 0.7

FloatArray = npt.NDArray[np.float64]

_blas: ThreadpoolController | None = None


def one_blas_thread() -> AbstractContextManager[object]:
    """Context manager: every loaded BLAS on one thread inside, the previous counts restored after.

    Why: scipy's L-BFGS-B calls BLAS on m-element vectors each iteration. That wakes OpenBLAS's
    worker threads, which then busy-wait for more work and take the CPU from the numpy
    element-wise kernels of the next evaluation (on 2 cores a 4-type L-BFGS-B step costs about
    ten times the CPU). The solver's own arrays are far too small for threaded BLAS to help.

    threadpoolctl finds the loaded libraries (numpy's and scipy's wheels each bundle an OpenBLAS)
    and sets and restores their thread counts. Its controller is made once: listing the loaded
    libraries costs ~2 ms, a limit on a known controller ~20 µs, and ``best_response`` is called
    per round. scipy.optimize is imported on first use (``_minimize``), which rebuilds the
    controller so that it sees scipy's BLAS too. The setting is process-wide for OpenBLAS's
    pthreads layer.
    """
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return cast("AbstractContextManager[object]", _blas.limit(limits=1, user_api="blas"))


@dataclass(frozen=True)
class PricingResult:
    """Outcome of ``solve``; nothing in it is mutated after it is returned.

    ``utility`` is U(X̃) of the returned (feasible) allocation, ``dual_bound`` the smallest g(p)
    seen (an upper bound on the optimum), ``gap`` their difference. ``prices`` are the prices
    of that smallest g. ``history`` holds (g(p^k), U(X̃^k)) for every iteration k.
    """

    allocation: FloatArray
    prices: FloatArray
    throughput: FloatArray
    utility: float
    dual_bound: float
    gap: float
    iterations: int
    converged: bool
    timings: Mapping[str, float]
    backend: str
    history: tuple[tuple[float, float], ...] = field(default=())


@dataclass(frozen=True)
class _Prepared:
    """The problem in solver order (jobs grouped by kind), on a backend."""

    b: Backend
    groups: tuple[subproblem.Group, ...]
    n: int
    m: int
    R: FloatArray
    job_order: npt.NDArray[np.int64] | None  # solver position k holds original job job_order[k]
    A: FloatArray  # (n, m) masked throughput, solver order (numpy)
    D: FloatArray  # (n,) or (n, m) demand, solver order
    codes: npt.NDArray[np.int8]
    weight: FloatArray
    target: FloatArray
    alpha: FloatArray


def _prepare(
    b: Backend,
    A: FloatArray,
    D: FloatArray,
    codes: npt.NDArray[np.int8],
    weight: FloatArray,
    target: FloatArray,
    alpha: FloatArray,
    R: FloatArray,
    job_order: npt.NDArray[np.int64] | None,
) -> _Prepared:
    groups = []
    bounds = np.flatnonzero(np.diff(codes)) + 1
    starts = [0, *bounds.tolist()]
    stops = [*bounds.tolist(), len(codes)]
    for s, e in zip(starts, stops, strict=True):
        w = weight[s:e]
        common = float(w[0]) if np.all(w == w[0]) else None
        par = Params(b.asarray(w), b.asarray(target[s:e]), b.asarray(alpha[s:e]), common)
        util = UTILITIES[KINDS[int(codes[s])]]
        # A large numpy problem is evaluated about once (after the sampled start): each
        # evaluation sorts its chunks instead of keeping a sorted copy (``subproblem.Group``).
        lazy = b.name == "numpy" and e - s >= SORT_PER_EVALUATION_MIN_JOBS
        groups.append(subproblem.prepare(b, util, s, A[s:e], D[s:e], par, lazy=lazy))
    return _Prepared(
        b, tuple(groups), len(codes), A.shape[1], R, job_order, A, D, codes, weight, target, alpha
    )


def _from_problem(problem: PricingProblem, b: Backend, *, strict: bool) -> _Prepared:
    check_jobs(problem, strict=strict)
    A = np.asarray(problem.throughput)
    if not fits_everywhere(problem):  # copy only when some type must be masked
        A = np.where(usable(problem, strict=False), A, 0.0)
    codes = np.asarray(problem.kind_codes)
    order: npt.NDArray[np.int64] | None = None
    if np.any(codes != codes[0]):
        order = np.argsort(codes, kind="stable").astype(np.int64)
    D = np.asarray(problem.demand)

    def take(x: Any) -> Any:
        return np.asarray(x) if order is None else np.asarray(x)[order]

    return _prepare(
        b,
        take(A),
        take(D),
        take(codes),
        take(problem.weight),
        take(problem.target),
        take(problem.alpha),
        np.asarray(problem.capacity),
        order,
    )


@dataclass
class _Iterate:
    """Per-job responses at one price vector, in solver order (backend arrays).

    The throughput t = y_lo + y_hi and the share of the "lo" end, x_lo = 1 − x_hi where
    type_lo ≥ 0 else 0 (``subproblem``), are not stored: at n = 10⁶ they would be 16 MB of
    fresh pages per solve (about 4 000 page faults) for values recomputed in one pass.
    """

    type_lo: Any
    type_hi: Any
    x_hi: Any
    y_lo: Any
    y_hi: Any


def _threads() -> int:
    """Worker threads for the numpy kernels: ``WALRAS_PRICING_THREADS``, default 1.

    Two threads spend the same CPU time and, on a loaded host with few cores, more wall time
    (they wait for each other), so they are opt-in; on an idle multi-core host they overlap
    the kernels' numpy loops.
    """
    env = os.environ.get("WALRAS_PRICING_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) >= 1 else 1


THREADS = _threads()
_pool: ThreadPoolExecutor | None = None


def _map(work: Any, tasks: list[Any]) -> list[Any]:
    """``work`` over ``tasks`` in order, on ``THREADS`` threads when there is more than one.

    numpy releases the GIL inside its element-wise loops, so two threads working on different
    chunks overlap most of the kernel's time. Each chunk writes its own slice of the iterate
    and the per-chunk sums are added in chunk order: the result does not depend on the threads.
    """
    global _pool
    if THREADS <= 1 or len(tasks) <= 1:
        return [work(t) for t in tasks]
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="walras-pricing")
    return list(_pool.map(work, tasks))


def _evaluate(prep: _Prepared, p_np: FloatArray, it: _Iterate) -> tuple[float, FloatArray]:
    """Fill ``it`` with the best responses at p; return (g(p), r = Σ d_i x_i)."""
    b = prep.b
    p = b.asarray(p_np)
    tasks = [
        (g, s, min(g.stop - g.start, s + b.chunk))
        for g in prep.groups
        for s in range(0, g.stop - g.start, b.chunk)
    ]

    def work(task: tuple[subproblem.Group, int, int]) -> tuple[float, FloatArray]:
        g, s, e = task
        res = subproblem.respond(b, g, p, s, e)
        o, f = g.start + s, g.start + e
        it.type_lo[o:f] = res.type_lo
        it.type_hi[o:f] = res.type_hi
        it.x_hi[o:f] = res.x_hi
        it.y_lo[o:f] = res.y_lo
        it.y_hi[o:f] = res.y_hi
        return res.value, res.use

    # Threads only for numpy on the CPU: torch parallelises its own kernels.
    results = _map(work, tasks) if b.name == "numpy" else [work(t) for t in tasks]
    value = 0.0
    r = np.zeros(prep.m)
    for v, use in results:
        value += v
        r += use
    return float(p_np @ prep.R) + value, r


def _scales(R: FloatArray, r: FloatArray) -> FloatArray:
    """Column scaling that makes the responses feasible: min(1, R_j / r_j)."""
    with np.errstate(divide="ignore"):
        return np.where(r > R, R / np.maximum(r, 1e-300), 1.0)


def _recovered_t(prep: _Prepared, it: _Iterate, scale: FloatArray) -> Any:
    b = prep.b
    if np.all(scale >= 1.0):
        return it.y_lo + it.y_hi  # the responses' own t (``subproblem``: the same sum)
    if b.name == "numpy":
        return subproblem.scaled_throughput(it.type_lo, it.type_hi, it.y_lo, it.y_hi, scale)
    s_ext = b.asarray(np.append(scale, 0.0))  # index −1 (idle) reads the appended 0
    return s_ext[it.type_lo] * it.y_lo + s_ext[it.type_hi] * it.y_hi


def _utility(prep: _Prepared, t: Any) -> float:
    total = 0.0
    for g in prep.groups:
        total += g.util.total(prep.b, t[g.start : g.stop], g.par)
    return total


def _start_prices(prep: _Prepared) -> FloatArray:
    """Paper eq. (17): p¹ = (1/n) Σ_i u_i'(a_i^T x⁰) a_i / d_i, x⁰ = R / (n κ)."""
    b = prep.b
    n = prep.n
    kappa = max(1.0, float(prep.R.sum()) / n)
    x0 = prep.R / (n * kappa)
    p = np.zeros(prep.m)
    for g in prep.groups:
        A = prep.A[g.start : g.stop]
        D = prep.D[g.start : g.stop]
        inv_d = 1.0 / (np.repeat(D[:, None], prep.m, axis=1) if D.ndim == 1 else D)
        t0 = b.asarray(A @ x0)
        contrib = g.util.initial_price(b, b.asarray(A.T), t0, b.asarray(inv_d.T), g.par)
        p += b.to_numpy(contrib)
    return np.asarray(np.maximum(p / n, 0.0), dtype=np.float64)


@dataclass
class _Run:
    """Book-keeping of one solve's iterations (not part of the result)."""

    prep: _Prepared
    it: _Iterate
    eps_n: float
    max_iter: int
    # Small problems also try the averaged responses (``_averaged``); the start-price samples of
    # smooth kinds need good prices, not their own allocation, and skip it.
    averaging: bool = True
    # The first evaluation after sampled start prices tries the polish before the scaled
    # responses: it usually certifies the gap, and then the scaled candidate (a pass over the
    # jobs and n logs: ~3 ms at n = 10⁶) is not needed.
    polish_first: bool = False
    history: list[tuple[float, float]] = field(default_factory=list)
    best_dual: float = math.inf
    best_dual_p: FloatArray | None = None
    best_primal: float = -math.inf
    best_primal_k: int = -1
    best_primal_p: FloatArray | None = None
    last_r: FloatArray | None = None
    t_sub: float = 0.0
    t_rec: float = 0.0
    average: FloatArray | None = None  # running average of the responses (small problems)
    best_alloc: FloatArray | None = None  # the best feasible allocation (small problems)
    best_polished: polish.Polished | None = None  # elastic jobs of the best primal, if polished
    polishes: int = 0  # Newton steps of the polish, summed over iterations
    gaps: list[float] = field(default_factory=list)  # the best gap after each evaluation
    numpy_prep: _Prepared | None = None  # a torch problem's data on numpy, for the polish

    @property
    def gap(self) -> float:
        return self.best_dual - self.best_primal

    @property
    def done(self) -> bool:
        return self.gap <= self.eps_n or len(self.history) >= self.max_iter or self.stalled

    @property
    def stalled(self) -> bool:
        """The gap shrank by less than ``STALL_SHRINK`` over the last ``STALL_EVALUATIONS``."""
        gaps = self.gaps
        k = STALL_EVALUATIONS
        return (
            len(gaps) > k
            and gaps[-1] <= STALL_WITHIN * self.eps_n
            and gaps[-1] > STALL_SHRINK * gaps[-1 - k]
        )

    def step(self, p: FloatArray) -> tuple[float, FloatArray]:
        """Evaluate g and ∇g at p, recover a feasible allocation and record both bounds."""
        p = np.maximum(np.asarray(p, dtype=np.float64), 0.0)
        t0 = time.perf_counter()
        g, r = _evaluate(self.prep, p, self.it)
        t1 = time.perf_counter()
        alloc, polished, first = None, None, None
        if self.polish_first and polish.applicable(self.prep):
            self.polish_first = False
            first = self._polished(p, r)
            if first is not None and min(g, self.best_dual) - first[0] <= self.eps_n:
                primal, polished = first  # certified: the scaled candidate cannot matter
        if polished is None:
            scale = _scales(self.prep.R, r)
            primal = _utility(self.prep, _recovered_t(self.prep, self.it, scale))
            if self.averaging and self.prep.n <= AVERAGE_MAX_JOBS_PER_TYPE * self.prep.m:
                primal, alloc = self._averaged(primal, scale)
            if (
                first is None
                and (len(self.history) < POLISH_EVERY_FROM or len(self.history) % POLISH_EVERY == 0)
                and self.eps_n < min(g, self.best_dual) - primal <= POLISH_WITHIN * self.eps_n
                and polish.applicable(self.prep)
            ):
                # The candidates so far nearly certify the gap: polish the elastic jobs (one
                # more candidate, its utility computed exactly; the dual bound stays g). With
                # few jobs this is what closes the gap: without it a third of a price-discovery
                # run's solves on Gavel's D5 trace stalled at 1-2 eps and ran to max_iter.
                first = self._polished(p, r)
            if first is not None and first[0] > primal:
                primal, polished = first
                alloc = None
        self.t_sub += t1 - t0
        self.t_rec += time.perf_counter() - t1
        self.history.append((g, primal))
        if g < self.best_dual or self.best_dual_p is None:
            self.best_dual, self.best_dual_p = g, p.copy()
        if primal > self.best_primal or self.best_primal_p is None:
            self.best_primal, self.best_primal_p = primal, p.copy()
            self.best_primal_k = len(self.history) - 1
            self.best_alloc = alloc
            self.best_polished = polished
        self.gaps.append(self.gap)
        grad = self.prep.R - r
        self.last_r = r
        return g, grad

    def _polished(self, p: FloatArray, r: FloatArray) -> tuple[float, polish.Polished] | None:
        """The polished candidate at p (``polish.py``) and its exact utility, if any."""
        prep_np, it_np = self.on_numpy()
        polished = polish.polish(prep_np, it_np, p, r)
        if polished is None:
            return None
        self.polishes += polished.steps
        return _utility(prep_np, polished.throughput), polished

    def on_numpy(self) -> tuple[_Prepared, _Iterate]:
        """The problem and the current responses as numpy arrays (themselves on numpy)."""
        prep = self.prep
        if prep.b.name == "numpy":
            return prep, self.it
        if self.numpy_prep is None:
            self.numpy_prep = _prep_on_numpy(prep)
        return self.numpy_prep, _iterate_on_numpy(prep.b, self.it)

    def _averaged(self, primal: float, scale: FloatArray) -> tuple[float, FloatArray]:
        """The better of the scaled response and the scaled running average of responses.

        With few jobs, g is far from smooth: near p* whole jobs flip between types, so the
        response overshoots some type and column scaling wastes capacity. Averaging the
        responses of successive iterates (weights ½, ¼, …, recent first) splits those jobs, as
        in ergodic primal recovery for dual subgradient methods. Both candidates are feasible.
        """
        prep = self.prep
        X = _dense(prep.b, self.it, prep.n, prep.m)
        self.average = X if self.average is None else 0.5 * (self.average + X)
        D = prep.D[:, None] if prep.D.ndim == 1 else prep.D
        best, best_X = primal, X * scale[None, :]
        for Y in (best_X, self.average):
            Y = _fill(prep, D, Y * _scales(prep.R, (D * Y).sum(axis=0))[None, :])
            value = _utility(prep, prep.b.asarray((prep.A * Y).sum(axis=1)))
            if value > best:
                best, best_X = value, Y
        return best, best_X


def _fill(prep: _Prepared, D: FloatArray, X: FloatArray) -> FloatArray:
    """Give capacity left after scaling to jobs with idle time (utilities never decrease).

    Near p* jobs that are indifferent between types all pile onto one of them; scaling cuts
    that type while another keeps spare capacity. Type by type (in index order), each job
    with idle time σ_i and throughput there gets σ_i·f of it, f = min(1, spare / demand).
    """
    X = X.copy()
    use = (D * X).sum(axis=0)
    idle = np.maximum(1.0 - X.sum(axis=1), 0.0)
    for j in range(prep.m):
        spare = prep.R[j] - use[j]
        if spare <= 1e-12 * prep.R[j]:
            continue
        want = np.where(prep.A[:, j] > 0, idle, 0.0)
        need = float((D[:, j % D.shape[1]] * want).sum())
        if need <= 0:
            continue
        give = want * min(1.0, spare / need) * (1 - 1e-12)
        X[:, j] += give
        idle -= give
        use[j] += float((D[:, j % D.shape[1]] * give).sum())
    return X


def _dense(b: Backend, it: _Iterate, n: int, m: int, scale: FloatArray | None = None) -> FloatArray:
    """The (n, m) allocation of the responses in ``it`` (solver order), columns scaled.

    Two unmasked scatters: a job's idle "lo" end (type −1) is written first onto its "hi"
    type, which the second scatter then overwrites with the real share (type_hi = −1 only for
    a wholly idle job, whose x are 0). Boolean-masked scatters cost 4× more at n = 1e6. Block
    by block, so that the index temporaries stay in cache instead of faulting in fresh pages.
    """
    type_lo, type_hi = b.to_numpy(it.type_lo), b.to_numpy(it.type_hi)
    return _dense_rows(type_lo, type_hi, b.to_numpy(it.x_hi), m, scale)


def _dense_rows(
    type_lo: Any, type_hi: Any, x_hi: Any, m: int, scale: FloatArray | None
) -> FloatArray:
    """``_dense`` of the responses given as numpy arrays (types, share of "hi")."""
    n = x_hi.shape[0]
    X = np.zeros((n, m))
    flat = X.reshape(-1)
    s_ext = None if scale is None else np.append(scale, 0.0)  # index −1 (idle) reads 0
    block = 65_536
    base = np.arange(0, block * m, m, dtype=np.int64)
    for s in range(0, n, block):
        e = min(n, s + block)
        lo = type_lo[s:e].astype(np.int64)
        hi = np.maximum(type_hi[s:e].astype(np.int64), 0)
        xh = x_hi[s:e]
        xl = (1.0 - xh) * (lo >= 0)  # the "lo" end's share (0: idle), exact as in ``_Iterate``
        if s_ext is not None:
            xl = xl * s_ext[lo]
            xh = xh * s_ext[hi]
        row = base[: e - s] + s * m
        # lo where it is a type, else hi: lo + (hi − lo)·[lo < 0], no branch on a random mask.
        flat[row + lo + (hi - lo) * (lo < 0)] = xl
        flat[row + hi] = xh
    return X


def _known(p: FloatArray | None) -> FloatArray:
    """``p``, which the caller knows is set (at least one iteration ran)."""
    if p is None:  # pragma: no cover - internal invariant
        raise RuntimeError("no iteration ran")
    return p


class _DoneError(Exception):
    """Raised inside the L-BFGS-B objective once the gap or the budget is reached."""


def _objective(run: _Run) -> Callable[[FloatArray], tuple[float, FloatArray]]:
    """g/n and its gradient at p, for the optimisers; raises ``_DoneError`` once ``run.done``."""
    n = run.prep.n

    def fun(p: FloatArray) -> tuple[float, FloatArray]:
        if run.done:
            raise _DoneError
        g, grad = run.step(p)
        if run.done:
            raise _DoneError
        return g / n, grad / n

    return fun


def _minimize() -> Any:
    """scipy's ``minimize``, imported on first use (~0.3 s of CPU, as much as a 10⁶-job solve).

    If this import loads scipy, the BLAS controller is rebuilt so that ``one_blas_thread``
    also sees scipy's own OpenBLAS.
    """
    global _blas
    if "scipy.optimize" not in sys.modules:
        _blas = None
    from scipy.optimize import minimize

    return minimize


def _optimize_loaded() -> bool:
    """Whether scipy.optimize is already imported in this process (its import costs ~0.3 s)."""
    return "scipy.optimize" in sys.modules


def _iterate(run: _Run, p0: FloatArray) -> None:
    """L-BFGS-B on g/n over p ≥ 0, then projected subgradient steps if it stopped early.

    p0 is evaluated first: when its certificate already holds (one evaluation after a sampled
    or warm start) scipy is never imported.
    """
    fun = _objective(run)
    try:
        first: tuple[float, FloatArray] | None = fun(p0)
    except _DoneError:
        return
    start = np.array(p0, dtype=np.float64)

    def cached(p: FloatArray) -> tuple[float, FloatArray]:
        nonlocal first
        if first is not None and np.array_equal(p, start):  # L-BFGS-B starts at p0 again
            value, first = first, None
            return value
        return fun(p)

    minimize = _minimize()
    try:
        with one_blas_thread():
            minimize(
                cached,
                start,
                jac=True,
                method="L-BFGS-B",
                bounds=[(0.0, None)] * run.prep.m,
                options={
                    "maxcor": 10,
                    "maxiter": run.max_iter,
                    "maxfun": run.max_iter,
                    "ftol": 0.0,
                    "gtol": 0.0,
                },
            )
    except _DoneError:
        return
    # Fallback: projected subgradient from the best prices, Polyak step with the best lower
    # bound standing in for the unknown optimum (so the step never undershoots to zero).
    p = _known(run.best_dual_p)
    while not run.done:
        g, grad = run.step(p)
        norm2 = float(grad @ grad)
        if norm2 == 0.0:
            break
        p = np.maximum(p - (g - run.best_primal) / norm2 * grad, 0.0)


def _check_options(eps: float, max_iter: int, warm: Any, m: int) -> FloatArray | None:
    if not (math.isfinite(eps) and eps > 0):
        raise InvalidProblem(f"eps must be finite and > 0, got {eps!r}", field="eps")
    if max_iter < 1:
        raise InvalidProblem(f"max_iter must be ≥ 1, got {max_iter!r}", field="max_iter")
    if warm is None:
        return None
    w = np.array(warm, dtype=np.float64)
    if w.shape != (m,):
        raise InvalidProblem(
            f"warm_prices must have shape ({m},), got {w.shape}", field="warm_prices"
        )
    for j in range(m):
        if not (math.isfinite(w[j]) and w[j] >= 0):
            raise InvalidProblem(
                f"warm price of type {j} must be finite and ≥ 0, got {w[j]!r}",
                field="warm_prices",
                index=j,
            )
    return w


def _new_iterate(b: Backend, n: int) -> _Iterate:
    # numpy's subproblem works with int8 type indices (``subproblem.sort_rows``); storing
    # them as int8 saves a conversion and 14 MB per million jobs.
    small = b.name == "numpy"
    return _Iterate(
        type_lo=np.empty(n, dtype=np.int8) if small else b.empty(n, integer=True),
        type_hi=np.empty(n, dtype=np.int8) if small else b.empty(n, integer=True),
        x_hi=b.empty(n),
        y_lo=b.empty(n),
        y_hi=b.empty(n),
    )


def _prep_on_numpy(prep: _Prepared) -> _Prepared:
    """A torch problem's groups as numpy arrays (views on the CPU, copies from a GPU)."""
    b, np_b = prep.b, get_backend("numpy")

    def host(x: Any) -> Any:
        return None if x is None else b.to_numpy(x)

    groups = tuple(
        replace(
            g,
            As=host(g.As),
            Ts=host(g.Ts),
            Ds=host(g.Ds),
            d=host(g.d),
            par=Params(
                host(g.par.weight),
                host(g.par.target),
                host(g.par.alpha),
                g.par.common_weight,
            ),
            ties={k: host(v) for k, v in g.ties.items()},
            odd=host(g.odd),
        )
        for g in prep.groups
    )
    return replace(prep, b=np_b, groups=groups)


def _iterate_on_numpy(b: Backend, it: _Iterate) -> _Iterate:
    """The responses of ``it`` as numpy arrays (views on the CPU, copies from a GPU)."""
    return _Iterate(*(b.to_numpy(x) for x in (it.type_lo, it.type_hi, it.x_hi, it.y_lo, it.y_hi)))


def _coarse_prices(
    prep: _Prepared, eps: float, max_iter: int, sizes: tuple[int, ...] = COARSE_SAMPLES
) -> tuple[FloatArray, int, bfgs.State | None]:
    """Prices of a stride sample of ``sizes[0]`` jobs with capacity scaled to match.

    Its start prices come from a smaller sample (``sizes[1:]``), the smallest from eq. (17).
    Returns the prices, the iterations spent on all samples and the BFGS state (smooth kinds).
    Non-smooth kinds (linear, target) solve one sample to eps: their first full evaluation is
    not polished, so finer sample prices buy nothing.
    """
    smooth = all(g.util.smooth for g in prep.groups)
    if not smooth:
        sizes = sizes[:1]
    stride = math.ceil(prep.n / sizes[0])
    idx = np.arange(0, prep.n, stride)
    sub = _prepare(
        prep.b,
        prep.A[idx],
        prep.D[idx],
        prep.codes[idx],
        prep.weight[idx],
        prep.target[idx],
        prep.alpha[idx],
        prep.R * (len(idx) / prep.n),
        None,
    )
    inner, state = 0, None
    if len(sizes) > 1 and sub.n > 2 * sizes[1]:
        p, inner, state = _coarse_prices(sub, eps, max_iter, sizes[1:])
    else:
        p = _start_prices(sub)
    # The sample's gap bounds how far its g(p) is above its optimum; the full problem's first
    # evaluation needs p close to p*, not a good allocation of the sample: a tenth of eps for
    # the largest sample. A smaller one only starts the next (its sampling noise is larger).
    # A kinked g (linear, target): scipy's L-BFGS-B reaches the sample's gap in fewer
    # evaluations, so once its import is paid (an earlier solve, or the caller) it is used; a
    # fresh process (``walras solve``) gets the weak Wolfe BFGS instead of a ~0.3 s import.
    lbfgsb = not smooth and _optimize_loaded()
    if lbfgsb:
        factor = 1.0
    elif not smooth:
        factor = KINKED_EPS_FACTOR
    else:
        factor = COARSE_EPS_FACTOR if sizes == COARSE_SAMPLES else 1.0
    run = _Run(sub, _new_iterate(prep.b, sub.n), factor * eps * sub.n, max_iter, not smooth)
    if lbfgsb:
        _iterate(run, p)
        return _known(run.best_dual_p), inner + len(run.history), None
    # Projected BFGS without importing scipy.optimize; a smooth g (log, α-fair) starts with the
    # smaller sample's curvature (g/n of either sample estimates the same function), a kinked
    # one needs the weak Wolfe line search.
    state = bfgs.State(p, None if state is None else state.H)
    with suppress(_DoneError):
        bfgs.minimize_nonneg(
            _objective(run), state, max_iter, curvature=None if smooth else WOLFE_CURVATURE
        )
    return _known(run.best_dual_p), inner + len(run.history), state if smooth else None


def solve(
    problem: PricingProblem,
    *,
    eps: float = 1e-3,
    max_iter: int = 100,
    backend: str = "auto",
    device: str | None = None,
    warm_prices: Any = None,
    strict: bool = True,
) -> PricingResult:
    """Maximise Σ u_i(a_i^T x_i) by price discovery; see the module docstring.

    Raises ``InvalidProblem`` naming the job or type for malformed input. With ``strict=False``
    a type whose demand d_ij exceeds its capacity R_j is masked for that job (a_ij treated as 0)
    instead of raising.
    """
    t_start = time.perf_counter()
    warm = _check_options(eps, max_iter, warm_prices, problem.m)
    b = get_backend(backend, device)
    # One BLAS thread: idle OpenBLAS workers spinning after each L-BFGS-B step would take the
    # CPU from the kernels (``one_blas_thread``).
    with one_blas_thread(), np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        prep = _from_problem(problem, b, strict=strict)
        it = _new_iterate(b, prep.n)
        t_setup = time.perf_counter()
        coarse_iters = 0
        if warm is not None:
            p0 = warm
        elif prep.n >= COARSE_MIN_JOBS:
            p0, coarse_iters, _ = _coarse_prices(prep, eps, max_iter)
        else:
            p0 = _start_prices(prep)
        t_start_prices = time.perf_counter()
        run = _Run(prep, it, eps * prep.n, max_iter, polish_first=warm is None and coarse_iters > 0)
        _iterate(run, p0)
        t_iter = time.perf_counter()
        result = _finish(run)
    t_end = time.perf_counter()
    timings = {
        "setup": t_setup - t_start,
        "start_prices": t_start_prices - t_setup,
        "subproblems": run.t_sub,
        "recovery": run.t_rec,
        "price_updates": (t_iter - t_start_prices) - run.t_sub - run.t_rec,
        "allocation": t_end - t_iter,
        "total": t_end - t_start,
        "coarse_iterations": float(coarse_iters),
        "polish_steps": float(run.polishes),
    }
    return PricingResult(**{**result, "timings": timings})


def _finish(run: _Run) -> dict[str, Any]:
    """The result fields of the best iterates, in the caller's job order."""
    prep = run.prep
    b = prep.b
    if run.best_alloc is not None:
        X = run.best_alloc
        t = (prep.A * X).sum(axis=1)
    else:
        if run.best_primal_k != len(run.history) - 1:
            # The best lower bound came from an earlier iterate: recompute its responses.
            _, r = _evaluate(prep, _known(run.best_primal_p), run.it)
        else:
            r = _known(run.last_r)
        pol = run.best_polished
        scale = _scales(prep.R, r) if pol is None else pol.scale
        type_lo, type_hi, x_hi = (
            b.to_numpy(x) for x in (run.it.type_lo, run.it.type_hi, run.it.x_hi)
        )
        if pol is None:
            t = np.asarray(b.to_numpy(_recovered_t(prep, run.it, scale)), dtype=np.float64)
        else:
            # The polished jobs' edges and shares replace their responses (the solve is over:
            # the iterate's buffers, or their host copies, are free to take them), so that one
            # pass writes every job's row, all scaled alike.
            type_lo[pol.rows] = pol.lo
            type_hi[pol.rows] = pol.hi
            x_hi[pol.rows] = pol.x_hi
            t = pol.throughput
            # Nothing reads the responses' throughputs now: 16 MB at n = 10⁶ freed before the
            # 32 MB result is allocated (the solve's peak of memory).
            run.it.y_lo = run.it.y_hi = None
        X = _dense_rows(type_lo, type_hi, x_hi, prep.m, None if np.all(scale >= 1.0) else scale)
    if prep.job_order is not None:
        X_out, t_out = np.empty_like(X), np.empty_like(t)
        X_out[prep.job_order], t_out[prep.job_order] = X, t
        X, t = X_out, t_out
    X.setflags(write=False)
    t.setflags(write=False)
    prices = _known(run.best_dual_p).copy()
    prices.setflags(write=False)
    return {
        "allocation": X,
        "prices": prices,
        "throughput": t,
        "utility": run.best_primal,
        "dual_bound": run.best_dual,
        "gap": run.gap,
        "iterations": len(run.history),
        "converged": run.gap <= run.eps_n,
        "backend": f"{b.name}:{b.device}",
        "history": tuple(run.history),
    }


def best_response(problem: PricingProblem, prices: Any) -> FloatArray:
    """Each job's subproblem maximiser at ``prices`` (n, m), before any feasibility scaling.

    Types whose demand exceeds their capacity are masked (as with ``strict=False``).
    """
    p = _known(_check_options(1e-3, 1, prices, problem.m))
    b = get_backend("numpy")
    with one_blas_thread(), np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        prep = _from_problem(problem, b, strict=False)
        it = _new_iterate(b, prep.n)
        _evaluate(prep, p, it)
    X = _dense(b, it, prep.n, prep.m)
    if prep.job_order is not None:
        out = np.empty_like(X)
        out[prep.job_order] = X
        X = out
    return X

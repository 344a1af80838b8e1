"""The price-discovery problem and its input validation.

The problem of "Allocation of fungible resources via a fast, scalable price discovery method"
(Agrawal, Boyd et al.), §2, with per-job demands and utility kinds:

    maximize    Σ_i u_i(a_i^T x_i)
    subject to  x_i ≥ 0,  1^T x_i ≤ 1,  Σ_i d_i ⊙ x_i ≤ R

``PricingProblem`` holds the data (throughput ``a`` (n, m), capacity ``R`` (m,), demand ``d``
(n,) or (n, m), utility kind and parameters per job). Construction checks only what concerns the
whole problem (shapes, kinds, capacity); per-job defects are reported by ``screen_jobs`` so that
the operator can drop the offending jobs and solve the rest. ``solver.solve`` calls
``check_jobs`` and raises ``InvalidProblem`` naming the first bad job.

Example: two jobs, two GPU types, log utility::

    PricingProblem(throughput=[[1.0, 2.0], [1.0, 0.5]], capacity=[1.0, 1.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

KINDS = ("linear", "log", "alpha", "target")
TINY_THROUGHPUT = 1e-100

FloatArray = npt.NDArray[np.float64]


def _constant(value: float, n: int) -> FloatArray:
    """A read-only (n,) array of ``value`` that holds one number (stride 0).

    Why: a default demand, weight, target or exponent is the same for every job; four
    materialised (n,) arrays are 32 MB of fresh pages at n = 10⁶ that the kernel must zero and
    the checks must read (~15 ms of a 0.3 s solve). Indexing or slicing it gives ordinary arrays.
    """
    return np.broadcast_to(np.float64(value), (n,))  # broadcasts are read-only


@dataclass(frozen=True)
class JobIssue:
    """A per-job defect that ``solve`` would reject (``screen_jobs`` reports them)."""

    index: int
    field: str
    reason: str


def _readonly(x: Any) -> Any:
    """x as a read-only float64 C-contiguous array, copied unless it already is one.

    An array the caller cannot write through (read-only, owning its data or a view of read-only
    memory) is shared as is: at n = 1e6 the copies cost more than a whole solver iteration.
    """
    if (
        isinstance(x, np.ndarray)
        and x.dtype == np.float64
        and x.flags.c_contiguous
        and not x.flags.writeable
        and (x.base is None or not getattr(x.base, "flags", x.flags).writeable)
    ):
        return x
    arr = np.array(x, dtype=np.float64, copy=True)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class PricingProblem:
    """Immutable problem data; arrays become read-only float64 on construction.

    They are copied unless the caller's array already is read-only float64 C-contiguous memory
    (then it is shared: nobody can change it, and at n = 1e6 the copies cost more than a solver
    iteration).

    ``kind`` is one name for all jobs or one per job (``"linear"``, ``"log"``, ``"alpha"`` for the
    α-fair/power utility ``w t^(1−α)/(1−α)``, ``"target"`` for ``w min(t − T, 0)``).
    ``alpha`` is the α-fair exponent (scalar or per job), used only by ``"alpha"`` jobs.
    """

    throughput: Any
    capacity: Any
    demand: Any = None
    kind: str | Sequence[str] = "log"
    weight: Any = None
    target: Any = None
    alpha: Any = 2.0
    gang_capacity: Any = None
    kind_codes: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            A = _readonly(self.throughput)
            R = _readonly(self.capacity)
        except (TypeError, ValueError) as exc:
            raise InvalidProblem(f"throughput/capacity are not numeric arrays: {exc}") from exc
        if A.ndim != 2:
            raise InvalidProblem(
                f"throughput must be a 2-D (jobs × types) array, got shape {A.shape}",
                field="throughput",
            )
        n, m = A.shape
        if n == 0:
            raise InvalidProblem("the problem has no jobs", field="throughput")
        if m == 0:
            raise InvalidProblem("the problem has no resource types", field="capacity")
        if R.shape != (m,):
            raise InvalidProblem(
                f"capacity must have shape ({m},) to match throughput, got {R.shape}",
                field="capacity",
            )
        for j in range(m):
            if not np.isfinite(R[j]) or R[j] <= 0:
                raise InvalidProblem(
                    f"capacity of type {j} must be finite and > 0, got {R[j]!r}",
                    field="capacity",
                    index=j,
                )
        object.__setattr__(self, "throughput", A)
        object.__setattr__(self, "capacity", R)

        if self.demand is None:
            d = _constant(1.0, n)
        else:
            d = _readonly(self.demand)
            if d.shape not in ((n,), (n, m)):
                raise InvalidProblem(
                    f"demand must have shape ({n},) or ({n}, {m}), got {d.shape}", field="demand"
                )
        object.__setattr__(self, "demand", d)
        if self.gang_capacity is None:
            gang = R
        else:
            gang = _readonly(self.gang_capacity)
            if gang.shape != (m,):
                raise InvalidProblem(
                    f"gang_capacity must have shape ({m},), got {gang.shape}", field="gang_capacity"
                )
        object.__setattr__(self, "gang_capacity", gang)

        codes = _kind_codes(self.kind, n)
        codes.setflags(write=False)
        object.__setattr__(self, "kind_codes", codes)
        if isinstance(self.kind, str):
            kind_value: str | tuple[str, ...] = self.kind
        else:
            kind_value = tuple(self.kind)
        object.__setattr__(self, "kind", kind_value)

        object.__setattr__(self, "weight", self._per_job(self.weight, 1.0, "weight"))
        uses_target = bool(np.any(codes == KINDS.index("target")))
        if self.target is None and uses_target:
            raise InvalidProblem("target-priority jobs need a target", field="target")
        object.__setattr__(self, "target", self._per_job(self.target, 0.0, "target"))
        object.__setattr__(self, "alpha", self._per_job(self.alpha, 2.0, "alpha"))

    def _per_job(self, value: Any, default: float, name: str) -> FloatArray:
        n = self.n
        if value is None:
            arr = _constant(default, n)
        else:
            arr = _readonly(value)
            if arr.ndim == 0:
                arr = _constant(float(arr), n)
        if arr.shape != (n,):
            raise InvalidProblem(f"{name} must be a scalar or have shape ({n},), got {arr.shape}")
        arr.setflags(write=False)
        return arr

    @property
    def n(self) -> int:
        """Number of jobs."""
        return int(self.throughput.shape[0])

    @property
    def m(self) -> int:
        """Number of resource types."""
        return int(self.throughput.shape[1])

    def demand_matrix(self) -> FloatArray:
        """Demand as an (n, m) array (a per-job scalar is repeated across types)."""
        d = np.asarray(self.demand)
        if d.ndim == 1:
            return np.repeat(d[:, None], self.m, axis=1)
        return d

    def kinds(self) -> tuple[str, ...]:
        """The utility kind of every job."""
        return tuple(KINDS[c] for c in self.kind_codes)

    def subset(self, keep: Any, *, capacity: Any = None) -> PricingProblem:
        """The problem restricted to the jobs ``keep`` (indices or a boolean mask).

        The operator uses it after ``screen_jobs``; the solver uses it (with ``capacity``
        scaled) to compute start prices on a sample of a very large problem.
        """
        idx = np.arange(self.n)[np.asarray(keep)]
        kinds: str | list[str]
        kinds = self.kind if isinstance(self.kind, str) else [self.kind[int(i)] for i in idx]
        return PricingProblem(
            throughput=self.throughput[idx],
            capacity=self.capacity if capacity is None else capacity,
            demand=np.asarray(self.demand)[idx],
            kind=kinds,
            weight=self.weight[idx],
            target=self.target[idx],
            alpha=self.alpha[idx],
            gang_capacity=self.gang_capacity if capacity is None else None,
        )


def _kind_codes(kind: str | Sequence[str], n: int) -> npt.NDArray[np.int8]:
    """KINDS index of every job's utility (one name for all jobs, or one per job)."""
    if isinstance(kind, str):
        if kind not in KINDS:
            raise InvalidProblem(
                f"job 0: unknown utility kind {kind!r} (expected one of {', '.join(KINDS)})",
                field="kind",
                index=0,
            )
        return np.full(n, KINDS.index(kind), dtype=np.int8)
    kinds = list(kind)
    if len(kinds) != n:
        raise InvalidProblem(f"kind must name one utility or {n}, got {len(kinds)}", field="kind")
    # One dictionary look-up per distinct name, then a vectorised mapping (n may be 1e6).
    names, inverse = np.unique(np.asarray(kinds, dtype=object).astype(str), return_inverse=True)
    known = np.array([k in KINDS for k in names.tolist()], dtype=bool)
    inverse = inverse.reshape(-1)
    if not known.all():
        i = int(np.flatnonzero(~known[inverse])[0])
        raise InvalidProblem(
            f"job {i}: unknown utility kind {kinds[i]!r} (expected one of {', '.join(KINDS)})",
            field="kind",
            index=i,
        )
    table = np.array([KINDS.index(k) for k in names.tolist()], dtype=np.int8)
    return table[inverse]


def fits_everywhere(problem: PricingProblem) -> bool:
    """Every job's demand fits every type's capacity (the common case: no masking needed)."""
    D = np.asarray(problem.demand)
    dmax = D.max(axis=0) if D.ndim == 2 else np.full(problem.m, D.max())
    return bool((dmax <= np.asarray(problem.gang_capacity)).all())


def usable(problem: PricingProblem, *, strict: bool) -> npt.NDArray[np.bool_]:
    """(n, m) mask of types each job may use: throughput > 0 and (unless strict) d_ij ≤ R_j
    (``gang_capacity`` where given: the GPUs a gang may span when a column is a share of a
    larger pool, ``walras.allocator.quotas``)."""
    A = np.asarray(problem.throughput)
    ok = A > 0
    if not strict:
        ok &= problem.demand_matrix() <= np.asarray(problem.gang_capacity)[None, :]
    return ok


def _first_bad(mask: npt.NDArray[np.bool_]) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)]


def _failing(x: FloatArray, ok: Any) -> npt.NDArray[np.bool_]:
    """Mask of the jobs whose value fails ``ok``; one test for a constant (stride-0) array."""
    if x.ndim == 1 and x.strides == (0,) and x.size > 0:
        return np.broadcast_to(~ok(x[:1]), x.shape)
    return np.asarray(~ok(x))


def _is_kind(codes: npt.NDArray[np.int8], kind: str) -> npt.NDArray[np.bool_] | None:
    """Mask of the jobs of ``kind``, or None when there is none (their checks are skipped)."""
    mask = codes == KINDS.index(kind)
    return mask if mask.any() else None


def screen_jobs(problem: PricingProblem) -> tuple[JobIssue, ...]:
    """Every per-job defect ``solve(problem, strict=False)`` would reject, sorted by job.

    Defects: NaN/inf, negative or tiny (0 < a < 1e-100) throughput; non-positive or non-finite
    demand, weight or target; α ≤ 0 or α = 1 for α-fair jobs; a job whose demand exceeds the
    capacity of every type it has throughput on (it can never run); a log/α-fair (α ≥ 1) job with
    zero throughput on every
    usable type (its utility would be −∞).
    """
    A = np.asarray(problem.throughput)
    R = np.asarray(problem.gang_capacity)
    D = np.asarray(problem.demand)
    D2 = D[:, None] if D.ndim == 1 else D
    n = problem.n
    issues: list[JobIssue] = []
    none = np.zeros(n, dtype=bool)
    with np.errstate(invalid="ignore"):
        # Whole-array checks first: per-row work only when something is wrong (fast at n = 1e7).
        # min/max propagate NaN, so two reductions (no temporaries) settle the common case.
        a_lo, a_hi = float(A.min()), float(A.max())
        a_ok = math.isfinite(a_lo) and math.isfinite(a_hi) and a_lo >= 0
        bad_a = none if a_ok or np.isfinite(A).all() else ~np.isfinite(A).all(axis=1)
        neg_a = none if a_ok or (A >= 0).all() else ~bad_a & (A < 0).any(axis=1)
        d_lo, d_hi = float(D2.min()), float(D2.max())
        if math.isfinite(d_lo) and math.isfinite(d_hi) and d_lo > 0:
            bad_d = none
        else:
            good_d = np.isfinite(D2) & (D2 > 0)
            bad_d = none if good_d.all() else ~good_d.all(axis=1)
        issues += [
            JobIssue(i, "throughput", "throughput contains NaN or inf") for i in _first_bad(bad_a)
        ]
        issues += [JobIssue(i, "throughput", "throughput is negative") for i in _first_bad(neg_a)]
        # log t of a denormal throughput underflows to −∞; nothing real is that small.
        if a_ok and a_lo >= TINY_THROUGHPUT:
            tiny_a = none
        else:
            tiny = (A > 0) & (A < TINY_THROUGHPUT)
            tiny_a = none if not tiny.any() else ~bad_a & tiny.any(axis=1)
        issues += [
            JobIssue(i, "throughput", f"positive throughput below {TINY_THROUGHPUT:g}")
            for i in _first_bad(tiny_a)
        ]
        issues += [
            JobIssue(i, "demand", "demand must be finite and > 0") for i in _first_bad(bad_d)
        ]
        w = np.asarray(problem.weight)
        issues += [
            JobIssue(i, "weight", "weight must be finite and > 0")
            for i in _first_bad(_failing(w, lambda x: np.isfinite(x) & (x > 0)))
        ]
        codes = np.asarray(problem.kind_codes)
        tgt = np.asarray(problem.target)
        is_target = _is_kind(codes, "target")
        if is_target is not None:
            issues += [
                JobIssue(i, "target", "target must be finite and ≥ 0")
                for i in _first_bad(is_target & ~(np.isfinite(tgt) & (tgt >= 0)))
            ]
        al = np.asarray(problem.alpha)
        is_alpha = _is_kind(codes, "alpha")
        if is_alpha is not None:
            issues += [
                JobIssue(i, "alpha", "alpha must be finite, > 0 and ≠ 1 (use kind='log')")
                for i in _first_bad(is_alpha & ~(np.isfinite(al) & (al > 0) & (al != 1)))
            ]
        if a_ok and a_lo > 0:
            has_a = ~none
        else:
            has_a = np.zeros(n, dtype=bool)
            for j in range(problem.m):  # column by column: faster than a reduction along rows
                has_a |= A[:, j] > 0
        d_max = D2.max(axis=0) if bad_d is none else np.where(np.isfinite(D2), D2, 0.0).max(axis=0)
        over = bool((d_max > R).any())
        all_have_a = bool(has_a.all())
        # The common case (every demand fits, every job has throughput) needs no per-job mask.
        clean = ~(bad_a | neg_a | bad_d | tiny_a) if over or not all_have_a else none
        if over:
            fits = (usable(problem, strict=False) & clean[:, None]).any(axis=1)
            issues += [
                JobIssue(
                    i,
                    "demand",
                    "demand exceeds the capacity of every type the job has throughput on",
                )
                for i in _first_bad(clean & has_a & ~fits)
            ]
        if not all_have_a:  # else no log job can be stuck at −∞
            needs_t = codes == KINDS.index("log")
            if is_alpha is not None:
                needs_t |= is_alpha & (al >= 1)
            issues += [
                JobIssue(
                    i,
                    "throughput",
                    "zero throughput on every type; log/α-fair (α ≥ 1) "
                    "utility needs positive throughput",
                )
                for i in _first_bad(clean & needs_t & ~has_a)
            ]
    issues.sort(key=lambda x: (x.index, x.field))
    return tuple(issues)


def check_jobs(problem: PricingProblem, *, strict: bool) -> None:
    """Raise ``InvalidProblem`` for the first per-job defect (and, if strict, d_ij > R_j)."""
    issues = screen_jobs(problem)
    if issues:
        first = issues[0]
        more = f" (and {len(issues) - 1} more job issues)" if len(issues) > 1 else ""
        raise InvalidProblem(
            f"job {first.index}: {first.reason}{more}", field=first.field, index=first.index
        )
    if strict and not fits_everywhere(problem):
        A = np.asarray(problem.throughput)
        over = (problem.demand_matrix() > np.asarray(problem.gang_capacity)[None, :]) & (A > 0)
        if over.any():
            i, j = (int(v) for v in np.argwhere(over)[0])
            raise InvalidProblem(
                f"job {i}: demand {problem.demand_matrix()[i, j]:g} exceeds the capacity "
                f"{problem.gang_capacity[j]:g} of type {j} (pass strict=False to mask that type)",
                field="demand",
                index=i,
            )

"""Fill in the (job, GPU type) throughputs nobody declared or measured; say where each came from.

Input: a ``(n_jobs, n_types)`` matrix with NaN where nothing is known, per-entry sample counts
(``> 0``: measured, that many progress samples; ``0``: declared), optional group labels (same
``spec.profile`` or image) and optional per-type admin defaults. Output: a
:class:`~walras.allocator.estimate.result.ThroughputEstimate`.

Rules, per missing entry ``(j, t)`` (:class:`~walras.allocator.estimate.result.Source`):

1. job ``j`` has a positive known value on some type and type ``t`` has one for some job:
   ``exp(a_j + b_t + u_j·v_t)`` from the low-rank fit (:mod:`.als`) → ``estimated-own``;
2. job ``j`` has none, but jobs of its group do: ``exp(ā_g + b_t + ū_g·v_t)`` →
   ``estimated-similar``;
3. otherwise the type's default, if the admin set one → ``default``;
4. otherwise NaN → ``unknown``.

Known entries are returned unchanged. A known zero means "cannot run there" (e.g. a gang that does
not fit); it stays zero and is left out of the fit (its log is −∞).

**Why log space.** Throughputs are multiplicative: a job's throughput on a type is roughly its
own speed times the type's speed-up (Gavel's table: a V100 is 2–10× a K80 depending on the model,
and models differ by 1000× in steps per second). In logs this is additive, so one bias per job and
one per type explain most of the matrix, errors are relative (10 % off a slow job weighs as much
as 10 % off a fast one), and every estimate ``exp(·)`` is positive.

**Weights.** An entry's weight is its sample count (1 for a declared value): the mean of ``k``
independent samples has ``1/k`` of one sample's variance, so it counts ``k`` times in the fit.

Worked example: see :mod:`.als` (a job twice as fast as another on a K80 is estimated twice as
fast on a V100).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem
from walras.allocator.estimate import als
from walras.allocator.estimate.result import FloatArray, Source, ThroughputEstimate

DEFAULT_RANK = 1
"""Interaction factors beyond the job and type biases. One is enough for GPU types that differ
mainly in one direction (compute vs memory bound); the ridge keeps it harmless where data are few.
"""
DEFAULT_RIDGE = 1.0
"""``λ``: the interaction prior weighs like one observation, so one declared value cannot set it."""
DEFAULT_GROUP_WEIGHT = 1.0
"""``γ``: a group's mean speed counts as one observation of each member's speed."""
DEFAULT_TOL = 1e-4
"""Stop when no fitted log-throughput moves by more than 1e-4 (0.01 %) in a sweep: far below any
measurement's noise. ALS converges linearly, and on a few hundred jobs with measurements a 1e-6
stop takes ~500 sweeps (~0.3 s) where 1e-4 takes ~200; pass a smaller ``tol`` for exact tests."""


def estimate_throughputs(
    values: npt.ArrayLike,
    samples: npt.ArrayLike | None = None,
    *,
    groups: Sequence[Hashable | None] | None = None,
    defaults: npt.ArrayLike | None = None,
    job_names: Sequence[str] | None = None,
    type_names: Sequence[str] | None = None,
    rank: int = DEFAULT_RANK,
    ridge: float = DEFAULT_RIDGE,
    group_weight: float = DEFAULT_GROUP_WEIGHT,
    max_iter: int = 500,
    tol: float = DEFAULT_TOL,
) -> ThroughputEstimate:
    """Estimate every missing throughput (see the module docstring).

    Args:
        values: ``(n_jobs, n_types)`` steps/s; NaN = unknown; known entries finite and ≥ 0.
        samples: same shape, integer counts ≥ 0 (default all 0: every known value declared); a
            positive count on a NaN entry is an error.
        groups: per job, a label (jobs with equal labels are similar) or None.
        defaults: per type, the admin's default steps/s (> 0) or NaN for none.
        job_names, type_names: used in error messages only.
        rank, ridge, group_weight: ``r``, ``λ``, ``γ`` of :mod:`.als`.
        max_iter, tol: alternating-least-squares sweeps and the stopping step (in log units).

    Raises:
        InvalidProblem: naming the job and type (or the option) that is wrong.
    """
    t = _matrix(values, "values")
    n, m = t.shape
    jobs = _names(job_names, n, "job", "job_names")
    types = _names(type_names, m, "type", "type_names")
    bad = ~np.isnan(t) & ~((t >= 0) & np.isfinite(t))
    if bad.any():
        j, c = (int(x) for x in np.argwhere(bad)[0])
        raise InvalidProblem(
            f"throughput of job {jobs[j]} on GPU type {types[c]} must be a finite number >= 0 "
            f"or NaN (unknown), got {t[j, c]!r}",
            field="values",
            index=j,
        )
    s = _samples(samples, t, jobs, types)
    d = _defaults(defaults, m, types)
    group, n_groups = _groups(groups, n)
    _options(rank, ridge, group_weight, max_iter, tol)

    known = ~np.isnan(t)
    positive = known & (np.nan_to_num(t) > 0)
    weights = np.where(positive, np.maximum(s, 1.0), 0.0)
    logs = np.log(np.where(positive, t, 1.0))
    fitted = als.fit(
        logs,
        weights,
        group,
        n_groups,
        rank=rank,
        ridge=ridge,
        group_weight=group_weight,
        max_iter=max_iter,
        tol=tol,
    )
    own = np.exp(fitted.predict())
    # Index n_groups is a zero row standing for "no group" (keeps the gathers below in bounds).
    gi = np.where(group >= 0, group, n_groups)
    group_a = np.append(fitted.group_a, 0.0)
    group_u = np.vstack([fitted.group_u, np.zeros((1, rank))])
    group_known = np.append(fitted.group_known, False)
    similar = np.exp(group_a[gi][:, None] + fitted.b[None, :] + group_u[gi] @ fitted.v.T)
    has_similar = group_known[gi] & ~fitted.row_known

    out = t.copy()
    sources: list[tuple[Source, ...]] = []
    for j in range(n):
        row: list[Source] = []
        for c in range(m):
            if known[j, c]:
                row.append(Source.MEASURED if s[j, c] > 0 else Source.DECLARED)
            elif fitted.col_known[c] and fitted.row_known[j]:
                out[j, c] = own[j, c]
                row.append(Source.ESTIMATED_OWN)
            elif fitted.col_known[c] and has_similar[j]:
                out[j, c] = similar[j, c]
                row.append(Source.ESTIMATED_SIMILAR)
            elif not math.isnan(d[c]):
                out[j, c] = d[c]
                row.append(Source.DEFAULT)
            else:
                row.append(Source.UNKNOWN)
        sources.append(tuple(row))
    out.setflags(write=False)
    return ThroughputEstimate(
        values=out,
        sources=tuple(sources),
        iterations=fitted.iterations,
        converged=fitted.converged,
    )


def _matrix(value: npt.ArrayLike, name: str) -> FloatArray:
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidProblem(f"{name} is not numeric: {exc}", field=name) from exc
    if arr.ndim != 2:
        raise InvalidProblem(
            f"{name} must be a (jobs × GPU types) matrix, got shape {arr.shape}", field=name
        )
    return arr


def _names(given: Sequence[str] | None, count: int, prefix: str, name: str) -> tuple[str, ...]:
    if given is None:
        return tuple(f"{prefix} {i}" for i in range(count))
    if len(given) != count:
        raise InvalidProblem(f"{name} has {len(given)} names for {count} {prefix}s", field=name)
    return tuple(str(x) for x in given)


def _samples(
    samples: npt.ArrayLike | None, t: FloatArray, jobs: Sequence[str], types: Sequence[str]
) -> FloatArray:
    if samples is None:
        return np.zeros(t.shape)
    s = _matrix(samples, "samples")
    if s.shape != t.shape:
        raise InvalidProblem(f"samples has shape {s.shape}, values has {t.shape}", field="samples")
    bad = ~(np.isfinite(s) & (s >= 0) & (s == np.round(s)))
    bad |= np.isnan(t) & (np.nan_to_num(s) > 0)
    if bad.any():
        j, c = (int(x) for x in np.argwhere(bad)[0])
        raise InvalidProblem(
            f"samples of job {jobs[j]} on GPU type {types[c]} must be an integer >= 0 (and 0 "
            f"where the throughput is unknown), got {s[j, c]!r}",
            field="samples",
            index=j,
        )
    return s


def _defaults(defaults: npt.ArrayLike | None, m: int, types: Sequence[str]) -> FloatArray:
    if defaults is None:
        return np.full(m, np.nan)
    try:
        d = np.array(defaults, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidProblem(f"defaults is not numeric: {exc}", field="defaults") from exc
    if len(d) != m:
        raise InvalidProblem(f"defaults has {len(d)} values for {m} GPU types", field="defaults")
    bad = ~np.isnan(d) & ~((d > 0) & np.isfinite(d))
    if bad.any():
        c = int(np.argmax(bad))
        raise InvalidProblem(
            f"default throughput of GPU type {types[c]} must be > 0 and finite (or NaN for "
            f"none), got {d[c]!r}",
            field="defaults",
            index=c,
        )
    return d


def _groups(groups: Sequence[Hashable | None] | None, n: int) -> tuple[als.IntArray, int]:
    if groups is None:
        return np.full(n, -1, dtype=np.int64), 0
    if len(groups) != n:
        raise InvalidProblem(f"groups has {len(groups)} labels for {n} jobs", field="groups")
    index: dict[Hashable, int] = {}
    out = np.full(n, -1, dtype=np.int64)
    for j, label in enumerate(groups):
        if label is not None:
            out[j] = index.setdefault(label, len(index))
    return out, len(index)


def _options(rank: int, ridge: float, group_weight: float, max_iter: int, tol: float) -> None:
    checks = (
        ("rank", rank, isinstance(rank, int) and rank >= 0, "an integer >= 0"),
        ("ridge", ridge, math.isfinite(ridge) and ridge > 0, "> 0"),
        ("group_weight", group_weight, math.isfinite(group_weight) and group_weight >= 0, ">= 0"),
        ("max_iter", max_iter, isinstance(max_iter, int) and max_iter >= 1, "an integer >= 1"),
        ("tol", tol, math.isfinite(tol) and tol > 0, "> 0"),
    )
    for name, value, ok, what in checks:
        if not ok:
            raise InvalidProblem(f"{name} must be {what}, got {value!r}", field=name)

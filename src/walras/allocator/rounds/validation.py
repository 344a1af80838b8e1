"""Input checks for the rounds realiser; every error names the job or node that is wrong.

Called by :mod:`walras.allocator.rounds.planner` and :mod:`walras.allocator.rounds.history`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

NEG_TOL = 1e-9
"""Targets in ``[-NEG_TOL, 0)`` are solver noise and count as 0."""

ROW_SUM_TOL = 1e-6
"""A targets row may sum to ``1 + ROW_SUM_TOL`` (solvers stop at a tolerance)."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def float_array(
    value: object, name: str, shape: tuple[int, ...], *, lower: float = 0.0
) -> FloatArray:
    """``value`` as float64 of ``shape``, finite and ``>= lower``; the error names the entry.

    Checked with two reductions (NaN propagates through min/max) rather than boolean temporaries:
    the PS-DSF inputs are (jobs x nodes) and dense.
    """
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise InvalidProblem(f"{name} has shape {arr.shape}, expected {shape}", field=name)
    if arr.size == 0:
        return arr
    lo, hi = float(arr.min()), float(arr.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise error_at(name, ~np.isfinite(arr), "is not finite")
    if lo < lower:
        raise error_at(name, arr < lower, "is negative")
    return arr


def int_array(value: object, name: str, shape: tuple[int, ...], *, lower: int = 0) -> IntArray:
    """``value`` as int64 of ``shape`` (integral floats accepted), ``>= lower``."""
    raw = np.asarray(value)
    if raw.shape != shape:
        raise InvalidProblem(f"{name} has shape {raw.shape}, expected {shape}", field=name)
    if raw.dtype.kind in "iub":
        arr = raw.astype(np.int64, copy=False)
    elif raw.dtype.kind == "f":
        bad = ~np.isfinite(raw) | (raw != np.round(raw))
        if bad.any():
            raise error_at(name, bad, "is not an integer")
        arr = raw.astype(np.int64)
    else:
        raise InvalidProblem(f"{name} must hold integers, got dtype {raw.dtype}", field=name)
    if arr.size and int(arr.min()) < lower:
        what = "is negative" if lower == 0 else f"must be >= {lower}"
        raise error_at(name, arr < lower, what)
    return arr


def error_at(name: str, bad: npt.NDArray[np.bool_], what: str) -> InvalidProblem:
    """An error naming the first offending job/node of array ``name``."""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    where = _describe(name, first)
    return InvalidProblem(f"{where}: {name} {what}", field=name, index=first[0])


def _describe(name: str, index: tuple[int, ...]) -> str:
    if name in ("node_group", "node_free"):
        return f"node {index[0]}"
    if name == "current":
        return f"job {index[0]} on node {index[1]}"
    if len(index) == 2:
        return f"job {index[0]}, group {index[1]}"
    return f"job {index[0]}"


@dataclass(frozen=True, slots=True)
class Problem:
    targets: FloatArray
    received: FloatArray
    elapsed: FloatArray
    replicas: IntArray
    gpus_per_pod: IntArray
    node_group: IntArray
    node_free: IntArray
    current: IntArray | None


def validate(
    targets: object,
    received: object,
    elapsed: object,
    replicas: object,
    gpus_per_pod: object,
    node_group: object,
    node_free: object,
    current: object | None,
) -> Problem:
    t_raw = np.asarray(targets, dtype=np.float64)
    if t_raw.ndim != 2:
        raise InvalidProblem(
            f"targets must be a (jobs, groups) matrix, got shape {t_raw.shape}", field="targets"
        )
    n_jobs, n_groups = t_raw.shape
    t = float_array(t_raw, "targets", (n_jobs, n_groups), lower=-NEG_TOL)
    if t.size and float(t.min()) < 0.0:
        t = np.maximum(t, 0.0)  # solver noise in [-NEG_TOL, 0)
    row = t.sum(axis=1)
    if (row > 1.0 + ROW_SUM_TOL).any():
        j = int(np.argmax(row > 1.0 + ROW_SUM_TOL))
        raise InvalidProblem(
            f"job {j}: targets row sums to {row[j]:.9g} > 1 (a job runs in one group at a time)",
            field="targets",
            index=j,
        )
    rec = float_array(received, "received", (n_jobs, n_groups))
    ela = float_array(elapsed, "elapsed", (n_jobs,))
    rep = int_array(replicas, "replicas", (n_jobs,), lower=1)
    gpp = int_array(gpus_per_pod, "gpus_per_pod", (n_jobs,), lower=1)
    ng_raw = np.asarray(node_group)
    if ng_raw.ndim != 1:
        raise InvalidProblem(
            f"node_group must be a vector, got shape {ng_raw.shape}", field="node_group"
        )
    n_nodes = ng_raw.shape[0]
    ng = int_array(ng_raw, "node_group", (n_nodes,))
    out = ng >= n_groups
    if out.any():
        raise error_at(
            "node_group", out, f"is outside [0, {n_groups}) (targets has {n_groups} groups)"
        )
    free = int_array(node_free, "node_free", (n_nodes,))
    cur: IntArray | None = None
    if current is not None:
        cur = int_array(current, "current", (n_jobs, n_nodes))
    return Problem(t, rec, ela, rep, gpp, ng, free, cur)

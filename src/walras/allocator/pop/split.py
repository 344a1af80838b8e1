"""Capacity split: each shard s gets the share w_s / Σw of every capacity entry, none lost.

For every entry ``c`` of the capacity array (a GPU type's count; for PS-DSF one node's amount
of one resource) and shard weights ``w`` (equal by default: the paper's 1/k):

- **integral** (GPU counts): shard s gets ``⌊c w_s/W⌋`` whole units; the ``L = c − Σ_s ⌊·⌋``
  units left over (``0 ≤ L < k``) go one each to the ``L`` shards with the largest fractional
  part ``c w_s/W − ⌊c w_s/W⌋`` plus the shard's carry (what the entries before this one, in
  flat order, gave it below its exact share, negative if above), ties to the shard with the
  most demand (``demand``), then by rotation: for entry ``e`` (flat index) shard
  ``(e + r) mod k`` comes before ``(e + r + 1) mod k``. The carry keeps each shard's total
  over the entries near its exact total: without it, types with equal counts have equal
  fractions, and a shard whose share is 4.75 GPUs of each of three types got 4 of each (12 for
  14.25; its max-min value in Gavel's packed LP fell 11 %) while others got a unit of every
  type. Each part is the floor or the
  ceiling of its exact share, and the parts are integers, so they sum to ``c`` exactly.
- **fractional** (divisible resources, time fractions): shard s gets ``c w_s/W``; if rounding
  made the parts add up to more than ``c`` (summed with ``math.fsum``), the largest part is
  nudged down by one ulp until they do not, so the merged allocation stays feasible.

Example: 10 GPUs of type 0 and 7 of type 1 over k = 4 equal shards: type 0 gives
(3, 3, 2, 2) (spare units to shards 0, 1), type 1 gives (1, 2, 2, 2) (shards 2, 3 carry 1/2,
then the rotation starts at shard 1 for entry 1).

Called by ``pop.plan`` and by the price-spread repair (which moves capacity between shards and
re-checks the sums with :func:`fit_sum`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem
from walras.allocator.pop.partition import check_k

FloatArray = npt.NDArray[np.float64]


def is_integral(capacity: Any) -> bool:
    """Every entry is a finite whole number (then the split can hand out whole units)."""
    c = np.asarray(capacity, dtype=np.float64)
    return bool(np.all(np.isfinite(c)) and np.all(c == np.round(c)) and np.all(c < 2.0**52))


def _check(capacity: Any, k: int, weights: Any, demand: Any) -> tuple[FloatArray, FloatArray, Any]:
    c = np.array(capacity, dtype=np.float64)
    bad = ~np.isfinite(c) | (c < 0)
    if bad.any():
        e = int(np.flatnonzero(bad.reshape(-1))[0])
        raise InvalidProblem(
            f"capacity entry {e} must be finite and ≥ 0, got {c.reshape(-1)[e]!r}",
            field="capacity",
            index=e,
        )
    w = np.ones(k) if weights is None else np.array(weights, dtype=np.float64)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidProblem(
            f"shard weights must be {k} finite values ≥ 0 with a positive sum", field="weights"
        )
    d = None if demand is None else np.array(demand, dtype=np.float64)
    if d is not None and d.shape != (k,):
        raise InvalidProblem(f"shard demand must have shape ({k},)", field="demand")
    return c, w / w.sum(), d


def split_capacity(
    capacity: Any,
    k: int,
    *,
    weights: Any = None,
    integral: bool | None = None,
    demand: Any = None,
) -> FloatArray:
    """``(k, *capacity.shape)`` shard capacities summing to ``capacity`` (see module docstring).

    Args:
        weights: ``(k,)`` shares (default equal, the paper's 1/k).
        integral: hand out whole units; default: when every entry is a whole number.
        demand: ``(k,)`` tie-break for the spare units (the shard with more demand first).
    """
    k = check_k(k)
    c, share, d = _check(capacity, k, weights, demand)
    if integral is None:
        integral = is_integral(c)
    elif integral and not is_integral(c):
        raise InvalidProblem("integral split needs whole-number capacities", field="capacity")
    flat = c.reshape(-1)
    exact = share[:, None] * flat[None, :]  # (k, E)
    if not integral:
        parts = exact.copy()
        for e in range(flat.size):
            parts[:, e] = fit_sum(parts[:, e], float(flat[e]))
        return parts.reshape((k, *c.shape))
    base = np.floor(exact)
    frac = exact - base
    left = np.rint(flat - base.sum(axis=0)).astype(np.int64)
    dem = np.zeros(k) if d is None else d
    carry = np.zeros(k)
    for e in range(flat.size):
        if left[e] > 0:
            rotation = (np.arange(k) - e) % k
            # Rounded so that float noise in the carry (0.75 − 0.25 vs 0.5) cannot break ties.
            key = np.round(frac[:, e] + carry, 9)
            # lexsort: last key is primary → larger key, then more demand, then rotation.
            order = np.lexsort((rotation, -dem, -key))
            base[order[: left[e]], e] += 1.0
        carry += exact[:, e] - base[:, e]
    return base.reshape((k, *c.shape))


def fit_sum(parts: FloatArray, total: float) -> FloatArray:
    """``parts`` (≥ 0) with the largest nudged down until ``math.fsum(parts) ≤ total``."""
    out = np.maximum(np.asarray(parts, dtype=np.float64), 0.0)
    while math.fsum(out.tolist()) > total:
        j = int(np.argmax(out))
        excess = math.fsum(out.tolist()) - total
        out[j] = max(0.0, min(np.nextafter(out[j], 0.0), out[j] - excess))
    return out

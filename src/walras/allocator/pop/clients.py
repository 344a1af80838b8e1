"""Client splitting for skewed inputs (Narayanan et al. 2021 §3.3, Algorithm 2).

A client whose size (the *splitting attribute*: a job's GPU demand or gang size, a tenant's
weight) is far above the rest would make its shard unlike the others. Before partitioning:

1. put every client's size in a max-heap (ties: smaller UID first, so the result is stable);
2. pop the largest and split it into two halves, each with half the size; push both back;
3. stop after ``⌊t·N⌋`` splits (the paper's threshold ``t``, "typically below 1"), or earlier
   once the largest size is at most ``min_size``.

Virtual client v of client i carries the fraction ``f_v = 2^-depth`` (``Σ_v f_v = 1``) and the
UID ``uid#<bits>`` (``"a#0"``, ``"a#1"``, ``"a#01"``, …), so it hashes to a shard independently
and stably. Each sub-problem gets the virtual client with size ``f_v·size`` and weight
``f_v·weight``; its allocation ``x_v`` (a time share, or tasks) maps back as

    x_i = Σ_v f_v x_v                 (time shares: pricing, Gavel)
    x_i = Σ_v x_v                      (absolute tasks: PS-DSF)

Why this is valid (feasible, never worse than the virtual objective):
- capacity: virtual v uses ``f_v d_i x_v``, so the real job uses ``d_i Σ f_v x_v`` — the same;
  time: ``1^T x_i = Σ f_v 1^T x_v ≤ Σ f_v = 1``;
- separable concave utilities (all four price-discovery kinds): by Jensen
  ``w u(Σ f_v t_v) ≥ Σ_v (f_v w) u(t_v)``, the real job's utility is at least the sum of its
  virtual clients' (equal for linear utility);
- max-min (Gavel's heterogeneity-aware max-min fairness, no space sharing): the real job's
  normalised throughput ``Σ f_v τ_v`` is at least ``min_v τ_v``.

Where it is **not** valid (paper §3.3: clients that interact on a shared resource): Gavel's
space-sharing ("packing") policies, whose variables are job *pairs* — a split job would be
paired with its own halves. The POP wrappers refuse ``client_split > 0`` for them. For PS-DSF
the split is feasible, but Theorem 1/2 then hold for the virtual tenants in each shard, not for
the real tenant, whose VDS is the average of its halves'.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class VirtualClients:
    """The clients after splitting: virtual client v belongs to ``owner[v]`` with ``fraction[v]``.

    Unsplit clients appear once with fraction 1 and their own UID, in their original order;
    the halves of a split client follow in UID order at the position of that client.
    ``uids`` is empty when the caller sharded rows without UIDs (``plan.make_plan``).
    """

    owner: IntArray
    fraction: FloatArray
    uids: tuple[str, ...]
    splits: int

    @property
    def n(self) -> int:
        """Number of virtual clients."""
        return len(self.owner)


def split_clients(
    sizes: Any,
    uids: Sequence[str],
    threshold: float,
    *,
    min_size: float = 0.0,
) -> VirtualClients:
    """Split the largest clients in halves ``⌊threshold·N⌋`` times (see the module docstring)."""
    s = np.asarray(sizes, dtype=np.float64)
    n = len(uids)
    if s.shape != (n,):
        raise InvalidProblem(f"sizes must have shape ({n},), got {s.shape}", field="sizes")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise InvalidProblem(f"client-split threshold must be ≥ 0, got {threshold!r}")
    bad = ~np.isfinite(s) | (s < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidProblem(f"job {i}: size must be finite and ≥ 0", field="sizes", index=i)
    budget = math.floor(threshold * n)
    # Each heap entry: (−size, uid, owner, fraction).
    heap = [(-float(s[i]), uids[i], i, 1.0) for i in range(n)]
    heapq.heapify(heap)
    splits = 0
    while splits < budget and heap and -heap[0][0] > min_size:
        neg, uid, i, f = heapq.heappop(heap)
        for bit in "01":
            heapq.heappush(heap, (neg / 2.0, _child(uid, bit), i, f / 2.0))
        splits += 1
    if splits == 0:
        return VirtualClients(np.arange(n, dtype=np.int64), np.ones(n), tuple(uids), 0)
    rows = sorted(heap, key=lambda e: (e[2], e[1]))
    owner = np.array([e[2] for e in rows], dtype=np.int64)
    fraction = np.array([e[3] for e in rows])
    return VirtualClients(owner, fraction, tuple(e[1] for e in rows), splits)


def _child(uid: str, bit: str) -> str:
    return f"{uid}{bit}" if "#" in uid else f"{uid}#{bit}"


def merge_virtual(
    clients: VirtualClients, allocation: FloatArray, n: int, *, weighted: bool
) -> FloatArray:
    """Real clients' allocation: ``Σ_v f_v x_v`` (``weighted``, time shares) or ``Σ_v x_v``."""
    x = np.asarray(allocation, dtype=np.float64)
    if clients.splits == 0:
        return x
    rows = x * clients.fraction[:, None] if weighted else x
    out = np.zeros((n, *x.shape[1:]))
    np.add.at(out, clients.owner, rows)
    return out

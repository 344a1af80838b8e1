"""Sticky shard assignment: shard(uid) = H(uid) mod k (docs/algorithms.md#pop).

``H`` is the first 8 bytes of BLAKE2b over the UTF-8 bytes of the job/tenant UID, read as an
unsigned big-endian integer. It depends on nothing but the UID (not on Python's per-process salted
``hash``, not on the other jobs, not on their order), so:

- a job keeps its shard across rounds, processes and machines for a fixed ``k``;
- jobs arriving or leaving never move any other job;
- the assignment is uniformly random in effect, which is what POP's analysis assumes.

Example: ``shard_of("default/train-a", 4)`` is the same integer in every run; adding
``"default/train-b"`` to the list leaves it unchanged.

Callers without UIDs (benchmarks, ``walras solve`` on a bare array file) shard rows by
``splitmix64(row) mod k`` (:func:`assign_rows`), vectorised; that is stable only while the
rows keep their order.

Called by ``pop.plan`` (sharded solves) and by the scheduling core (to show a job's shard).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

IntArray = npt.NDArray[np.int64]


def check_k(k: int) -> int:
    """``k`` as an int ≥ 1, else ``InvalidProblem``."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise InvalidProblem(f"shard count k must be an integer ≥ 1, got {k!r}", field="k")
    return int(k)


def uid_hash(uid: str) -> int:
    """64-bit stable hash of ``uid`` (BLAKE2b, 8-byte digest)."""
    digest = hashlib.blake2b(uid.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def shard_of(uid: str, k: int) -> int:
    """The shard of one UID among ``k``."""
    return uid_hash(uid) % check_k(k)


def assign_shards(uids: Sequence[str], k: int) -> IntArray:
    """``(n,)`` shard index of every UID; raises ``InvalidProblem`` on duplicate or empty UIDs."""
    k = check_k(k)
    n = len(uids)
    if len(set(uids)) != n or not all(isinstance(u, str) and u for u in uids):
        _reject(uids)
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    # One C-level pass per UID (about 0.5 µs each): 10⁷ UIDs hash in a few seconds.
    blake = hashlib.blake2b
    return np.fromiter(
        (int.from_bytes(blake(u.encode("utf-8"), digest_size=8).digest(), "big") % k for u in uids),
        dtype=np.int64,
        count=n,
    )


def _reject(uids: Sequence[str]) -> None:
    """Raise for the first empty or repeated UID."""
    seen: dict[str, int] = {}
    for i, uid in enumerate(uids):
        if not isinstance(uid, str) or not uid:
            raise InvalidProblem(f"job {i}: UID must be a non-empty string", field="uids", index=i)
        if uid in seen:
            raise InvalidProblem(
                f"job {i}: UID {uid!r} repeats job {seen[uid]}", field="uids", index=i
            )
        seen[uid] = i


def assign_rows(n: int, k: int) -> IntArray:
    """Shards of rows ``0..n-1`` for callers without UIDs: ``splitmix64(i) mod k``.

    Vectorised (10⁷ rows in well under a second); stable only while the caller's rows are.
    """
    k = check_k(k)
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(k)).astype(np.int64)


def members(assignment: IntArray, k: int) -> tuple[IntArray, ...]:
    """Row indices of each shard, ascending (the order the shard's sub-problem sees them)."""
    order = np.argsort(assignment, kind="stable")
    counts = np.bincount(assignment, minlength=k)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return tuple(order[bounds[s] : bounds[s + 1]].astype(np.int64) for s in range(k))

"""Sticky shard assignment: shard(uid) = H(uid) mod k (paper 001 §3.2, ALGORITHMS.md §4).

``H`` is the first 8 bytes of BLAKE2b over the UTF-8 bytes of the job/tenant UID, read as an
unsigned big-endian integer. It depends on nothing but the UID (not on Python's per-process salted
``hash``, not on the other jobs, not on their order), so:

- a job keeps its shard across rounds, processes and machines for a fixed ``k``;
- jobs arriving or leaving never move any other job;
- the assignment is uniformly random in effect, which is what POP's analysis assumes.

Example: ``shard_of("default/train-a", 4)`` is the same integer in every run; adding
``"default/train-b"`` to the list leaves it unchanged.

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
    seen: dict[str, int] = {}
    out = np.empty(len(uids), dtype=np.int64)
    for i, uid in enumerate(uids):
        if not isinstance(uid, str) or not uid:
            raise InvalidProblem(f"job {i}: UID must be a non-empty string", field="uids", index=i)
        if uid in seen:
            raise InvalidProblem(
                f"job {i}: UID {uid!r} repeats job {seen[uid]}", field="uids", index=i
            )
        seen[uid] = i
        out[i] = 0 if k == 1 else uid_hash(uid) % k
    return out


def members(assignment: IntArray, k: int) -> tuple[IntArray, ...]:
    """Row indices of each shard, ascending (the order the shard's sub-problem sees them)."""
    order = np.argsort(assignment, kind="stable")
    counts = np.bincount(assignment, minlength=k)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return tuple(order[bounds[s] : bounds[s + 1]].astype(np.int64) for s in range(k))


def default_uids(n: int) -> tuple[str, ...]:
    """Positional UIDs ``"0".."n-1"`` for callers without names (stable only while rows are)."""
    return tuple(str(i) for i in range(n))

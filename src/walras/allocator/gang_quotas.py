"""Tenant quotas over whole gangs, for policies that place gangs themselves (Hadar, HadarE).

A gang-placing policy has no fractional problem to add quota rows to: each round it returns
gangs, each holding ``n_kg`` GPUs of type ``g``. With ``h_tg = Σ_{k of t's subtree} n_kg`` and the
carve-out ``c_tg = min(G_tg, f_tg)`` of :mod:`walras.allocator.quotas` (``f_tg``: the GPUs t's jobs
that can use ``g`` and whose gang fits in ``G_tg`` ask for), :func:`repair` turns the policy's
gangs into gangs with

    h_tg ≤ M_tg                         for every tenant t and type g           (maximum)
    h_tg ≥ c_tg  or  no waiting job of t can be placed on g without taking a guarantee
                 away or breaking a maximum                                       (guarantee)

in three steps, each keeping what the steps before established:

1. **Maximums.** The policy's gangs in its order (kept gangs first): a gang that would take a
   tenant on its way up over its maximum of a type is dropped.
2. **Guarantees.** For each pair ``(t, g)`` short of ``c_tg`` (deepest tenants first), t's waiting
   jobs that can use ``g`` and whose gang fits in ``c_tg − h_tg`` (in the policy's order) are
   placed on ``g``: on free GPUs, else by preempting whole gangs of *borrowers*, smallest first.
   A gang may be preempted only if, with the new gang placed, no pair ``(v, g')`` it lowers goes
   below ``min(c_vg', h_vg')`` (nobody loses a guarantee it holds; a sibling under a common
   parent keeps the parent whole) and no maximum is exceeded. A move that cannot free enough is
   not made. Reclaim is therefore the whole-gang preemption the realiser does anyway: a gang is
   stopped (its pods deleted, the workload checkpoints on SIGTERM within its grace period), never
   split.
3. **Backfill** (optional, the policy's own rule): waiting jobs take free GPUs of one type where
   no maximum forbids it. Only free GPUs are used, so no guarantee is lowered.

**The guarantee bound.** When every gang is one GPU and the tenants are flat, step 2 is exact:
if t is short on ``g`` with a waiting job able to use it, then no GPU of ``g`` is free and every
gang there belongs to a tenant at or below its own carve-out, so ``R_g = Σ_u h_ug ≤ h_tg +
Σ_{u≠t} c_ug < Σ_u c_ug ≤ R_g``, a contradiction: t holds ``min(c_tg, what its jobs can use)``.
With larger gangs a borrower may hold ``h_ug > c_ug`` in gangs each larger than its excess
``h_ug − c_ug``; preempting one would take u's guarantee away, so t may stay short while its
waiting gangs do not fit in the free GPUs plus the excess that whole gangs can return (and a gang
of t larger than ``c_tg − h_tg`` waits for the shared pool): the guarantee holds up to gang
granularity. What is always true: a tenant short on ``g`` has no waiting job that fits in both
what it is still owed and the free GPUs of ``g``.

Pure: arrays in, lists out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator import quotas as quota_columns

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class GangUse:
    """One gang of a job: its GPUs per type ``counts (m,)``; ``kept``: it runs there now."""

    job: int
    counts: IntArray
    kept: bool = False


@dataclass(frozen=True, slots=True)
class Repaired:
    """The outcome of :func:`repair`.

    Attributes:
        kept: per input gang, whether it stays.
        added: new gangs, each ``(job, type)`` with ``replicas[job]`` GPUs of that type.
        held: ``(T, m)`` GPUs each tenant's subtree holds after the repair.
        carve: ``(T, m)`` the carve-outs ``c_tg``.
        preempted: input gangs dropped to meet a guarantee (the others not kept broke a maximum).
    """

    kept: tuple[bool, ...]
    added: tuple[tuple[int, int], ...]
    held: FloatArray
    carve: FloatArray
    preempted: tuple[int, ...]


def repair(
    quotas: quota_columns.Quotas,
    gangs: Sequence[GangUse],
    replicas: IntArray,
    usable: BoolArray,
    capacity: IntArray,
    *,
    order: Sequence[int] | None = None,
    backfill: bool = False,
) -> Repaired:
    """Gangs meeting every maximum and every guarantee up to gang granularity (module docstring).

    ``gangs``: the policy's gangs, in its priority order; ``replicas (n,)``: each job's gang
    GPUs; ``usable (n, m)``: job ``i`` can run on type ``g``; ``capacity (m,)``: GPUs per type the
    policy places on (free of foreign use); ``order``: the jobs in the policy's preference (the
    waiting ones are taken in it; default by index).
    """
    n, m = usable.shape
    T = quotas.guaranteed.shape[0]
    anc = quotas.ancestry()
    up = anc[:, quotas.owner].T  # (n, T): tenant u is job i's tenant or an ancestor
    demand = np.where(usable, replicas[:, None], 0).astype(np.float64)
    carve = quota_columns.carve_outs(
        quotas, usable.astype(np.float64), demand, capacity.astype(np.float64)
    )
    held = np.zeros((T, m))
    free = capacity.astype(np.float64).copy()

    def add(i: int, counts: npt.NDArray[np.float64], sign: float) -> None:
        held[up[i]] += sign * counts[None, :]
        free[:] -= sign * counts

    def fits_maximum(i: int, counts: npt.NDArray[np.float64]) -> bool:
        after = held[up[i]] + counts[None, :]
        return bool((after <= quotas.maximum[up[i]] + quota_columns.SLACK).all())

    # 1. Maximums, in the policy's order with kept gangs first.
    kept = [False] * len(gangs)
    for k in sorted(range(len(gangs)), key=lambda k: not gangs[k].kept):
        g = gangs[k]
        counts = g.counts.astype(np.float64)
        if fits_maximum(g.job, counts):
            kept[k] = True
            add(g.job, counts, 1.0)
    placed = {gangs[k].job for k in range(len(gangs)) if kept[k]}
    queue = [int(i) for i in (order if order is not None else range(n))]
    added: list[tuple[int, int]] = []
    preempted: list[int] = []

    # 2. Guarantees, deepest tenants first (a child's guarantee lies inside its parent's), again
    # while a pass places a gang (a preempted job may be the one a pair done earlier could take).
    # Each placement raises Φ = Σ_tg min(h_tg, c_tg) by ≥ 1 GPU and no preemption lowers it, so
    # the passes end.
    depth = anc.sum(axis=0)
    pairs = sorted(zip(*np.nonzero(carve > 0), strict=True), key=lambda p: (-depth[p[0]], p))
    progress = True
    while progress:
        progress = False
        for t, gi in pairs:
            t, gi = int(t), int(gi)
            for i in queue:
                short = carve[t, gi] - held[t, gi]
                if short <= quota_columns.SLACK:
                    break
                if i in placed or not up[i, t] or not usable[i, gi] or replicas[i] > short + 1e-9:
                    continue
                counts = np.zeros(m)
                counts[gi] = float(replicas[i])
                if not fits_maximum(i, counts):
                    continue
                victims = _victims(i, t, gi, counts, gangs, kept, held, free, carve, up)
                if victims is None:
                    continue
                for k in victims:
                    kept[k] = False
                    preempted.append(k)
                    add(gangs[k].job, gangs[k].counts.astype(np.float64), -1.0)
                    placed.discard(gangs[k].job)
                add(i, counts, 1.0)
                placed.add(i)
                added.append((i, gi))
                progress = True

    # 3. Backfill: free GPUs only, one type per gang, the type with the most free GPUs first.
    if backfill:
        for i in queue:
            if i in placed:
                continue
            for gi in np.argsort(-free, kind="stable").tolist():
                counts = np.zeros(m)
                counts[gi] = float(replicas[i])
                if usable[i, gi] and free[gi] >= replicas[i] and fits_maximum(i, counts):
                    add(i, counts, 1.0)
                    placed.add(i)
                    added.append((i, int(gi)))
                    break
    return Repaired(tuple(kept), tuple(added), held.copy(), carve, tuple(preempted))


def _victims(
    i: int,
    t: int,
    gi: int,
    counts: npt.NDArray[np.float64],
    gangs: Sequence[GangUse],
    kept: Sequence[bool],
    held: FloatArray,
    free: FloatArray,
    carve: FloatArray,
    up: BoolArray,
) -> list[int] | None:
    """The gangs to preempt so that job ``i``'s new gang ``counts`` fits on type ``gi``
    (smallest first, each only if no pair it lowers falls below ``min(c, h)``; never a gang of
    tenant ``t``'s own subtree, which would only trade its GPUs), or ``None``."""
    need = counts[gi] - free[gi]
    if need <= 1e-9:
        return []
    after = held.copy()
    after[up[i]] += counts[None, :]
    floor = np.minimum(carve, held)
    chosen: list[int] = []
    candidates = [
        k
        for k in range(len(gangs))
        if kept[k] and gangs[k].counts[gi] > 0 and not up[gangs[k].job, t]
    ]
    candidates.sort(key=lambda k: (int(gangs[k].counts.sum()), gangs[k].kept, k))

    def allowed(trial: FloatArray) -> bool:
        return not bool((trial < floor - quota_columns.SLACK).any())

    def without(base: FloatArray, k: int) -> FloatArray:
        trial = base.copy()
        trial[up[gangs[k].job]] -= gangs[k].counts.astype(np.float64)[None, :]
        return trial

    # One gang that frees enough alone (the smallest): fewest gangs stopped.
    for k in candidates:
        if gangs[k].counts[gi] >= need - 1e-9 and allowed(without(after, k)):
            return [k]
    # Else several, smallest first, each while nobody falls below its floor.
    for k in candidates:
        trial = without(after, k)
        if not allowed(trial):
            continue
        after = trial
        chosen.append(k)
        need -= float(gangs[k].counts[gi])
        if need <= 1e-9:
            return chosen
    return None

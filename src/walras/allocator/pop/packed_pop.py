"""POP around Gavel's max-min fairness with space sharing (``gavel.packed``; POP §5.1).

Jobs go to shards by their stable UID (``pop.partition``), each shard gets its share of every
GPU type (``pop.split``), and each shard solves the packed LP on its own jobs and the pairs whose
two members it holds; a pair split across shards is not considered (its share is 0), exactly as
Narayanan et al. 2021's harness builds its sub-problems. The merge is the concatenation::

    single[rows_s] = single_s,   pair[pairs of shard s] = pair_s,   s*_POP = min_s s*_s

Feasible by construction: a job's time share comes from its own shard only, and the shards'
capacities sum to the cluster's. Jobs are never split (paper §3.3: co-located pairs interact).
The LP has ``O(J²)`` pair columns, so ``k`` shards cut the work by about ``k²`` in total
(``k`` shards of ``1/k²`` of the pairs each), the super-linear case where POP pays off.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from walras.allocator.gavel import packed
from walras.allocator.pop.generic import gavel_uids, solve_shards
from walras.allocator.pop.partition import IntArray
from walras.allocator.pop.plan import Balance
from walras.allocator.pop.results import PopRun, ShardReport, exact_run, frozen, sharded_run
from walras.allocator.pop.split import FloatArray


@dataclass(frozen=True, eq=False)
class PopPackedAllocation:
    """The merged time shares (``single`` ``(J, T)``, ``pair`` ``(P, T)`` over the full
    problem's pairs), ``value`` = the smallest shard optimum ``min_s s*_s`` (the merged
    allocation's max-min value on its own shards), and how the solve ran. Each shard's
    ``ShardReport.objective`` is its own ``s*_s``."""

    single: FloatArray
    pair: FloatArray
    value: float
    run: PopRun


def solve_packed(
    inputs: packed.PackedInputs,
    k: int,
    *,
    uids: Sequence[str] | None = None,
    balance: Balance = "demand",
    workers: int | None = None,
) -> PopPackedAllocation:
    """``gavel.packed.allocate`` on ``k`` shards (module docstring); ``k = 1`` is the exact LP.

    ``balance`` as in ``pop.solve_gavel`` (default: GPUs in proportion to each shard's
    ``Σ scale_factors``); ``uids`` default to the job ids.
    """
    b = inputs.base
    ids = gavel_uids(b.job_ids) if uids is None else tuple(uids)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if k == 1:
        out = packed.allocate(inputs)
        w, c = time.perf_counter() - wall0, time.process_time() - cpu0
        report = ShardReport(0, b.n_jobs, frozen(b.capacity), w, c, float("nan"),
                             objective=out.value)  # fmt: skip
        run = exact_run(b.n_jobs, report, wall0, cpu0)
        return PopPackedAllocation(frozen(out.single), frozen(out.pair), out.value, run)

    def make_shard(rows: IntArray, fraction: FloatArray, cap: FloatArray) -> Any:
        del fraction  # no client splitting: jobs in pairs interact (module docstring)
        return packed.restrict(inputs, rows, cap)

    done = solve_shards(
        ids, b.capacity, k, make_shard, packed.allocate,
        sizes=np.asarray(b.scale_factors, dtype=np.float64), balance=balance, workers=workers,
    )  # fmt: skip
    plan = done.plan
    shard = plan.real_assignment
    pair_shard = shard[inputs.pairs]
    inside = pair_shard[:, 0] == pair_shard[:, 1]
    single = np.zeros((b.n_jobs, b.n_types))
    pair = np.zeros((inputs.n_pairs, b.n_types))
    reports = []
    values = []
    for s in range(plan.k):
        rows = plan.clients.owner[plan.members[s]]
        got: packed.PackedAllocation | None = done.outputs[s]
        if got is not None:
            single[rows] = got.single
            pair[np.flatnonzero(inside & (pair_shard[:, 0] == s))] = got.pair
            values.append(got.value)
        reports.append(
            ShardReport(
                index=s,
                rows=len(rows),
                capacity=frozen(plan.capacity[s]),
                wall_s=done.wall_s[s],
                cpu_s=done.cpu_s[s],
                certificate=float("nan"),
                solves=0 if got is None else 1,
                objective=float("nan") if got is None else got.value,
            )
        )
    run = sharded_run(plan, reports, done.workers, wall0, cpu0)
    value = min(values) if values else float("inf")
    return PopPackedAllocation(frozen(single), frozen(pair), value, run)

"""POP: partitioned optimisation for scale (Narayanan et al. 2021, docs/algorithms.md#pop).

Public interface (what the scheduling core's policy registry wraps)::

    pop.solve_pricing(problem, k, uids=..., repair=True)      -> PopPricingResult
    pop.solve_fairness(problem, k, mode="rdm", uids=...)      -> PopFairnessResult
    pop.solve_gavel(inputs, k, "max_min_fairness_perf")       -> PopAllocation
    pop.solve_packed(packed_inputs, k)                        -> PopPackedAllocation (pairs)
    pop.solve_rows(uids, capacity, k, make_shard, solve_shard) -> PopAllocation  (any policy)
    pop.assign_shards(uids, k), pop.shard_of(uid, k)           # sticky shard of a job
    pop.split_capacity(capacity, k, ...)                       # the capacity rule
    pop.split_clients(sizes, uids, t)                          # client splitting

Modules, one concern each: ``partition`` (stable hash of the UID mod k), ``split`` (capacity
shares with whole-unit remainders), ``clients`` (client splitting, where it is valid),
``plan`` (the partition step), ``shards`` (worker processes or in-process), ``repair``
(price-spread repair), ``results`` (immutable results), and one module per wrapped solver:
``pricing_pop``, ``fairness_pop``, ``generic`` (any row-wise policy; Gavel's; and
``solve_shards``, the partition and solve steps for policies that merge their own answers),
``packed_pop`` (Gavel's max-min fairness with space sharing: job pairs).
"""

from walras.allocator.pop.clients import VirtualClients, merge_virtual, split_clients
from walras.allocator.pop.fairness_pop import solve_fairness
from walras.allocator.pop.generic import (
    ShardOutputs,
    gavel_uids,
    solve_gavel,
    solve_rows,
    solve_shards,
)
from walras.allocator.pop.packed_pop import PopPackedAllocation, solve_packed
from walras.allocator.pop.partition import assign_shards, members, shard_of
from walras.allocator.pop.plan import Plan, make_plan
from walras.allocator.pop.pricing_pop import solve_pricing
from walras.allocator.pop.results import (
    PopAllocation,
    PopFairnessResult,
    PopPricingResult,
    PopRun,
    RepairReport,
    ShardReport,
)
from walras.allocator.pop.shards import cores, free_cores
from walras.allocator.pop.split import split_capacity

__all__ = [
    "Plan",
    "PopAllocation",
    "PopFairnessResult",
    "PopPackedAllocation",
    "PopPricingResult",
    "PopRun",
    "RepairReport",
    "ShardOutputs",
    "ShardReport",
    "VirtualClients",
    "assign_shards",
    "cores",
    "free_cores",
    "gavel_uids",
    "make_plan",
    "members",
    "merge_virtual",
    "shard_of",
    "solve_fairness",
    "solve_gavel",
    "solve_packed",
    "solve_pricing",
    "solve_rows",
    "solve_shards",
    "split_capacity",
    "split_clients",
]

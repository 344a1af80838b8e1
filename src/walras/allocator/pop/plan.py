"""The partition step of POP: which clients and how much capacity each shard gets.

``make_plan(uids, capacity, k)``:

1. optionally split the largest clients (``clients.split_clients``, threshold ``client_split``);
2. assign every (virtual) client to shard ``H(uid) mod k`` (``partition``);
3. split the capacity (``split``) with shard weights
   - ``balance="equal"`` (the paper's 1/k; default): 1 for every shard that has clients, 0
     for an empty one (so no capacity is stranded where nobody can use it);
   - ``balance="demand"``: the shard's total client size ``Σ f_v size_v`` (capacity follows
     load; Walras's option for policies such as max-min fairness whose value in a shard is set
     by its most crowded type);
   the spare whole units go to the shards with the most demand (``split`` module).

The merged allocation of any per-shard feasible allocations is feasible for the full problem,
because the shard capacities add up to at most the full capacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.pop.clients import VirtualClients, split_clients
from walras.allocator.pop.partition import IntArray, assign_rows, assign_shards, check_k, members
from walras.allocator.pop.split import FloatArray, split_capacity

Balance = Literal["equal", "demand"]


@dataclass(frozen=True, eq=False)
class Plan:
    """Shards of one problem.

    Attributes:
        k: shard count.
        clients: the (virtual) clients; ``clients.owner[v]`` is the real row of client ``v``.
        assignment: ``(clients.n,)`` shard of each virtual client.
        members: per shard, the virtual client indices in it (ascending).
        capacity: ``(k, *capacity.shape)`` shard capacities.
        real_assignment: ``(n,)`` shard of each real client, ``-1`` if it was split.
        weights: ``(k,)`` the capacity shares used; ``load``: ``(k,)`` each shard's total size.
    """

    k: int
    clients: VirtualClients
    assignment: IntArray
    members: tuple[IntArray, ...]
    capacity: FloatArray
    real_assignment: IntArray
    weights: FloatArray
    load: FloatArray


def make_plan(
    uids: Sequence[str] | None,
    capacity: Any,
    k: int,
    *,
    n: int | None = None,
    sizes: Any = None,
    client_split: float = 0.0,
    balance: Balance = "equal",
    integral: bool | None = None,
) -> Plan:
    """Partition ``uids`` and ``capacity`` into ``k`` shards (see the module docstring).

    Without ``uids`` (then ``n`` is required) rows are sharded by ``partition.assign_rows``
    (vectorised; client splitting then names rows by their index).
    """
    k = check_k(k)
    if uids is None:
        if n is None:
            raise InvalidProblem("make_plan needs uids or n", field="uids")
        if client_split > 0:
            uids = tuple(str(i) for i in range(n))
    else:
        n = len(uids)
    if n == 0:
        raise InvalidProblem("the problem has no clients", field="uids")
    if balance not in ("equal", "demand"):
        raise InvalidProblem(f"balance must be 'equal' or 'demand', got {balance!r}")
    size = np.ones(n) if sizes is None else np.asarray(sizes, dtype=np.float64)
    if uids is None:
        clients = VirtualClients(np.arange(n, dtype=np.int64), np.ones(n), (), 0)
        assignment = assign_rows(n, k)
    else:
        clients = split_clients(size, list(uids), client_split)
        assignment = assign_shards(clients.uids, k)
    groups = members(assignment, k)
    load = np.bincount(
        assignment, weights=size[clients.owner] * clients.fraction, minlength=k
    ).astype(np.float64)
    if balance == "equal":
        weights = np.array([1.0 if len(g) else 0.0 for g in groups])
    else:
        weights = load if load.sum() > 0 else np.array([1.0 if len(g) else 0.0 for g in groups])
    caps = split_capacity(capacity, k, weights=weights, integral=integral, demand=load)
    real = np.full(n, -1, dtype=np.int64)
    whole = clients.fraction == 1.0
    real[clients.owner[whole]] = assignment[whole]
    return Plan(k, clients, assignment, groups, caps, real, weights, load)


def resplit(plan: Plan, capacity: Any, *, integral: bool | None) -> Plan:
    """``plan`` with its capacity split again (same shards and weights), e.g. in whole units."""
    caps = split_capacity(
        capacity, plan.k, weights=plan.weights, integral=integral, demand=plan.load
    )
    return dataclasses.replace(plan, capacity=caps)

"""One node's column of the PS-DSF tenant model, built from plain API dicts (pure).

Called by the node agent (``walras.agent.runner``) each step with its own Node, every FungibleJob
and every ResourcePool; it never sees another node. It reuses the operator's tenant model
(``walras.core.tenants.tenant_model``, the one ``psdsf_problem`` builds for the centralised
``psdsf`` policy) restricted to this one node, so that the agents converge to exactly what the
centralised policy computes. The one input of that model that depends on other nodes is the set
``T`` of the cluster's GPU types, over which each job's rates are normalised (its speed-up over
its own slowest type in ``T``) and the cap ``D_n = Σ_j r_j · max_{t∈T} â_{j,t}`` takes its
maximum. The central model takes the types of the usable nodes; the agent takes the GPU types of
the ResourcePools (skipping pools whose status reports 0 nodes) and its own node's type, which
needs no node data and agrees whenever every pool has a usable node.

Tenants appear in sorted order; every tenant with an active job is in every column (eligible or
not), so all agents agree on names. A node that is not ready, unschedulable or in no pool gets a
column where nobody is eligible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from walras.agent.steps import Column
from walras.core import governance, model, snapshot, tenants

Obj = Mapping[str, Any]


def _pool_types(pools: Sequence[model.PoolSpec]) -> set[str]:
    """GPU types of pools that may have nodes (status.nodes absent or > 0)."""
    out: set[str] = set()
    for pool in pools:
        count = pool.status.get("nodes") if isinstance(pool.status, Mapping) else None
        if isinstance(count, int) and not isinstance(count, bool) and count <= 0:
            continue
        out.add(pool.gpu_type)
    return out


def node_column(
    node: Obj, jobs: Sequence[Obj], pools: Sequence[Obj], tenant_objs: Sequence[Obj] = ()
) -> Column:
    """Node ``node``'s column of the contract's PS-DSF tenant model.

    ``tenant_objs``: the cluster's ``Tenant`` objects (names, weights, namespaces), as the
    central model reads them; without them a job's tenant is its namespace, with weight 1.
    """
    parsed = [model.parse_job(j) for j in jobs]
    tenant_specs = {t.name: t for t in (governance.parse_tenant(o) for o in tenant_objs)}
    specs = list(
        governance.resolve([j for j in parsed if isinstance(j, model.JobSpec)], tenant_specs)
    )
    pool_specs = [model.parse_pool(p) for p in pools]
    info = model.parse_node(node)
    pool = snapshot.node_pool(info, sorted(pool_specs, key=lambda p: p.name))
    # T (see the module docstring): the pools' GPU types and this node's own.
    types = _pool_types(pool_specs) | ({pool.gpu_type} if pool is not None else set())
    tm = tenants.tenant_model(specs, [info], pool_specs, tenant_specs, types=types)
    n = len(tm.tenants)
    placed = len(tm.node_names) == 1
    return Column(
        node_name=info.name,
        tenant_names=tuple(tm.tenants),
        capacity=tm.capacity[0] if placed else np.zeros(3),
        demand=tm.demand,
        weight=tm.weight,
        eligible=tm.eligible[:, 0] if placed else np.zeros(n, dtype=bool),
        cap=tm.cap,
        throughput=tm.throughput[:, 0] if placed else np.zeros(n),
        gpu_type=pool.gpu_type if (pool is not None and placed) else None,
    )

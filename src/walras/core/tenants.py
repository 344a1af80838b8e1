"""The PS-DSF tenant model shared by the ``psdsf`` policies and the node agents (PS-DSF §IV).

:func:`psdsf_problem` is what the node agents (``walras.agent``) build from API dicts, and
:func:`tenant_model` what the ``psdsf`` policies build from a snapshot; they are one model, so the
agents converge to exactly the centrally computed allocation:

- tenant ``n`` = the job's namespace, or the ``Tenant`` listing it (``walras.core.governance``;
  ``spec.tenant`` is ignored); resources ``M = [gpu, cpu cores, memory bytes]``;
- ``d_n`` = elementwise max of the tenant's active jobs' per-pod requests;
- ``φ_n`` = the tenant's weight ``W_n`` set by an admin (``Tenant.spec.weight``, default 1),
  through the hierarchy for tenants with a ``spec.parent``
  (``governance.hierarchical_weights``); what users write in their jobs' ``utility.weight``
  never changes it;
- ``c_i`` = node ``i``'s allocatable ``[pool resourceName, cpu, memory]``;
- ``δ_{n,i}`` = some job of ``n`` has throughput > 0 on ``i``'s GPU type and its template's
  ``nodeSelector`` matches ``i``;
- ``throughput_{n,i}`` = max of ``â_{j,type(i)}`` over the jobs of ``n`` eligible on ``i``;
- cap ``D_n = Σ_j r_j · max_{t ∈ T} â_{j,t}`` (replicas at their best normalised rate).

**Normalised throughputs.** PS-DSF's GPU extension (§IV) measures a tenant's tasks ``x_n`` in
work units and the tenant aggregates several jobs, so their rates must be in one unit. Raw
steps/s are not: an LM at 66 steps/s beside a recommendation model at 1.6 steps/s would make the
tenant's rate (a max over its jobs) the LM's, its cap mostly the LM's, and the recommendation job
worth 1/40 of a pod. Each job's rates are therefore divided by its rate on its own slowest type:

    â_{j,t} = a_{j,t} / min{a_{j,t'} : t' ∈ T, a_{j,t'} > 0}

where ``T`` is the set of GPU types the cluster has (central: the types of the usable nodes; an
agent: the types of the ResourcePools that report nodes, see ``walras.agent.columns``). ``â`` is
the job's speed-up over its slowest eligible type, dimensionless, ``≥ 1`` on every type it can
use: one work unit is one pod-second on the job's slowest type, whatever model it trains, so a
tenant's units add up across jobs. Scaling a job's whole row of rates (changing its batch size or
its step definition) leaves ``â`` unchanged, so no job can inflate its tenant's share by
reporting rates in smaller steps. Shares are fair in these units, not in GPU counts: a tenant
whose jobs gain most from the fast types gets fewer, faster GPUs (TDM PS-DSF is a Fisher market
with nodes as goods, docs/algorithms.md#ps-dsf, and each tenant buys the node time it values
most per price).

Worked example: jobs ``lm {k80: 43, v100: 121}`` and ``rec {k80: 20, v100: 13}`` in one tenant on
a k80 and a v100 node: ``â_lm = {k80: 1, v100: 2.81}``, ``â_rec = {k80: 1.54, v100: 1}``; the
tenant's throughput is ``max(1, 1.54) = 1.54`` on k80 and ``2.81`` on v100, and with one replica
each ``D = 2.81 + 1.54 = 4.35``. With raw rates it would have been 43/121 and ``D = 141``: the
recommendation job would have counted for 14% of the cap instead of 35%.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from walras.core import governance, model, tenant_tree
from walras.core.snapshot import node_pool, pool_gpus

if TYPE_CHECKING:
    from walras.allocator.fairness import FairnessProblem

FloatArray = npt.NDArray[np.float64]

RESOURCES = ("gpu", "cpu", "memory")


@dataclass(frozen=True, slots=True)
class TenantModel:
    """The PS-DSF arrays of :func:`psdsf_problem` before they become a ``FairnessProblem``."""

    tenants: tuple[str, ...]
    node_names: tuple[str, ...]
    capacity: FloatArray  # (K, 3)
    demand: FloatArray  # (N, 3)
    weight: FloatArray  # (N,)
    eligible: npt.NDArray[np.bool_]  # (N, K)
    cap: FloatArray  # (N,)
    throughput: FloatArray  # (N, K)
    tenant_jobs: Mapping[str, tuple[model.JobKey, ...]]
    rates: Mapping[model.JobKey, Mapping[str, float]]  # â_{j,t} per active job


def normalised_rates(job: model.JobSpec, types: Collection[str]) -> dict[str, float]:
    """``â_{j,t}`` for ``t ∈ types``: the job's rate over its rate on its slowest type in
    ``types`` (module docstring); ``{}`` when it has no positive rate on any of them."""
    rates = {t: job.throughput.get(t, 0.0) for t in sorted(types)}
    positive = [r for r in rates.values() if r > 0]
    if not positive:
        return {}
    slowest = min(positive)
    return {t: r / slowest for t, r in rates.items() if r > 0}


def tenant_model(
    jobs: Sequence[model.JobSpec],
    nodes: Sequence[model.NodeInfo],
    pools: Sequence[model.PoolSpec],
    tenant_specs: Mapping[str, governance.TenantSpec] | None = None,
    types: Collection[str] | None = None,
) -> TenantModel:
    """The PS-DSF tenant model over parsed objects (see the module docstring).

    ``types``: the cluster's GPU types ``T`` over which rates are normalised and the cap takes
    its maximum; default the types of the usable ``nodes`` (a node agent, which sees one node,
    passes the pools' types).
    """
    specs = tenant_specs or {}
    pools = sorted(pools, key=lambda p: p.name)
    active = sorted(
        governance.resolve([j for j in jobs if not j.finished], specs), key=lambda j: j.key
    )
    by_tenant: dict[str, list[model.JobSpec]] = {}
    for job in active:
        by_tenant.setdefault(job.tenant, []).append(job)
    tenants = tuple(sorted(by_tenant))
    placed: list[tuple[model.NodeInfo, model.PoolSpec]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        pool = node_pool(node, pools)
        if pool is not None and node.ready and node.schedulable:
            placed.append((node, pool))
    cluster_types = set(types) if types is not None else {p.gpu_type for _, p in placed}
    norm = {job.key: normalised_rates(job, cluster_types) for job in active}
    resource_names = sorted({p.resource_name for p in pools})
    n_t, n_k = len(tenants), len(placed)
    capacity = np.array(
        [[n.resource(p.resource_name), n.resource("cpu"), n.resource("memory")] for n, p in placed],
        dtype=np.float64,
    ).reshape(n_k, 3)
    demand = np.zeros((n_t, 3))
    weight = np.ones(n_t)
    cap = np.zeros(n_t)
    eligible = np.zeros((n_t, n_k), dtype=bool)
    throughput = np.zeros((n_t, n_k))
    # φ_n: the admin's weights, through the hierarchy (a flat tenant's W_n up to one factor).
    shares = governance.hierarchical_weights(tenants, specs)
    for t, tenant in enumerate(tenants):
        tjobs = by_tenant[tenant]
        gpus = max(
            (max((j.gpus_per_pod(rn) for rn in resource_names), default=1) for j in tjobs),
            default=1,
        )
        demand[t] = [gpus, max(j.cpu for j in tjobs), max(j.memory for j in tjobs)]
        weight[t] = shares[tenant]
        for k, (node, pool) in enumerate(placed):
            usable = [
                norm[j.key].get(pool.gpu_type, 0.0)
                for j in tjobs
                if all(node.labels.get(a) == b for a, b in j.node_selector.items())
            ]
            throughput[t, k] = max(usable, default=0.0)
            eligible[t, k] = throughput[t, k] > 0
        # D_n: Σ replicas, in normalised work units (each pod at its best rate over T).
        cap[t] = float(sum(j.replicas * max(norm[j.key].values(), default=0.0) for j in tjobs))
    return TenantModel(
        tenants=tenants,
        node_names=tuple(n.name for n, _ in placed),
        capacity=capacity,
        demand=demand,
        weight=weight,
        eligible=eligible,
        cap=cap,
        throughput=throughput,
        tenant_jobs={t: tuple(j.key for j in by_tenant[t]) for t in tenants},
        rates=norm,
    )


def fairness_problem(tm: TenantModel) -> FairnessProblem:
    """The ``walras.allocator.fairness.FairnessProblem`` of a tenant model."""
    from walras.allocator import fairness

    return fairness.FairnessProblem(
        capacity=tm.capacity,
        demand=tm.demand,
        weight=tm.weight,
        eligible=tm.eligible,
        cap=tm.cap,
        throughput=tm.throughput,
        tenant_names=list(tm.tenants),
        node_names=list(tm.node_names),
        resource_names=list(RESOURCES),
    )


def psdsf_problem(
    jobs: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    pools: Sequence[Mapping[str, Any]],
    tenant_objs: Sequence[Mapping[str, Any]] = (),
) -> tuple[FairnessProblem, list[str], list[str]]:
    """PS-DSF problem over plain API dicts: ``(problem, tenant_names, node_names)``.

    Jobs whose spec does not parse, and finished jobs, are not active and are left out.
    ``tenant_objs``: the cluster's ``Tenant`` objects (weights and namespace mapping).
    """
    parsed = [model.parse_job(j) for j in jobs]
    node_infos = [model.parse_node(n) for n in nodes]
    pool_specs = [model.parse_pool(p) for p in pools]
    # Validated as the central snapshot validates them, so both build one model.
    specs, _ = tenant_tree.validate(
        {t.name: t for t in (governance.parse_tenant(o) for o in tenant_objs)},
        pool_gpus(node_infos, pool_specs),
    )
    tm = tenant_model(
        [j for j in parsed if isinstance(j, model.JobSpec)], node_infos, pool_specs, specs
    )
    return fairness_problem(tm), list(tm.tenants), list(tm.node_names)

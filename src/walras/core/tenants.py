"""The PS-DSF tenant model shared by the ``psdsf`` policies and the node agents (paper 004 §IV).

:func:`psdsf_problem` is what the node agents (``walras.agent``) build from API dicts, and
:func:`tenant_model` what the ``psdsf`` policies build from a snapshot; they are one model, so the
agents converge to exactly the centrally computed allocation:

- tenant ``n`` = the job's namespace, or the ``Tenant`` listing it (``walras.core.governance``;
  ``spec.tenant`` is ignored); resources ``M = [gpu, cpu cores, memory bytes]``;
- ``d_n`` = elementwise max of the tenant's active jobs' per-pod requests;
- ``φ_n`` = the tenant's weight ``W_n`` set by an admin (``Tenant.spec.weight``, default 1); what
  users write in their jobs' ``utility.weight`` never changes it;
- cap ``D_n`` = Σ replicas of its active jobs, expressed in work units as the GPU extension
  requires (``fairness.FairnessProblem.cap``): each replica counted at
  its job's best throughput on an eligible node (Σ_j r_j · max_i a_{j,type(i)});
- ``c_i`` = node ``i``'s allocatable ``[pool resourceName, cpu, memory]``;
- ``δ_{n,i}`` = some job of ``n`` has throughput > 0 on ``i``'s GPU type and its template's
  ``nodeSelector`` matches ``i``;
- ``throughput_{n,i}`` = max over ``n``'s jobs of ``throughput[gpuType(i)]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from walras.core import governance, model
from walras.core.snapshot import node_pool

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


def tenant_model(
    jobs: Sequence[model.JobSpec],
    nodes: Sequence[model.NodeInfo],
    pools: Sequence[model.PoolSpec],
    tenant_specs: Mapping[str, governance.TenantSpec] | None = None,
) -> TenantModel:
    """The PS-DSF tenant model over parsed objects (see the module docstring)."""
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
    for t, tenant in enumerate(tenants):
        tjobs = by_tenant[tenant]
        gpus = max(
            (max((j.gpus_per_pod(rn) for rn in resource_names), default=1) for j in tjobs),
            default=1,
        )
        demand[t] = [gpus, max(j.cpu for j in tjobs), max(j.memory for j in tjobs)]
        weight[t] = governance.tenant_weight(tenant, specs)
        best = {j.key: 0.0 for j in tjobs}
        for k, (node, pool) in enumerate(placed):
            rates = [j.throughput.get(pool.gpu_type, 0.0) for j in tjobs]
            throughput[t, k] = max(rates)
            eligible[t, k] = any(
                rate > 0 and all(node.labels.get(a) == b for a, b in j.node_selector.items())
                for j, rate in zip(tjobs, rates, strict=True)
            )
            for j, rate in zip(tjobs, rates, strict=True):
                best[j.key] = max(best[j.key], rate)
        # D_n: Σ replicas, in the work units of the GPU extension (each pod at its best rate).
        cap[t] = float(sum(j.replicas * best[j.key] for j in tjobs))
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
    tm = tenant_model(
        [j for j in parsed if isinstance(j, model.JobSpec)],
        [model.parse_node(n) for n in nodes],
        [model.parse_pool(p) for p in pools],
        {t.name: t for t in (governance.parse_tenant(o) for o in tenant_objs)},
    )
    return fairness_problem(tm), list(tm.tenants), list(tm.node_names)

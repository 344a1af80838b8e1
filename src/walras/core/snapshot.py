"""In-memory indexes of the watched objects, frozen into one immutable snapshot per round.

The watch handlers (``walras.operator.handlers``) parse every event into ``Store``; the round loop
calls :meth:`Store.freeze` and works only on the returned :class:`Snapshot`, sorted by
namespace/name so that every array built from it has a stable order (Kueue's ``cache.Snapshot``).
:func:`cluster_view` turns a snapshot into the node/GPU-type arrays the policies need.

:func:`psdsf_problem` is the PS-DSF tenant model shared with the node agents (``walras.agent``):

- tenant ``n`` = ``spec.tenant`` or the namespace; resources ``M = [gpu, cpu cores, memory bytes]``;
- ``d_n`` = elementwise max of the tenant's active jobs' per-pod requests;
- ``φ_n`` = max ``utility.weight``; cap ``D_n`` = Σ replicas of its active jobs, expressed in work
  units as the GPU extension requires (``fairness.FairnessProblem.cap``): each replica counted at
  its job's best throughput on an eligible node (Σ_j r_j · max_i a_{j,type(i)});
- ``c_i`` = node ``i``'s allocatable ``[pool resourceName, cpu, memory]``;
- ``δ_{n,i}`` = some job of ``n`` has throughput > 0 on ``i``'s GPU type and its template's
  ``nodeSelector`` matches ``i``;
- ``throughput_{n,i}`` = max over ``n``'s jobs of ``throughput[gpuType(i)]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from walras.operator import model

if TYPE_CHECKING:
    from walras.allocator.fairness import FairnessProblem

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

RESOURCES = ("gpu", "cpu", "memory")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent view of the cluster; every tuple is sorted by namespace/name."""

    taken_at: float
    jobs: tuple[model.JobSpec, ...]
    defects: tuple[model.JobDefect, ...]
    pools: tuple[model.PoolSpec, ...]
    nodes: tuple[model.NodeInfo, ...]
    pods: tuple[model.PodInfo, ...]
    foreign_pods: tuple[model.PodInfo, ...]

    @property
    def active_jobs(self) -> tuple[model.JobSpec, ...]:
        return tuple(j for j in self.jobs if not j.finished)

    def pods_by_job(self) -> dict[model.JobKey, list[model.PodInfo]]:
        out: dict[model.JobKey, list[model.PodInfo]] = {}
        for pod in self.pods:
            out.setdefault(pod.job_key, []).append(pod)
        return out


class Store:
    """Mutable indexes fed by the watch handlers (one event loop, so no locking)."""

    def __init__(self) -> None:
        self.jobs: dict[model.JobKey, model.JobSpec | model.JobDefect] = {}
        self.pools: dict[str, model.PoolSpec] = {}
        self.nodes: dict[str, model.NodeInfo] = {}
        self.pods: dict[model.JobKey, model.PodInfo] = {}
        self.foreign: dict[model.JobKey, model.PodInfo] = {}
        self.version = 0

    def upsert(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Record the latest state of an object (``kind``: job | pool | node | pod)."""
        self.version += 1
        meta = obj.get("metadata") or {}
        if kind == "job":
            job = model.parse_job(obj)
            self.jobs[job.key] = job
        elif kind == "pool":
            pool = model.parse_pool(obj)
            self.pools[pool.name] = pool
        elif kind == "node":
            node = model.parse_node(obj)
            self.nodes[node.name] = node
        elif kind == "pod":
            pod = model.parse_pod(obj)
            if pod.job:
                self.pods[pod.key] = pod
            elif pod.node and not pod.finished and pod.requests:
                self.foreign[pod.key] = pod
            else:
                self.foreign.pop(pod.key, None)
        else:
            raise ValueError(f"unknown kind {kind!r} for {meta.get('name')}")

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Forget an object that the API server deleted."""
        self.version += 1
        if kind == "job":
            self.jobs.pop((namespace, name), None)
        elif kind == "pool":
            self.pools.pop(name, None)
        elif kind == "node":
            self.nodes.pop(name, None)
        elif kind == "pod":
            self.pods.pop((namespace, name), None)
            self.foreign.pop((namespace, name), None)
        else:
            raise ValueError(f"unknown kind {kind!r} for {name}")

    def freeze(self, now: float | None = None) -> Snapshot:
        """The immutable, sorted snapshot the round works on."""
        jobs = sorted(
            (j for j in self.jobs.values() if isinstance(j, model.JobSpec)), key=lambda j: j.key
        )
        defects = sorted(
            (j for j in self.jobs.values() if isinstance(j, model.JobDefect)), key=lambda j: j.key
        )
        return Snapshot(
            taken_at=time.time() if now is None else now,
            jobs=tuple(jobs),
            defects=tuple(defects),
            pools=tuple(sorted(self.pools.values(), key=lambda p: p.name)),
            nodes=tuple(sorted(self.nodes.values(), key=lambda n: n.name)),
            pods=tuple(sorted(self.pods.values(), key=lambda p: p.key)),
            foreign_pods=tuple(sorted(self.foreign.values(), key=lambda p: p.key)),
        )


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Usable GPU nodes and GPU types of a snapshot, as arrays.

    A node is usable when it is Ready, not cordoned and selected by a pool; a node selected by
    several pools belongs to the first by name (explicit tie-break).
    """

    gpu_types: tuple[str, ...]
    nodes: tuple[model.NodeInfo, ...]
    node_pool: tuple[model.PoolSpec, ...]
    node_type: IntArray
    node_gpus: IntArray
    node_foreign: IntArray
    type_capacity: FloatArray
    pool_nodes: Mapping[str, tuple[str, ...]]

    @property
    def node_index(self) -> dict[str, int]:
        return {n.name: k for k, n in enumerate(self.nodes)}

    def type_index(self) -> dict[str, int]:
        return {t: g for g, t in enumerate(self.gpu_types)}

    def max_pods_on_type(self, gpu_type: str, gpus_per_pod: int) -> int:
        """How many pods of ``gpus_per_pod`` GPUs fit on all nodes of a type at once."""
        if gpu_type not in self.gpu_types or gpus_per_pod < 1:
            return 0
        g = self.gpu_types.index(gpu_type)
        free = np.maximum(self.node_gpus - self.node_foreign, 0)[self.node_type == g]
        return int((free // gpus_per_pod).sum())


def node_pool(node: model.NodeInfo, pools: Sequence[model.PoolSpec]) -> model.PoolSpec | None:
    """The pool that owns a node (first selecting pool by name), if any."""
    for pool in pools:
        if pool.selects(node.labels):
            return pool
    return None


def cluster_view(snap: Snapshot) -> ClusterView:
    """Usable nodes, their pools and GPU counts, and the capacity of every GPU type."""
    gpu_types = tuple(sorted({p.gpu_type for p in snap.pools}))
    type_idx = {t: g for g, t in enumerate(gpu_types)}
    foreign: dict[str, float] = {}
    for pod in snap.foreign_pods:
        foreign[pod.node] = foreign.get(pod.node, 0.0) + sum(
            v for r, v in pod.requests.items() if r not in ("cpu", "memory")
        )
    nodes: list[model.NodeInfo] = []
    pools: list[model.PoolSpec] = []
    pool_nodes: dict[str, list[str]] = {p.name: [] for p in snap.pools}
    for node in snap.nodes:
        pool = node_pool(node, snap.pools)
        if pool is None or not node.ready or not node.schedulable:
            continue
        nodes.append(node)
        pools.append(pool)
        pool_nodes[pool.name].append(node.name)
    node_type = np.array([type_idx[p.gpu_type] for p in pools], dtype=np.int64)
    node_gpus = np.array(
        [int(n.resource(p.resource_name)) for n, p in zip(nodes, pools, strict=True)],
        dtype=np.int64,
    )
    node_foreign = np.array([int(np.ceil(foreign.get(n.name, 0.0))) for n in nodes], np.int64)
    capacity = np.zeros(len(gpu_types))
    for pool in snap.pools:
        g = type_idx[pool.gpu_type]
        if pool.capacity_override is not None:
            capacity[g] += pool.capacity_override
        else:
            idx = [k for k, p in enumerate(pools) if p.name == pool.name]
            capacity[g] += float(np.maximum(node_gpus[idx] - node_foreign[idx], 0).sum())
    return ClusterView(
        gpu_types=gpu_types,
        nodes=tuple(nodes),
        node_pool=tuple(pools),
        node_type=node_type.reshape(-1),
        node_gpus=node_gpus.reshape(-1),
        node_foreign=node_foreign.reshape(-1),
        type_capacity=capacity,
        pool_nodes={k: tuple(v) for k, v in pool_nodes.items()},
    )


# --------------------------------------------------------------------------- PS-DSF model


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
) -> TenantModel:
    """The PS-DSF tenant model over parsed objects (see the module docstring)."""
    pools = sorted(pools, key=lambda p: p.name)
    active = sorted((j for j in jobs if not j.finished), key=lambda j: j.key)
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
        weight[t] = max(j.utility.weight for j in tjobs)
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
) -> tuple[FairnessProblem, list[str], list[str]]:
    """PS-DSF problem over plain API dicts: ``(problem, tenant_names, node_names)``.

    Jobs whose spec does not parse, and finished jobs, are not active and are left out.
    """
    parsed = [model.parse_job(j) for j in jobs]
    tm = tenant_model(
        [j for j in parsed if isinstance(j, model.JobSpec)],
        [model.parse_node(n) for n in nodes],
        [model.parse_pool(p) for p in pools],
    )
    return fairness_problem(tm), list(tm.tenants), list(tm.node_names)

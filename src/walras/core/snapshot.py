"""In-memory indexes of the watched objects, frozen into one immutable snapshot per round.

The watch handlers (``walras.operator.handlers``) parse every event into ``Store``; the round loop
calls :meth:`Store.freeze` and works only on the returned :class:`Snapshot`, sorted by
namespace/name so that every array built from it has a stable order (Kueue's ``cache.Snapshot``).
:func:`cluster_view` turns a snapshot into the node/GPU-type arrays the policies need.

The tenant model of the PS-DSF policies is in ``walras.core.tenants``. Nothing here reads a clock:
the shell passes ``now`` to :meth:`Store.freeze` (the operator's wall clock, the simulator's
simulated one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.core import model

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class JobProgress:
    """How far a job has come, from its schedule history (``walras.core.history``).

    ``work_done`` is in the job's work units (``∫ throughput dt``), ``elapsed`` the seconds it has
    been schedulable, ``received`` the seconds it has run (any group), ``arrival`` its creation
    time (the shell's clock). Policies that weigh remaining work (``totalWork − work_done``) or
    time since arrival read it; the cycle fills it in before the solve.
    """

    work_done: float = 0.0
    elapsed: float = 0.0
    received: float = 0.0
    arrival: float = 0.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent view of the cluster; every tuple is sorted by namespace/name.

    ``progress`` is empty in a frozen store and filled by ``walras.core.cycle.plan``.
    """

    taken_at: float
    jobs: tuple[model.JobSpec, ...]
    defects: tuple[model.JobDefect, ...]
    pools: tuple[model.PoolSpec, ...]
    nodes: tuple[model.NodeInfo, ...]
    pods: tuple[model.PodInfo, ...]
    foreign_pods: tuple[model.PodInfo, ...]
    progress: Mapping[model.JobKey, JobProgress] = field(default_factory=dict)

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

    def freeze(self, now: float) -> Snapshot:
        """The immutable, sorted snapshot the round works on."""
        jobs = sorted(
            (j for j in self.jobs.values() if isinstance(j, model.JobSpec)), key=lambda j: j.key
        )
        defects = sorted(
            (j for j in self.jobs.values() if isinstance(j, model.JobDefect)), key=lambda j: j.key
        )
        return Snapshot(
            taken_at=now,
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


def remaining_work(job: model.JobSpec, snap: Snapshot) -> float | None:
    """``totalWork − work done`` (≥ 0), or None when the job declares no ``totalWork``."""
    if job.total_work is None:
        return None
    done = snap.progress.get(job.key, JobProgress()).work_done
    return max(job.total_work - done, 0.0)

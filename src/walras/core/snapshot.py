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

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from walras.core import crd, governance, model, priorities, tenant_tree

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
    # Tenant objects by name (walras.core.governance); empty: every namespace a tenant of weight 1.
    tenants: Mapping[str, governance.TenantSpec] = field(default_factory=dict)
    # Tenants that fell back to flat tenants without quotas, and why (``walras.core.tenant_tree``;
    # a condition on the Tenant). ``tenants`` holds them already flattened.
    tenant_problems: Mapping[str, tenant_tree.TenantProblem] = field(default_factory=dict)
    # PriorityClasses by name (walras.core.priorities); empty: every job the default class.
    priority_classes: Mapping[str, priorities.PriorityClass] = field(default_factory=dict)
    # active_jobs, computed on first use (``dataclasses.replace`` starts a copy without it).
    _active: tuple[model.JobSpec, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def active_jobs(self) -> tuple[model.JobSpec, ...]:
        active = self._active
        if active is None:
            active = tuple(j for j in self.jobs if not j.finished)
            object.__setattr__(self, "_active", active)
        return active

    def with_progress(self, progress: Mapping[model.JobKey, JobProgress]) -> Snapshot:
        """This snapshot with ``progress`` filled in (same jobs, so its active jobs carry over)."""
        out = dataclasses.replace(self, progress=progress)
        object.__setattr__(out, "_active", self._active)
        return out

    def pods_by_job(self) -> Mapping[model.JobKey, Sequence[model.PodInfo]]:
        """The pods of each job, in the snapshot's order (read-only: shared, see below)."""
        # Built once per pods tuple: a round's snapshots (progress filled in, phases set) share
        # it, and the completions, the policy and the realiser each ask for it.
        last = _LAST_BY_JOB[0] if _LAST_BY_JOB else None
        if last is not None and last[0] is self.pods:
            return last[1]
        out: dict[model.JobKey, list[model.PodInfo]] = {}
        for pod in self.pods:
            out.setdefault(pod.job_key, []).append(pod)
        frozen = {key: tuple(pods) for key, pods in out.items()}
        _LAST_BY_JOB[:] = [(self.pods, frozen)]
        return frozen


# The last pods tuple grouped by job, and the tuple (held, so its id is never reused).
_LAST_BY_JOB: list[
    tuple[tuple[model.PodInfo, ...], Mapping[model.JobKey, Sequence[model.PodInfo]]]
] = []


K = TypeVar("K")
V = TypeVar("V")


class _Index(dict[K, V]):
    """A dict that counts its changes, so that :meth:`Store.freeze` rebuilds only the sorted
    tuples of the kinds that changed since the last round (most rounds change pods only)."""

    __slots__ = ("changes",)

    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    def __setitem__(self, key: K, value: V) -> None:
        self.changes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: K) -> None:
        self.changes += 1
        super().__delitem__(key)

    def pop(self, key: K, *default: Any) -> Any:
        self.changes += 1
        return super().pop(key, *default)

    def popitem(self) -> tuple[K, V]:
        self.changes += 1
        return super().popitem()

    def clear(self) -> None:
        self.changes += 1
        super().clear()

    def setdefault(self, key: K, default: Any = None) -> Any:
        self.changes += 1
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.changes += 1
        super().update(*args, **kwargs)

    def __ior__(self, other: Any) -> _Index[K, V]:  # type: ignore[override,misc]
        self.changes += 1
        super().update(other)
        return self


class Store:
    """Mutable indexes fed by the watch handlers (one event loop, so no locking)."""

    def __init__(self) -> None:
        self.jobs: dict[model.JobKey, model.JobSpec | model.JobDefect] = _Index()
        self.pools: dict[str, model.PoolSpec] = _Index()
        self.nodes: dict[str, model.NodeInfo] = _Index()
        self.pods: dict[model.JobKey, model.PodInfo] = _Index()
        self.foreign: dict[model.JobKey, model.PodInfo] = _Index()
        self.tenants: dict[str, governance.TenantSpec] = _Index()
        self.priority_classes: dict[str, priorities.PriorityClass] = _Index()
        self.version = 0
        # What freeze built last, and the change counts of the indexes it was built from: the
        # parts whose indexes did not change are reused as they are (they are immutable).
        self._frozen: dict[str, tuple[tuple[int, ...], Any]] = {}

    def _reuse(self, part: str, *indexes: Mapping[Any, Any]) -> tuple[tuple[int, ...], Any]:
        """``(stamp, value)``: the stamp of ``indexes`` now, and the part built at that stamp
        (None when it must be rebuilt). An index replaced by a plain dict is never reused."""
        stamp = tuple(i.changes if isinstance(i, _Index) else -1 - n for n, i in enumerate(indexes))
        hit = self._frozen.get(part)
        if hit is not None and hit[0] == stamp and min(stamp) >= 0:
            return stamp, hit[1]
        return stamp, None

    def upsert(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Record the latest state of an object (``kind``: job | pool | node | pod | tenant |
        priorityclass)."""
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
            self._put_pod(model.parse_pod(obj))
        elif kind == "tenant":
            tenant = governance.parse_tenant(obj)
            self.tenants[tenant.name] = tenant
        elif kind == "priorityclass":
            pc = priorities.parse_priority_class(obj)
            self.priority_classes[pc.name] = pc
        else:
            raise ValueError(f"unknown kind {kind!r} for {meta.get('name')}")

    def put_pod(self, pod: model.PodInfo) -> None:
        """Record a pod already parsed (what :meth:`upsert` does with ``parse_pod``'s result):
        the simulator, which builds its pods itself, keeps their parsed form."""
        self.version += 1
        self._put_pod(pod)

    def _put_pod(self, pod: model.PodInfo) -> None:
        if pod.job:
            self.pods[pod.key] = pod
        elif pod.node and not pod.finished:
            # Every bound foreign pod counts: its requests, and one of the node's pod slots.
            self.foreign[pod.key] = pod
        else:
            self.foreign.pop(pod.key, None)

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
        elif kind == "tenant":
            self.tenants.pop(name, None)
        elif kind == "priorityclass":
            self.priority_classes.pop(name, None)
        else:
            raise ValueError(f"unknown kind {kind!r} for {name}")

    def freeze(self, now: float) -> Snapshot:
        """The immutable, sorted snapshot the round works on.

        Each part (jobs, pools and nodes with the tenants, pods, foreign pods) is rebuilt only
        when an index it is built from changed since the last freeze; otherwise the last tuple
        is handed out again, the same object, so :func:`cluster_view` can reuse its view too.
        """
        stamp, cluster = self._reuse("cluster", self.pools, self.nodes, self.tenants)
        if cluster is None:
            pools = tuple(sorted(self.pools.values(), key=lambda p: p.name))
            nodes = tuple(sorted(self.nodes.values(), key=lambda n: n.name))
            # The tenant of a job is its namespace or the Tenant listing it, never its spec.tenant.
            tenants, problems = tenant_tree.validate(
                dict(sorted(self.tenants.items())), pool_gpus(self.nodes.values(), pools)
            )
            cluster = (pools, nodes, tenants, problems)
            self._frozen["cluster"] = (stamp, cluster)
        pools, nodes, tenants, problems = cluster
        stamp, parsed = self._reuse("jobs", self.jobs, self.pools, self.nodes, self.tenants)
        if parsed is None:
            jobs = sorted(
                (j for j in self.jobs.values() if isinstance(j, model.JobSpec)),
                key=lambda j: j.key,
            )
            defects = sorted(
                (j for j in self.jobs.values() if isinstance(j, model.JobDefect)),
                key=lambda j: j.key,
            )
            parsed = (
                governance.resolve(jobs, tenants),
                tuple(
                    dataclasses.replace(d, tenant=governance.tenant_of(d.namespace, tenants))
                    for d in defects
                ),
            )
            self._frozen["jobs"] = (stamp, parsed)
        stamp, pods = self._reuse("pods", self.pods)
        if pods is None:
            pods = tuple(sorted(self.pods.values(), key=lambda p: p.key))
            self._frozen["pods"] = (stamp, pods)
        stamp, foreign = self._reuse("foreign", self.foreign)
        if foreign is None:
            foreign = tuple(sorted(self.foreign.values(), key=lambda p: p.key))
            self._frozen["foreign"] = (stamp, foreign)
        return Snapshot(
            taken_at=now,
            jobs=parsed[0],
            defects=parsed[1],
            pools=pools,
            nodes=nodes,
            pods=pods,
            foreign_pods=foreign,
            tenants=tenants,
            tenant_problems=problems,
            priority_classes=dict(sorted(self.priority_classes.items())),
        )


def pool_gpus(nodes: Iterable[model.NodeInfo], pools: Sequence[model.PoolSpec]) -> dict[str, float]:
    """GPUs per GPU type over the pools' nodes (allocatable, ready or not): what guarantees are
    checked against."""
    out: dict[str, float] = {}
    for node in nodes:
        pool = node_pool(node, pools)
        if pool is not None:
            out[pool.gpu_type] = out.get(pool.gpu_type, 0.0) + node.resource(pool.resource_name)
    return out


@dataclass(frozen=True, slots=True)
class PoolState:
    """What a pool offers this round (its status), and why it offers nothing when it does not."""

    nodes: tuple[str, ...]  # ready, schedulable nodes it owns
    capacity: int  # GPUs Walras may use: allocatable GPUs minus foreign pods' GPUs (or override)
    matching: int  # nodes its selector matches, ready or not
    not_ready: int
    cordoned: int

    @property
    def empty(self) -> bool:
        return self.capacity <= 0

    def why_empty(self, pool: model.PoolSpec) -> str:
        """``no node matches {...}`` / ``3 nodes match, 2 not ready, 1 cordoned`` / ..."""
        if pool.defect is not None:
            return f"invalid spec: {pool.defect}"
        if pool.capacity_override is not None and pool.capacity_override <= 0:
            return "capacityOverride is 0"
        selector = dict(pool.node_selector) or {crd.GPU_TYPE_LABEL: pool.gpu_type}
        if not self.matching:
            return f"no node matches {selector}"
        if not self.nodes:
            return (
                f"{self.matching} nodes match {selector}: {self.not_ready} not ready, "
                f"{self.cordoned} cordoned"
            )
        return f"its {len(self.nodes)} nodes have no free {pool.resource_name}"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Usable GPU nodes and GPU types of a snapshot, as arrays.

    A node is usable when it is Ready, not cordoned and selected by a pool; a node selected by
    several pools belongs to the first by name (explicit tie-break). A GPU type whose pools offer
    no capacity (no ready node, every node cordoned, every GPU held by foreign pods,
    ``capacityOverride: 0``) is left out of ``gpu_types`` and its nodes out of ``nodes``, so the
    policies never see a type of capacity 0; ``empty_types`` says why, ``pools`` has every pool.

    Accounting is per resource name: a node's GPUs are its pool's ``resourceName`` only;
    ``node_foreign`` is what pods that are not Walras's request of that resource, and
    ``node_foreign_use`` everything they request (cpu, memory, hugepages, ...) plus their count
    under ``"pods"``, for the resource-fit filter (``walras.core.filters``).
    """

    gpu_types: tuple[str, ...]
    nodes: tuple[model.NodeInfo, ...]
    node_pool: tuple[model.PoolSpec, ...]
    node_type: IntArray
    node_gpus: IntArray
    node_foreign: IntArray
    type_capacity: FloatArray
    pool_nodes: Mapping[str, tuple[str, ...]]
    node_foreign_use: tuple[Mapping[str, float], ...] = ()
    pools: Mapping[str, PoolState] = field(default_factory=dict)
    empty_types: Mapping[str, str] = field(default_factory=dict)
    # inputs_key and node_index, computed on first use: the view is immutable and handed out
    # again for every round while the cluster is unchanged (``cluster_view``), so each is built
    # once per cluster instead of once per round (``dataclasses.replace`` starts without them).
    _inputs: tuple[object, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _node_index: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def node_index(self) -> Mapping[str, int]:
        """Node name → view index."""
        index = self._node_index
        if index is None:
            index = {n.name: k for k, n in enumerate(self.nodes)}
            object.__setattr__(self, "_node_index", index)
        return index

    def type_index(self) -> dict[str, int]:
        return {t: g for g, t in enumerate(self.gpu_types)}

    def inputs_key(self) -> tuple[object, ...]:
        """What a policy's solve reads of the view (``walras.core.policies.base.inputs_key``):
        GPU types, nodes, GPUs and foreign GPUs per node, capacity per type and
        :meth:`filter_inputs`; computed once per view."""
        key = self._inputs
        if key is None:
            key = (
                self.gpu_types,
                tuple(n.name for n in self.nodes),
                self.node_gpus.tobytes(),
                self.node_foreign.tobytes(),
                self.type_capacity.tobytes(),
                self.filter_inputs(),
            )
            object.__setattr__(self, "_inputs", key)
        return key

    def filter_inputs(self) -> tuple[object, ...]:
        """Everything the filters read of the usable nodes (``walras.core.filters``): labels,
        taints, allocatable and foreign pods' requests. A policy that memoises its solve keys on
        this too, or a new taint or a foreign pod's cpu would leave its eligibility stale."""
        return (
            tuple(
                (tuple(sorted(n.labels.items())), n.taints, tuple(sorted(n.allocatable.items())))
                for n in self.nodes
            ),
            tuple(tuple(sorted(u.items())) for u in self.node_foreign_use),
        )

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


def node_usage(pods: Sequence[model.PodInfo]) -> dict[str, dict[str, float]]:
    """Per node: the summed requests of ``pods`` bound there, and their count under ``"pods"``."""
    out: dict[str, dict[str, float]] = {}
    for pod in pods:
        if not pod.node or pod.finished:
            continue
        used = out.setdefault(pod.node, {})
        for name, value in pod.requests.items():
            used[name] = used.get(name, 0.0) + value
        used["pods"] = used.get("pods", 0.0) + 1.0
    return out


# The last view and the tuples it was built from: a round whose nodes, pools and foreign pods are
# the very tuples of the last one (``Store.freeze`` hands them out again while unchanged) gets
# that view again. Holding the tuples keeps their ids from being reused.
_LAST_VIEW: list[tuple[tuple[object, ...], ClusterView]] = []


def cluster_view(snap: Snapshot) -> ClusterView:
    """Usable nodes, their pools and GPU counts, and the capacity of every GPU type.

    A view is immutable (its arrays are read-only), so the view of the last snapshot built from
    the same node, pool and foreign-pod tuples is handed back instead of being rebuilt."""
    parts = (snap.nodes, snap.pools, snap.foreign_pods)
    last = _LAST_VIEW[0] if _LAST_VIEW else None
    if last is not None and all(a is b for a, b in zip(last[0], parts, strict=True)):
        return last[1]
    view = _build_view(snap)
    for array in (view.node_type, view.node_gpus, view.node_foreign, view.type_capacity):
        array.flags.writeable = False
    _LAST_VIEW[:] = [(parts, view)]
    return view


def _build_view(snap: Snapshot) -> ClusterView:
    foreign = node_usage(snap.foreign_pods)
    states: dict[str, dict[str, Any]] = {
        p.name: {"nodes": [], "capacity": 0, "matching": 0, "not_ready": 0, "cordoned": 0}
        for p in snap.pools
    }
    candidates: list[tuple[model.NodeInfo, model.PoolSpec, int, int]] = []
    for node in snap.nodes:
        pool = node_pool(node, snap.pools)
        if pool is None:
            continue
        state = states[pool.name]
        state["matching"] += 1
        if not node.ready:
            state["not_ready"] += 1
            continue
        if not node.schedulable:
            state["cordoned"] += 1
            continue
        gpus = _whole(node.resource(pool.resource_name))
        used = _whole(np.ceil(foreign.get(node.name, {}).get(pool.resource_name, 0.0)))
        state["nodes"].append(node.name)
        state["capacity"] += max(gpus - used, 0)
        candidates.append((node, pool, gpus, used))
    type_capacity: dict[str, float] = {}
    for pool in snap.pools:
        state = states[pool.name]
        if pool.capacity_override is not None:
            state["capacity"] = max(pool.capacity_override, 0)
        type_capacity[pool.gpu_type] = type_capacity.get(pool.gpu_type, 0.0) + state["capacity"]
    pools = {
        name: PoolState(
            nodes=tuple(st["nodes"]),
            capacity=int(st["capacity"]),
            matching=int(st["matching"]),
            not_ready=int(st["not_ready"]),
            cordoned=int(st["cordoned"]),
        )
        for name, st in states.items()
    }
    gpu_types = tuple(sorted(t for t, c in type_capacity.items() if c > 0))
    empty_types = {
        t: "; ".join(
            f"pool {p.name}: {pools[p.name].why_empty(p)}" for p in snap.pools if p.gpu_type == t
        )
        for t in sorted(type_capacity)
        if type_capacity[t] <= 0
    }
    type_idx = {t: g for g, t in enumerate(gpu_types)}
    kept = [c for c in candidates if c[1].gpu_type in type_idx]
    nodes = tuple(c[0] for c in kept)
    return ClusterView(
        gpu_types=gpu_types,
        nodes=nodes,
        node_pool=tuple(c[1] for c in kept),
        node_type=np.array([type_idx[c[1].gpu_type] for c in kept], dtype=np.int64).reshape(-1),
        node_gpus=np.array([c[2] for c in kept], dtype=np.int64).reshape(-1),
        node_foreign=np.array([c[3] for c in kept], dtype=np.int64).reshape(-1),
        type_capacity=np.array([type_capacity[t] for t in gpu_types], dtype=np.float64),
        pool_nodes={name: st.nodes for name, st in pools.items()},
        node_foreign_use=tuple(dict(foreign.get(n.name, {})) for n in nodes),
        pools=pools,
        empty_types=empty_types,
    )


def _whole(x: float) -> int:
    """A resource count as an int, clipped to what int64 arrays hold (absurd quantities)."""
    return int(min(max(float(x), 0.0), 2.0**62))


def remaining_work(job: model.JobSpec, snap: Snapshot) -> float | None:
    """``totalWork − work done`` (≥ 0), or None when the job declares no ``totalWork``."""
    if job.total_work is None:
        return None
    done = snap.progress.get(job.key, JobProgress()).work_done
    return max(job.total_work - done, 0.0)


def seconds_since_arrival(job: model.JobSpec, snap: Snapshot) -> float:
    """Seconds from the job's arrival to the snapshot (0 if it arrived later)."""
    arrival = snap.progress.get(job.key, JobProgress(arrival=job.created)).arrival
    return max(snap.taken_at - arrival, 0.0)

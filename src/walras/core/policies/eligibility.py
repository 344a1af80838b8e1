"""Which GPU types (and how many pods) a job's gang can use in this round's cluster view.

Called by every policy before it solves: a job that no pool can run gets a :class:`JobIssue`
instead of a row in the problem, so one impossible job never fails the solve for everyone. A node
can hold a job's pod only if it passes kube-scheduler's filters (``walras.core.filters``: not
cordoned, taints tolerated, nodeSelector and required node affinity matched) and the pod's
requests fit in its allocatable minus what foreign pods request there, resource by resource
(GPUs of the pool's ``resourceName``, cpu, memory, hugepages, pod count). So a type is usable
when the pods that fit on its eligible nodes, ``Σ_k min_r ⌊free_r(k) / request_r⌋``, hold the
gang. The realiser (``walras.core.realise``) places pods under the same rules.

Issues, in order: ``NoPoolForThroughput`` (no pool offers a type the job has throughput on),
``NoCapacity`` (its pools exist but offer nothing: no ready node, all cordoned),
a filter's reason when no node passes the filters (``NoMatchingNodes`` for nodeSelector and
affinity, ``UntoleratedTaint``, ``NodesUnschedulable``, ``InsufficientResources``), with
kube-scheduler's counts (``0/4 nodes are available: 4 node(s) had untolerated taint {a: b}.``),
and ``GangTooLarge`` when nodes pass but the gang does not fit at once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from walras.core import filters, model, snapshot
from walras.core.policies.base import JobIssue

# Issue reason per filter that rejected the most nodes.
FILTER_REASONS = {
    filters.AFFINITY: "NoMatchingNodes",
    filters.TAINTS: "UntoleratedTaint",
    filters.UNSCHEDULABLE: "NodesUnschedulable",
    filters.RESOURCES: "InsufficientResources",
}


def _types_text(types: Sequence[str]) -> str:
    return ", ".join(types) if types else "none"


@dataclass(frozen=True, slots=True)
class TypeFit:
    """One job shape on one GPU type: eligible nodes and pods per node, and why others failed."""

    nodes: npt.NDArray[np.int64]  # view indices of the type's nodes that pass every filter
    pods: npt.NDArray[np.int64]  # pods of the shape each of those nodes holds at once
    passed_static: bool  # some node passed the placement filters (before resource fit)
    diagnosis: filters.Diagnosis
    # ``nodes`` as a set, built on first use: the realiser asks it of every placement it
    # checks, and a fit is shared by every round on its view (``Capacity.of``).
    _node_set: frozenset[int] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def total(self) -> int:
        return int(self.pods.sum())

    @property
    def node_set(self) -> frozenset[int]:
        found = self._node_set
        if found is None:
            found = frozenset(self.nodes.tolist())
            object.__setattr__(self, "_node_set", found)
        return found


def job_shape(job: model.JobSpec) -> Hashable:
    """What the filters read of a job: jobs of one shape share every per-node answer (its node
    selector, tolerations, affinity, requests and GPU limits; built with the job)."""
    return job.filter_shape


class Capacity:
    """Per GPU type, the nodes and how many pods of a given job shape fit, memoised per round.

    Jobs mostly share a few shapes, so a round with thousands of jobs answers each (type, shape)
    once instead of filtering every node per job. Every answer depends on the view alone, so
    :meth:`of` shares one instance among all phases of a round, and among rounds that reuse the
    same view (``snapshot.cluster_view`` hands back the last one while the nodes, pools and
    foreign pods are unchanged).
    """

    @classmethod
    def of(cls, view: snapshot.ClusterView) -> Capacity:
        """The shared instance for ``view`` (a new one when the view is not the last one's)."""
        last = _LAST[0] if _LAST else None
        if last is not None and last.view is view:
            return last
        made = cls(view)
        _LAST[:] = [made]
        return made

    def __init__(self, view: snapshot.ClusterView) -> None:
        self.view = view
        self.free = np.maximum(view.node_gpus - view.node_foreign, 0)
        self.free.flags.writeable = False  # shared (see ``of``)
        self.type_nodes = {
            t: np.flatnonzero(view.node_type == g) for g, t in enumerate(view.gpu_types)
        }
        self._memo: dict[tuple[str, Hashable], TypeFit] = {}
        # usable_types per (shape, gang, types with throughput): jobs of one kind share it.
        self._usable: dict[Hashable, tuple[dict[str, bool], JobIssue | None]] = {}
        # gang_nodes per (shape, gang, types with throughput), likewise.
        self._gang_nodes: dict[Hashable, npt.NDArray[np.bool_]] = {}

    def type_fit(self, job: model.JobSpec, gpu_type: str) -> TypeFit:
        """The filters and resource fit of ``job``'s pods on every node of ``gpu_type``."""
        key = (gpu_type, job_shape(job))
        found = self._memo.get(key)
        if found is not None:
            return found
        view = self.view
        diag = filters.Diagnosis()
        nodes: list[int] = []
        pods: list[int] = []
        passed_static = False
        for k in self.type_nodes.get(gpu_type, np.zeros(0, dtype=np.int64)).tolist():
            node = view.nodes[k]
            verdict = filters.job_placement(job, node)
            if verdict.ok:
                passed_static = True
                requests = job.pod_requests(view.node_pool[k].resource_name)
                used = view.node_foreign_use[k] if view.node_foreign_use else {}
                count = filters.max_pods(requests, node.allocatable, used)
                if count < 1:
                    verdict = filters.resource_fit(requests, node.allocatable, used)
                else:
                    nodes.append(k)
                    pods.append(count)
            diag.add(verdict)
        node_array = np.array(nodes, dtype=np.int64)
        pod_array = np.array(pods, dtype=np.int64)
        node_array.flags.writeable = pod_array.flags.writeable = False  # shared (see ``of``)
        fit = TypeFit(node_array, pod_array, passed_static, diag)
        self._memo[key] = fit
        return fit

    def gang_nodes(self, job: model.JobSpec) -> npt.NDArray[np.bool_]:
        """Per node of the view: whether ``job``'s whole gang fits in the node's free GPUs, on
        the nodes of the types it has a throughput on that hold at least one of its pods (a gang
        on one node, PS-DSF's placement group). Read-only and shared: it depends on the job only
        through its shape, gang size and those types, so jobs of one kind get one array."""
        types = frozenset(t for t, a in job.throughput.items() if a > 0 and t in self.type_nodes)
        key = (job_shape(job), job.replicas, types)
        found = self._gang_nodes.get(key)
        if found is not None:
            return found
        row = np.zeros(len(self.view.nodes), dtype=bool)
        for gpu_type in types:  # the types' nodes are disjoint: any order gives one row
            ks = self.type_fit(job, gpu_type).nodes
            if ks.size == 0:
                continue
            per_pod = job.gpus_per_pod(self.view.node_pool[int(ks[0])].resource_name)
            row[ks] = job.replicas * per_pod <= self.free[ks]
        row.flags.writeable = False  # shared (see ``of``)
        self._gang_nodes[key] = row
        return row

    def fit(self, job: model.JobSpec, gpu_type: str) -> tuple[bool, int]:
        """(some node passes the job's filters, pods of the job's shape that fit at once)."""
        found = self.type_fit(job, gpu_type)
        return found.passed_static, found.total


# The instance Capacity.of handed out last (one: a round works on one view).
_LAST: list[Capacity] = []


def _filter_field(job: model.JobSpec, main: str) -> str:
    if main == filters.AFFINITY:
        if job.node_selector:
            return "spec.template.spec.nodeSelector"
        return "spec.template.spec.affinity"
    if main in (filters.TAINTS, filters.UNSCHEDULABLE):
        return "spec.template.spec.tolerations"
    return "spec.template.spec.containers[*].resources"


def usable_types(
    job: model.JobSpec, view: snapshot.ClusterView, capacity: Capacity | None = None
) -> tuple[dict[str, bool], JobIssue | None]:
    """Per GPU type, whether the job's gang can run there; an issue if it can run nowhere.

    The answer depends on the job only through its shape (:func:`job_shape`), its gang size and
    the types it has a throughput on, so ``capacity`` remembers it per those for the round."""
    capacity = capacity or Capacity.of(view)
    positive = [t for t, a in job.throughput.items() if a > 0]
    memo_key = (job_shape(job), job.replicas, tuple(positive))
    found = capacity._usable.get(memo_key)
    if found is None:
        found = capacity._usable[memo_key] = _usable_types(job, view, capacity, positive)
    usable, issue = found
    return dict(usable), (None if issue is None else replace(issue, key=job.key))


def _usable_types(
    job: model.JobSpec, view: snapshot.ClusterView, capacity: Capacity, positive: list[str]
) -> tuple[dict[str, bool], JobIssue | None]:
    offered = [t for t in positive if t in view.gpu_types]
    if not offered:
        empty = [t for t in positive if t in view.empty_types]
        if empty:
            return {}, JobIssue(
                job.key,
                "spec.throughput",
                "NoCapacity",
                f"throughput > 0 only on {_types_text(positive)}, whose pools offer no GPUs now: "
                + "; ".join(view.empty_types[t] for t in empty),
            )
        return {}, JobIssue(
            job.key,
            "spec.throughput",
            "NoPoolForThroughput",
            f"throughput > 0 only on {_types_text(positive)}; no ResourcePool offers those "
            f"types (pools offer {_types_text(view.gpu_types)})",
        )
    usable: dict[str, bool] = {}
    total = filters.Diagnosis()
    any_node = False
    for gpu_type in offered:
        found = capacity.type_fit(job, gpu_type)
        any_node = any_node or found.nodes.size > 0
        usable[gpu_type] = found.total >= job.replicas
        total.nodes += found.diagnosis.nodes
        total.available += found.diagnosis.available
        for reason, n in found.diagnosis.counts.items():
            total.counts[reason] = total.counts.get(reason, 0) + n
        for name, n in found.diagnosis.filters.items():
            total.filters[name] = total.filters.get(name, 0) + n
    if not any_node:
        main = total.main_filter()
        return usable, JobIssue(
            job.key,
            _filter_field(job, main),
            FILTER_REASONS.get(main, "NoMatchingNodes"),
            f"on {_types_text(offered)}: {total.message()} (filter {main})",
        )
    if not any(usable.values()):
        sizes = ", ".join(
            f"{t} holds {capacity.type_fit(job, t).total} of its pods" for t in offered
        )
        return usable, JobIssue(
            job.key,
            "spec.replicas",
            "GangTooLarge",
            f"gang of {job.replicas} pods does not fit in any pool it can use ({sizes}; "
            f"{total.message()})",
        )
    return usable, None


def usable_throughput(
    jobs: Sequence[model.JobSpec], masks: Sequence[Sequence[bool]], types: Sequence[str]
) -> npt.NDArray[np.float64]:
    """``(J, T)``: each job's ``spec.throughput`` on the types its gang can use, 0 elsewhere."""
    return np.array(
        [
            [j.throughput.get(t, 0.0) if m[g] else 0.0 for g, t in enumerate(types)]
            for j, m in zip(jobs, masks, strict=True)
        ],
        dtype=np.float64,
    ).reshape(len(jobs), len(types))


def total_work_required(job: model.JobSpec, policy: str, why: str) -> JobIssue:
    """The issue of a job without ``spec.totalWork`` under a policy that needs it (``why``)."""
    return JobIssue(
        job.key, "spec.totalWork", "TotalWorkRequired", f"policy {policy} {why}; set spec.totalWork"
    )

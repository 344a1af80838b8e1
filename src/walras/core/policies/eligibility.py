"""Which GPU types (and how many pods) a job's gang can use in this round's cluster view.

Called by every policy before it solves: a job that no pool can run (no type with throughput > 0,
nodeSelector matching no node, gang larger than every pool) gets a :class:`JobIssue` instead of a
row in the problem, so one impossible job never fails the solve for everyone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from walras.core import model, snapshot
from walras.core.policies.base import JobIssue


def _types_text(types: Sequence[str]) -> str:
    return ", ".join(types) if types else "none"


def _selector_matches(job: model.JobSpec, node: model.NodeInfo) -> bool:
    return all(node.labels.get(k) == v for k, v in job.node_selector.items())


class Capacity:
    """Per GPU type, the nodes and how many pods of a given size fit, memoised per round.

    Jobs mostly share a few (type, nodeSelector, GPUs per pod) combinations, so a round with
    thousands of jobs answers each combination once instead of scanning every node per job.
    """

    def __init__(self, view: snapshot.ClusterView) -> None:
        self.view = view
        self.free = np.maximum(view.node_gpus - view.node_foreign, 0)
        self.type_nodes = {
            t: np.flatnonzero(view.node_type == g) for g, t in enumerate(view.gpu_types)
        }
        self._memo: dict[tuple[str, tuple[tuple[str, str], ...], int], tuple[bool, int]] = {}

    def nodes_matching(self, job: model.JobSpec, gpu_type: str) -> list[int]:
        return [
            int(k)
            for k in self.type_nodes.get(gpu_type, ())
            if _selector_matches(job, self.view.nodes[k])
        ]

    def fit(self, job: model.JobSpec, gpu_type: str) -> tuple[bool, int]:
        """(some node matches the job's selector, pods of the job's size that fit at once)."""
        nodes = self.type_nodes.get(gpu_type)
        if nodes is None or nodes.size == 0:
            return False, 0
        gpp = job.gpus_per_pod(self.view.node_pool[int(nodes[0])].resource_name)
        key = (gpu_type, tuple(sorted(job.node_selector.items())), gpp)
        if key not in self._memo:
            matching = self.nodes_matching(job, gpu_type)
            pods = int((self.free[matching] // max(gpp, 1)).sum()) if matching else 0
            self._memo[key] = (bool(matching), pods)
        return self._memo[key]


def usable_types(
    job: model.JobSpec, view: snapshot.ClusterView, capacity: Capacity | None = None
) -> tuple[dict[str, bool], JobIssue | None]:
    """Per GPU type, whether the job's gang can run there; an issue if it can run nowhere."""
    capacity = capacity or Capacity(view)
    positive = [t for t, a in job.throughput.items() if a > 0]
    offered = [t for t in positive if t in view.gpu_types]
    if not offered:
        return {}, JobIssue(
            job.key,
            "spec.throughput",
            "NoPoolForThroughput",
            f"throughput > 0 only on {_types_text(positive)}; no ResourcePool offers those "
            f"types (pools offer {_types_text(view.gpu_types)})",
        )
    usable: dict[str, bool] = {}
    selector_ok = False
    for gpu_type in offered:
        matches, pods = capacity.fit(job, gpu_type)
        selector_ok = selector_ok or matches
        usable[gpu_type] = pods >= job.replicas
    if not selector_ok:
        return usable, JobIssue(
            job.key,
            "spec.template.spec.nodeSelector",
            "NoMatchingNodes",
            f"nodeSelector {dict(job.node_selector)} matches no node of {_types_text(offered)}",
        )
    if not any(usable.values()):
        sizes = ", ".join(f"{t} holds {view.max_pods_on_type(t, 1)} GPUs" for t in offered)
        return usable, JobIssue(
            job.key,
            "spec.replicas",
            "GangTooLarge",
            f"gang of {job.replicas} pods does not fit in any pool it can use ({sizes})",
        )
    return usable, None

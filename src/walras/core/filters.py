"""kube-scheduler's core filters, for the nodes Walras binds its pods to.

Walras binds pods itself (``pods/binding``), so nothing else checks that a pod may run on its
node: the kubelet would reject it (``OutOfcpu``) or, worse, run it where a taint or an affinity
forbids it. Each filter here is the pure counterpart of a kube-scheduler plugin and returns a
:class:`Verdict` whose ``reason`` is the plugin's own text:

- :func:`unschedulable` (NodeUnschedulable): ``node(s) were unschedulable``;
- :func:`taints` (TaintToleration): ``node(s) had untolerated taint {k: v}``;
- :func:`node_selector`, :func:`node_affinity` (NodeAffinity):
  ``node(s) didn't match Pod's node affinity/selector``;
- :func:`resource_fit` (NodeResourcesFit): ``Insufficient cpu`` (one per resource),
  ``Too many pods``.

Resource fit: a pod fits when for every resource ``r`` it requests,
``used[r] + request[r] <= allocatable[r]`` where ``used`` sums the requests of every pod already
on the node (Walras's and everyone else's), and one more pod fits under ``allocatable[pods]``.
Example: allocatable cpu 32, pods there request 30, the pod requests 4 → ``Insufficient cpu``.

:class:`Diagnosis` aggregates the verdicts over nodes like kube-scheduler's ``FitError``:
``0/200 nodes are available: 150 node(s) had untolerated taint {gpu: a100}, 50 Insufficient cpu.``
Only ``NoSchedule`` and ``NoExecute`` taints filter (``PreferNoSchedule`` only scores).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from walras.core import model

# Plugin names (the ``filter`` of a verdict; also the reasons of the job's condition).
UNSCHEDULABLE = "NodeUnschedulable"
TAINTS = "TaintToleration"
AFFINITY = "NodeAffinity"
RESOURCES = "NodeResourcesFit"
NOT_READY = "NodeNotReady"

UNSCHEDULABLE_TAINT = model.Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# Relative slack on resource sums: quantities like 0.1 cpu add up with float rounding.
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one filter on one node: ``ok``, or the plugin and kube-scheduler's text."""

    ok: bool
    filter: str = ""
    reasons: tuple[str, ...] = ()


PASS = Verdict(True)


def unschedulable(node: model.NodeInfo, tolerations: Sequence[model.Toleration]) -> Verdict:
    """A cordoned node passes only for pods tolerating ``node.kubernetes.io/unschedulable``."""
    if node.schedulable or any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations):
        return PASS
    return Verdict(False, UNSCHEDULABLE, ("node(s) were unschedulable",))


def taints(node: model.NodeInfo, tolerations: Sequence[model.Toleration]) -> Verdict:
    """Every NoSchedule/NoExecute taint of the node is tolerated (the first one that is not
    is named)."""
    for taint in node.taints:
        if taint.effect not in _FILTERING_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return Verdict(
                False, TAINTS, (f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",)
            )
    return PASS


_AFFINITY_TEXT = ("node(s) didn't match Pod's node affinity/selector",)


def node_selector(node: model.NodeInfo, selector: Mapping[str, str]) -> Verdict:
    """Every label of the pod's ``nodeSelector`` is on the node with that value."""
    if all(node.labels.get(k) == v for k, v in selector.items()):
        return PASS
    return Verdict(False, AFFINITY, _AFFINITY_TEXT)


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(node: model.NodeInfo, req: model.Requirement) -> bool:
    """One ``matchExpressions`` (labels) or ``matchFields`` (``metadata.name``) requirement."""
    if req.field:
        present, value = req.key == "metadata.name", node.name
    else:
        present, value = req.key in node.labels, node.labels.get(req.key, "")
    op = req.operator
    if op == "In":
        return present and value in req.values
    if op == "NotIn":
        return not present or value not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(req.values) == 1:
        have, bound = _integer(value), _integer(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def node_affinity(node: model.NodeInfo, terms: Sequence[model.NodeSelectorTerm]) -> Verdict:
    """Required node affinity: some term has all its requirements met (no terms: any node).

    A term without requirements matches no node (Kubernetes' ``NodeSelectorTerm`` semantics).
    """
    if not terms:
        return PASS
    for term in terms:
        if term and all(requirement_matches(node, r) for r in term):
            return PASS
    return Verdict(False, AFFINITY, _AFFINITY_TEXT)


def resource_fit(
    requests: Mapping[str, float],
    allocatable: Mapping[str, float],
    used: Mapping[str, float],
    pods: int = 1,
) -> Verdict:
    """``pods`` more pods of ``requests`` fit in ``allocatable − used``, resource by resource.

    ``used`` carries the requests of the pods on the node and their count under ``"pods"``; a
    node that reports no ``pods`` allocatable is not limited in pod count.
    """
    short: list[str] = []
    if "pods" in allocatable and used.get("pods", 0.0) + pods > allocatable["pods"]:
        short.append("Too many pods")
    for name in sorted(requests):
        need = requests[name] * pods
        if need <= 0 or name == "pods":
            continue
        have = allocatable.get(name, 0.0) - used.get(name, 0.0)
        if need > have + _EPS * max(1.0, abs(have)):
            short.append(f"Insufficient {name}")
    return Verdict(False, RESOURCES, tuple(short)) if short else PASS


def placement(
    node: model.NodeInfo,
    *,
    tolerations: Sequence[model.Toleration] = (),
    selector: Mapping[str, str] | None = None,
    affinity: Sequence[model.NodeSelectorTerm] = (),
) -> Verdict:
    """The static filters in kube-scheduler's order (the first failing one is reported)."""
    for verdict in (
        unschedulable(node, tolerations),
        taints(node, tolerations),
        node_selector(node, selector or {}),
        node_affinity(node, affinity),
    ):
        if not verdict.ok:
            return verdict
    return PASS


def job_placement(job: model.JobSpec, node: model.NodeInfo) -> Verdict:
    """:func:`placement` with the job's template (tolerations, nodeSelector, affinity)."""
    return placement(
        node, tolerations=job.tolerations, selector=job.node_selector, affinity=job.affinity
    )


def max_pods(
    requests: Mapping[str, float], allocatable: Mapping[str, float], used: Mapping[str, float]
) -> int:
    """How many pods of ``requests`` fit at once in ``allocatable − used`` (pod count included)."""
    best = float("inf")
    if "pods" in allocatable:
        best = allocatable["pods"] - used.get("pods", 0.0)
    for name, need in requests.items():
        if need <= 0 or name == "pods":
            continue
        have = allocatable.get(name, 0.0) - used.get(name, 0.0)
        best = min(best, (have + _EPS * max(1.0, abs(have))) // need)
    if best == float("inf"):
        return 1 << 30  # nothing requested and no pod limit: not limited by resources
    return max(int(best), 0)


def add_usage(used: dict[str, float], requests: Mapping[str, float], pods: int = 1) -> None:
    """Add ``pods`` pods of ``requests`` to a node's usage (in place)."""
    for name, value in requests.items():
        if name != "pods":
            used[name] = used.get(name, 0.0) + value * pods
    used["pods"] = used.get("pods", 0.0) + pods


@dataclass(slots=True)
class Diagnosis:
    """Why the nodes considered for a pod were rejected, counted like kube-scheduler's FitError."""

    nodes: int = 0
    available: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    filters: dict[str, int] = field(default_factory=dict)

    def add(self, verdict: Verdict) -> None:
        self.nodes += 1
        if verdict.ok:
            self.available += 1
            return
        self.filters[verdict.filter] = self.filters.get(verdict.filter, 0) + 1
        for reason in verdict.reasons:
            self.counts[reason] = self.counts.get(reason, 0) + 1

    def extend(self, verdicts: Iterable[Verdict]) -> None:
        for verdict in verdicts:
            self.add(verdict)

    def main_filter(self) -> str:
        """The filter that rejected the most nodes (ties: by name)."""
        if not self.filters:
            return ""
        return min(self.filters, key=lambda f: (-self.filters[f], f))

    def message(self) -> str:
        """``0/200 nodes are available: 150 node(s) had untolerated taint {k: v}, ...``."""
        head = f"{self.available}/{self.nodes} nodes are available"
        if not self.counts:
            return head + "."
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.counts.items()))
        return f"{head}: {parts}."

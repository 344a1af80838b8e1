"""What Walras needs to know of a workload kind it adopts (a batch/v1 Job, a JobSet, ...).

An adapter reads one object of its kind as plain data and answers, without talking to the API
server:

- its **gang**: how many pods run at once, the GPUs each asks for, the pod template
  (:class:`Gang`); an object that is not a gang Walras can run raises :class:`BadWorkloadError`
  naming the field;
- whether it is **suspended**, and the patch that suspends it;
- the patch that **starts** it on chosen nodes: node affinity, labels and annotations on its
  suspended pod template (the fields Kubernetes lets change while a Job is suspended), and
  ``suspend: false``;
- whether it **finished** or failed, from its own conditions;
- which **replica** of the gang a pod of it is (from the labels its controller puts on pods).

The shape follows Kueue's job framework (its ``GenericJob`` interface: ``IsSuspended``,
``Suspend``, ``RunWithPodSetsInfo``, ``Finished``, ``PodSets``): one file per kind and one line in
:mod:`walras.core.adapters` to register it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from walras.core import crd

# The opt-in label (Kueue's pattern is a queue-name label).
LABEL_MANAGED = "walras.dev/managed"
# Optional annotations on the workload for what a FungibleJob says in its spec.
ANN_THROUGHPUT = "walras.dev/throughput"  # "a100=2.5,v100=1.2": work/s of the gang per type
ANN_TOTAL_WORK = "walras.dev/total-work"  # "1000": work units after which it is done
ANN_UTILITY = "walras.dev/utility"  # log | linear (spec.utility.kind)
ANN_WEIGHT = "walras.dev/weight"  # spec.utility.weight
# Written by Walras on the template of a started workload, hence on its pods: the mirror's uid
# (which FungibleJob the pods belong to) and, by replica, the node each pod goes to.
LABEL_MIRROR_UID = "walras.dev/mirror-uid"
ANN_NODES = "walras.dev/nodes"
# ... and the workload's kind, so that a pod's replica is read by the right adapter.
ANN_WORKLOAD_KIND = "walras.dev/workload-kind"

# The annotations Walras puts on its own pods that also go on a started workload's template
# (ANN_NODE is per pod: a template carries ANN_NODES instead).
TEMPLATE_ANNOTATIONS = (
    crd.ANN_ROUND,
    crd.ANN_GPU_TYPE,
    crd.ANN_TIME_SLICE,
    crd.ANN_PRICE,
    crd.ANN_GROUP,
)


class BadWorkloadError(Exception):
    """The workload is not a gang Walras can run; ``field`` names the culprit."""

    def __init__(self, field: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.field, self.reason, self.message = field, reason, message


@dataclass(frozen=True, slots=True)
class Kind:
    """Where a kind lives in the API."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True, slots=True)
class Gang:
    """The pods of a workload that run at once: ``replicas`` alike pods from ``template``."""

    replicas: int
    gpus_per_pod: int
    resource_name: str
    template: Mapping[str, Any]
    # Failures the workload's own controller tolerates (a Job's spec.backoffLimit); None: unsaid.
    backoff_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """One start: the node of each replica, and the labels and annotations its pods carry."""

    nodes: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished workload: ``phase`` Succeeded or Failed, with its condition's words."""

    phase: str
    reason: str
    message: str


class Adapter(Protocol):
    """One workload kind (module docstring)."""

    kind: Kind

    def gang(self, obj: Mapping[str, Any]) -> Gang: ...

    def suspended(self, obj: Mapping[str, Any]) -> bool: ...

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def start_patch(self, obj: Mapping[str, Any], start: Start) -> dict[str, Any]: ...

    def outcome(self, obj: Mapping[str, Any]) -> Outcome | None: ...

    def replica(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None: ...


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def gpus_of(template: Mapping[str, Any], resource_name: str, where: str) -> int:
    """Whole GPUs one pod of ``template`` asks for (``resource_name`` in any container's limits
    or requests, summed over containers); :class:`BadWorkloadError` when none or not whole."""
    spec = mapping(template.get("spec"))
    total = 0.0
    for i, c in enumerate(spec.get("containers") or []):
        resources = mapping(mapping(c).get("resources"))
        value = mapping(resources.get("limits")).get(resource_name)
        if value is None:
            value = mapping(resources.get("requests")).get(resource_name)
        if value is None:
            continue
        try:
            total += float(str(value))
        except ValueError:
            raise BadWorkloadError(
                f"{where}.spec.containers[{i}].resources.limits[{resource_name}]",
                "InvalidGPURequest",
                f"{resource_name} must be a whole number, got {value!r}",
            ) from None
    if total <= 0 or total != int(total):
        raise BadWorkloadError(
            f"{where}.spec.containers[*].resources.limits[{resource_name}]",
            "NoGPURequest",
            f"no container asks for a whole number of {resource_name} (got {total:g}): "
            "Walras places GPU gangs only",
        )
    return int(total)


def required_node_affinity(nodes: Sequence[str]) -> dict[str, Any]:
    """Node affinity that admits exactly ``nodes`` (by hostname)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": sorted(set(nodes)),
                            }
                        ]
                    }
                ]
            }
        }
    }


def template_patch(template: Mapping[str, Any], start: Start) -> dict[str, Any]:
    """The suspended template's new metadata and affinity for ``start`` (a merge patch of
    ``template``): its own labels and annotations kept, Walras's added, the node of each replica
    in ``walras.dev/nodes``, and node affinity to those nodes (other affinity kept)."""
    meta = mapping(template.get("metadata"))
    labels = {**mapping(meta.get("labels")), **start.labels}
    annotations = {
        **mapping(meta.get("annotations")),
        **start.annotations,
        ANN_NODES: ",".join(start.nodes),
    }
    affinity = dict(mapping(mapping(template.get("spec")).get("affinity")))
    affinity.update(required_node_affinity(start.nodes))
    return {
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {"affinity": affinity},
    }


def node_of(annotations: Mapping[str, str], replica: int) -> str:
    """The node ``walras.dev/nodes`` gives replica ``replica`` ('' when none)."""
    nodes = [n for n in annotations.get(ANN_NODES, "").split(",") if n]
    return nodes[replica] if 0 <= replica < len(nodes) else ""


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The object's ``status.conditions`` entry of type ``kind`` when its status is True."""
    for c in mapping(obj.get("status")).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
            return c
    return None

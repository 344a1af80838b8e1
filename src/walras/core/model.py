"""Typed views of the API objects the operator reads: FungibleJob, ResourcePool, Node, Pod.

The watch handlers call ``parse_*`` once per event, so a round never re-parses the cluster. A
FungibleJob that the CRD schema accepted but that makes no sense (``targetPriority`` without a
target, a GPU limit of 0, throughput 0 everywhere) parses into a :class:`JobDefect` naming the
field, which becomes an ``Admitted=False`` condition on the job; it never raises. Quantities
follow the Kubernetes grammar (``500m``, ``256Gi``, ``1e3``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from walras.core import crd

JobKey = tuple[str, str]
"""(namespace, name) of a FungibleJob or Pod; sorting these gives the stable order."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_DECIMAL |= {"P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")

# CRD utility kinds -> the allocator's names (walras.allocator.pricing.PricingProblem.kind).
UTILITY_KINDS: Mapping[str, str] = {
    "log": "log",
    "linear": "linear",
    "targetPriority": "target",
    "alphaFair": "alpha",
}


def quantity(value: object, default: float = 0.0) -> float:
    """A Kubernetes quantity as a float (``"500m"`` -> 0.5, ``"2Gi"`` -> 2147483648)."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = float(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    raise ValueError(f"unknown quantity suffix {suffix!r} in {value!r}")


def parse_time(value: object) -> float | None:
    """RFC 3339 (``2026-11-22T07:45:56Z``, optional fraction) as epoch seconds; None if absent."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(epoch: float) -> str:
    """Epoch seconds as RFC 3339 UTC with microseconds (what status fields carry)."""
    stamp = dt.datetime.fromtimestamp(epoch, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value).items()}


@dataclass(frozen=True, slots=True)
class Utility:
    """``spec.utility`` in the allocator's vocabulary (``kind`` is log|linear|target|alpha)."""

    kind: str = "log"
    weight: float = 1.0
    target: float = 0.0
    alpha: float = 2.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One FungibleJob whose spec makes sense (the schema and :func:`parse_job` both passed)."""

    namespace: str
    name: str
    uid: str
    generation: int
    created: float
    tenant: str
    replicas: int
    throughput: Mapping[str, float]
    utility: Utility
    priority: int
    total_work: float | None
    template: Mapping[str, Any]
    gpu_limits: Mapping[str, int]
    cpu: float
    memory: float
    node_selector: Mapping[str, str]
    status: Mapping[str, Any] = dataclasses.field(compare=False)

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")

    @property
    def finished(self) -> bool:
        return self.phase in crd.TERMINAL_PHASES

    def gpus_per_pod(self, resource_name: str) -> int:
        """GPUs each pod asks of a pool using ``resource_name`` (first container's limit, or 1)."""
        return self.gpu_limits.get(resource_name, 1)


@dataclass(frozen=True, slots=True)
class JobDefect:
    """A FungibleJob the operator cannot schedule; ``field`` names the culprit in the spec."""

    namespace: str
    name: str
    uid: str
    tenant: str
    generation: int
    field: str
    reason: str
    message: str
    status: Mapping[str, Any] = dataclasses.field(compare=False)

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One ResourcePool."""

    name: str
    gpu_type: str
    node_selector: Mapping[str, str]
    resource_name: str
    capacity_override: int | None
    generation: int
    status: Mapping[str, Any] = dataclasses.field(compare=False)

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` belongs to this pool (every selector label matches).

        An empty selector selects nodes labelled ``walras.dev/gpu-type=<gpuType>``: selecting
        every node of the cluster would mix GPU types into one pool.
        """
        selector = self.node_selector or {crd.GPU_TYPE_LABEL: self.gpu_type}
        return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The parts of a Node that scheduling needs."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, float]
    ready: bool
    schedulable: bool

    def resource(self, name: str) -> float:
        return self.allocatable.get(name, 0.0)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod: Walras's own (``job`` set) or a foreign one that uses GPUs on some node."""

    namespace: str
    name: str
    uid: str
    job: str
    replica: int
    node: str
    planned_node: str
    group: str
    phase: str
    terminating: bool
    round: int
    requests: Mapping[str, float]

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)

    @property
    def job_key(self) -> JobKey:
        return (self.namespace, self.job)

    @property
    def finished(self) -> bool:
        return self.phase in crd.TERMINAL_PHASES

    @property
    def where(self) -> str:
        """The node the pod is on, or is planned for when not bound yet."""
        return self.node or self.planned_node


def _defect(obj: Mapping[str, Any], fld: str, reason: str, message: str) -> JobDefect:
    meta = _mapping(obj.get("metadata"))
    namespace = str(meta.get("namespace", ""))
    return JobDefect(
        namespace=namespace,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        tenant=str(_mapping(obj.get("spec")).get("tenant") or namespace),
        generation=int(meta.get("generation") or 0),
        field=fld,
        reason=reason,
        message=message,
        status=_mapping(obj.get("status")),
    )


def _container_resources(template: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    containers = _mapping(template.get("spec")).get("containers") or []
    if not isinstance(containers, list) or not containers:
        return ()
    first = _mapping(containers[0])
    res = _mapping(first.get("resources"))
    return _mapping(res.get("limits")), _mapping(res.get("requests"))


def parse_job(obj: Mapping[str, Any]) -> JobSpec | JobDefect:
    """Parse a FungibleJob dict; semantic problems come back as a :class:`JobDefect`."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    namespace = str(meta.get("namespace", ""))
    name = str(meta.get("name", ""))
    template = _mapping(spec.get("template"))
    resources = _container_resources(template)
    if not resources:
        return _defect(obj, "spec.template.spec.containers", "InvalidTemplate", "no containers")
    limits, requests = resources
    gpu_limits: dict[str, int] = {}
    try:
        for res_name, value in limits.items():
            if res_name in ("cpu", "memory", "ephemeral-storage") or res_name.startswith(
                "hugepages-"
            ):
                continue
            count = quantity(value)
            if count != int(count) or count < 1:
                return _defect(
                    obj,
                    f"spec.template.spec.containers[0].resources.limits[{res_name}]",
                    "InvalidGPULimit",
                    f"GPUs per pod must be a whole number >= 1, got {value}",
                )
            gpu_limits[str(res_name)] = int(count)
        cpu = quantity(requests.get("cpu"), 0.0)
        memory = quantity(requests.get("memory"), 0.0)
    except ValueError as exc:
        return _defect(
            obj, "spec.template.spec.containers[0].resources", "InvalidQuantity", str(exc)
        )
    throughput_raw = _mapping(spec.get("throughput"))
    throughput: dict[str, float] = {}
    for gpu_type, value in sorted(throughput_raw.items()):
        try:
            a = float(value)
        except (TypeError, ValueError):
            return _defect(obj, f"spec.throughput.{gpu_type}", "InvalidThroughput", repr(value))
        if not math.isfinite(a) or a < 0:
            return _defect(
                obj, f"spec.throughput.{gpu_type}", "InvalidThroughput", f"{a} is not >= 0"
            )
        throughput[str(gpu_type)] = a
    if not any(a > 0 for a in throughput.values()):
        return _defect(
            obj,
            "spec.throughput",
            "ZeroThroughput",
            "throughput is 0 on every GPU type, so no allocation has any value",
        )
    util_raw = _mapping(spec.get("utility"))
    kind_crd = str(util_raw.get("kind", "log"))
    if kind_crd not in UTILITY_KINDS:
        return _defect(obj, "spec.utility.kind", "InvalidUtility", f"unknown kind {kind_crd!r}")
    weight = float(util_raw.get("weight", 1.0))
    target = util_raw.get("target")
    alpha = float(util_raw.get("alpha", 2.0))
    if not weight > 0:
        return _defect(obj, "spec.utility.weight", "InvalidUtility", f"weight {weight} <= 0")
    if kind_crd == "targetPriority" and (target is None or float(target) <= 0):
        return _defect(
            obj,
            "spec.utility.target",
            "InvalidUtility",
            "targetPriority needs a target throughput > 0",
        )
    if kind_crd == "alphaFair" and (alpha <= 0 or alpha == 1.0):
        return _defect(
            obj, "spec.utility.alpha", "InvalidUtility", f"alphaFair needs alpha > 0, != 1: {alpha}"
        )
    total_work = spec.get("totalWork")
    return JobSpec(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 0),
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        tenant=str(spec.get("tenant") or namespace),
        replicas=int(spec.get("replicas", 1)),
        throughput=throughput,
        utility=Utility(
            kind=UTILITY_KINDS[kind_crd],
            weight=weight,
            target=float(target) if target is not None else 0.0,
            alpha=alpha,
        ),
        priority=int(spec.get("priority") or 0),
        total_work=float(total_work) if total_work is not None else None,
        template=template,
        gpu_limits=gpu_limits,
        cpu=cpu,
        memory=memory,
        node_selector=_str_map(_mapping(template.get("spec")).get("nodeSelector")),
        status=_mapping(obj.get("status")),
    )


def parse_pool(obj: Mapping[str, Any]) -> PoolSpec:
    """Parse a ResourcePool dict (the schema already checked types and bounds)."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    override = spec.get("capacityOverride")
    return PoolSpec(
        name=str(meta.get("name", "")),
        gpu_type=str(spec.get("gpuType", "")),
        node_selector=_str_map(spec.get("nodeSelector")),
        resource_name=str(spec.get("resourceName") or crd.DEFAULT_RESOURCE_NAME),
        capacity_override=int(override) if override is not None else None,
        generation=int(meta.get("generation") or 0),
        status=_mapping(obj.get("status")),
    )


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    """Parse a Node dict; a node without a Ready=True condition is not ready."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    allocatable: dict[str, float] = {}
    for res_name, value in _mapping(status.get("allocatable")).items():
        try:
            allocatable[str(res_name)] = quantity(value)
        except ValueError:
            continue  # an exotic resource we cannot read does not make the node unusable
    ready = any(
        _mapping(c).get("type") == "Ready" and _mapping(c).get("status") == "True"
        for c in status.get("conditions") or []
    )
    return NodeInfo(
        name=str(meta.get("name", "")),
        labels=_str_map(meta.get("labels")),
        allocatable=allocatable,
        ready=ready,
        schedulable=not bool(spec.get("unschedulable")),
    )


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """Summed container requests of a pod; extended resources (GPUs) count via their limits."""
    total: dict[str, float] = {}
    for container in pod_spec.get("containers") or []:
        res = _mapping(_mapping(container).get("resources"))
        merged = {**_mapping(res.get("limits")), **_mapping(res.get("requests"))}
        for res_name, value in merged.items():
            try:
                total[str(res_name)] = total.get(str(res_name), 0.0) + quantity(value)
            except ValueError:
                continue
    return total


def parse_pod(obj: Mapping[str, Any]) -> PodInfo:
    """Parse a Pod dict (Walras's own when it carries the ``walras.dev/job`` label)."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    labels = _str_map(meta.get("labels"))
    annotations = _str_map(meta.get("annotations"))
    try:
        replica = int(labels.get(crd.LABEL_REPLICA, "0"))
    except ValueError:
        replica = 0
    try:
        round_no = int(annotations.get(crd.ANN_ROUND, "0"))
    except ValueError:
        round_no = 0
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        job=labels.get(crd.LABEL_JOB, ""),
        replica=replica,
        node=str(spec.get("nodeName") or ""),
        planned_node=annotations.get(crd.ANN_NODE, ""),
        group=annotations.get(crd.ANN_GROUP, ""),
        phase=str(_mapping(obj.get("status")).get("phase") or "Pending"),
        terminating=meta.get("deletionTimestamp") is not None,
        round=round_no,
        requests=pod_requests(spec),
    )

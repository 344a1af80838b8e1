"""Typed views of the API objects the operator reads: FungibleJob, ResourcePool, Node, Pod.

The watch handlers call ``parse_*`` once per event, so a round never re-parses the cluster. A
FungibleJob that the CRD schema accepted but that makes no sense (``targetPriority`` without a
target, a GPU limit of 0, throughput 0 everywhere) parses into a :class:`JobDefect` naming the
field, which becomes an ``Admitted=False`` condition on the job; it never raises, whatever the
object holds (a template whose ``resources`` is a string, a GPU limit of ``1e400``, a weight of
``"abc"``): ``walras.core.podtemplate`` checks the template's shapes as the API server would.
Quantities follow the Kubernetes grammar (``500m``, ``256Gi``, ``1e3``).

Resources are counted as Kubernetes counts them (``pod_requests``): per resource name, the sum
over containers, at least the largest initContainer, plus the pod's overhead; a limit without a
request is the request.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from walras.core import adapters, crd, podtemplate
from walras.core.progress import ANN_STEPS_DONE
from walras.core.quantity import quantity as quantity  # re-exported: the model's grammar
from walras.core.schema import fungiblejob as schema_fungiblejob
from walras.core.schema import limits
from walras.core.schema import parsing as schema_parsing
from walras.workload.identity import ANN_STOP_AT

JobKey = tuple[str, str]
"""(namespace, name) of a FungibleJob or Pod; sorting these gives the stable order."""

# CRD utility kinds -> the allocator's names (walras.allocator.pricing.PricingProblem.kind).
UTILITY_KINDS: Mapping[str, str] = {
    "log": "log",
    "linear": "linear",
    "targetPriority": "target",
    "alphaFair": "alpha",
}


def parse_time(value: object) -> float | None:
    """RFC 3339 (``YYYY-MM-DDThh:mm:ssZ``, optional fraction) as epoch seconds; None if absent."""
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


# Bounds on numbers a user sets: the CRD models' (walras.core.schema.limits), which the API server
# and parse_job enforce. They keep the solver's numbers far from float overflow: a weight of 1e308
# would otherwise hold a full share whatever everyone else asks.
MAX_WEIGHT = limits.MAX_WEIGHT
MAX_TARGET = limits.MAX_TARGET
MAX_ALPHA = limits.MAX_ALPHA
MAX_THROUGHPUT = limits.MAX_THROUGHPUT
MAX_TOTAL_WORK = limits.MAX_TOTAL_WORK
MAX_REPLICAS = limits.MAX_REPLICAS
# The job's name is the value of the pods' walras.dev/job label: at most 63 characters.
MAX_NAME = limits.MAX_NAME


@dataclass(frozen=True, slots=True)
class Utility:
    """``spec.utility`` in the allocator's vocabulary (``kind`` is log|linear|target|alpha)."""

    kind: str = "log"
    weight: float = 1.0
    target: float = 0.0
    alpha: float = 2.0


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (``spec.taints[]``)."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration; ``operator`` is ``Equal`` (also for "") or ``Exists``."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: an empty key with Exists matches all."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement (``matchExpressions`` or, with ``field``, ``matchFields``)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()
    field: bool = False


NodeSelectorTerm = tuple[Requirement, ...]
"""Requirements that must all hold; the terms of a required node affinity are ORed."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One FungibleJob whose spec makes sense (the schema and :func:`parse_job` both passed).

    ``requests`` are one pod's requests as Kubernetes counts them (``pod_requests`` of the
    template); ``gpu_limits`` the extended resources among them (whole numbers).
    """

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
    requests: Mapping[str, float] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] = ()
    # HadarE may run copies of the job on several nodes (spec.forkable; opt-in per job).
    forkable: bool = False
    # spec.profile: jobs alike for throughput estimation (walras.core.estimation); "" = image.
    profile: str = ""
    # spec.workloadRef.uid: the workload this job mirrors (walras.core.adapters); "" = none.
    workload_uid: str = ""
    # spec.template.spec.priorityClassName (walras.core.priorities); "" = none.
    priority_class: str = ""
    # (namespace, name), built once: every phase of a round looks jobs up by it.
    key: JobKey = dataclasses.field(init=False, repr=False, compare=False)
    # Whether ``status.phase`` is terminal, also built once: every round asks it of every job
    # several times (a status is never changed in place; ``dataclasses.replace`` rebuilds it).
    finished: bool = dataclasses.field(init=False, repr=False, compare=False)
    # What kube-scheduler's filters read of the job (``walras.core.policies.eligibility``'s
    # ``job_shape``), hashable: jobs of one shape share every per-node answer. Built once, as
    # the placement phases ask it of every job several times a round.
    filter_shape: Hashable = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.namespace, self.name))
        object.__setattr__(self, "finished", self.phase in crd.TERMINAL_PHASES)
        object.__setattr__(
            self,
            "filter_shape",
            (
                tuple(sorted(self.node_selector.items())),
                self.tolerations,
                self.affinity,
                tuple(sorted(self.requests.items())),
                tuple(sorted(self.gpu_limits.items())),
            ),
        )

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")

    def gpus_per_pod(self, resource_name: str) -> int:
        """GPUs each pod asks of a pool using ``resource_name`` (the pod's request, or 1)."""
        return self.gpu_limits.get(resource_name, 1)

    def pod_requests(self, resource_name: str) -> dict[str, float]:
        """One pod's requests on a node of a pool using ``resource_name`` (GPUs made explicit,
        as ``walras.core.realise.pod_manifest`` writes them)."""
        out = dict(self.requests)
        out[resource_name] = float(self.gpus_per_pod(resource_name))
        return out


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
    # spec.defaultThroughput: steps/s a job that says nothing about this type is assumed to
    # reach (walras.core.estimation, rule 3); None: no default.
    default_throughput: float | None = None
    # The first field its CRD schema refuses ("spec.gpuType: ..."), for a pool stored before the
    # schema had the rule; such a pool offers no GPUs and its condition names this field.
    defect: str | None = None

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
    taints: tuple[Taint, ...] = ()

    def resource(self, name: str) -> float:
        return self.allocatable.get(name, 0.0)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod: Walras's own (``job`` set) or a foreign one that uses resources on some node."""

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
    # The workload's walras.dev/steps-done annotation, unparsed ("" = none); walras.core.progress
    # checks it, so a bad value becomes an Event naming the pod rather than a parse failure.
    steps_done: str = ""
    # metadata.creationTimestamp (epoch seconds; 0 when absent): where a restart's cost begins
    # (walras.core.restarts).
    created: float = 0.0
    # The advance notice the operator wrote on the pod (walras.dev/stop-at, RFC 3339; "" = none):
    # what it compares with its forecast so that it writes only a change (walras.operator.notices).
    stop_at: str = ""
    # Why a container of the pod cannot start ("" = none): "container NAME: REASON: MESSAGE" from
    # the kubelet's waiting state, only for the reasons in STUCK_REASONS (walras.core.admission
    # holds the job and frees its GPUs).
    stuck: str = ""

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


class _DefectError(Exception):
    """Raised inside :func:`parse_job`; becomes the job's :class:`JobDefect`."""

    def __init__(self, field: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.field, self.reason, self.message = field, reason, message


def _defect(obj: Mapping[str, Any], fld: str, reason: str, message: str) -> JobDefect:
    meta = _mapping(obj.get("metadata"))
    namespace = str(meta.get("namespace", ""))
    tenant = _mapping(obj.get("spec")).get("tenant")
    try:
        generation = int(meta.get("generation") or 0)
    except (TypeError, ValueError, OverflowError):
        generation = 0
    return JobDefect(
        namespace=namespace,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        tenant=tenant if isinstance(tenant, str) and tenant else namespace,
        generation=generation,
        field=fld,
        reason=reason,
        message=message,
        status=_mapping(obj.get("status")),
    )


def _number(value: object, field: str, reason: str, low: float, high: float) -> float:
    """A finite number in ``[low, high]`` (bools and strings are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _DefectError(field, reason, f"{value!r} is not a number")
    try:
        x = float(value)
    except OverflowError:  # an int beyond float64's range
        raise _DefectError(
            field, reason, f"a {len(str(value))}-digit number is out of range"
        ) from None
    if not math.isfinite(x) or not low <= x <= high:
        raise _DefectError(field, reason, f"{value!r} is not in [{low:g}, {high:g}]")
    return x


def _resource_map(entries: Mapping[str, Any]) -> dict[str, float]:
    return {str(name): quantity(value) for name, value in entries.items()}


def _container_requests(container: Mapping[str, Any]) -> dict[str, float]:
    """A container's requests after API defaulting: a limit without a request is the request."""
    res = _mapping(container.get("resources"))
    return {
        **_resource_map(_mapping(res.get("limits"))),
        **_resource_map(_mapping(res.get("requests"))),
    }


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """One pod's requests per resource, as kube-scheduler counts them.

    ``max(Σ containers + Σ sidecars, max over init containers i of (init_i + sidecars before i))
    + overhead``, where sidecars are init containers with ``restartPolicy: Always``. E.g. two
    containers of 1 and 2 GPUs and an initContainer of 4 GPUs: ``max(1 + 2, 4) = 4``. Entries
    that are not quantities are skipped (the pod exists; its other resources still count).
    """
    total: dict[str, float] = {}

    def add(into: dict[str, float], more: Mapping[str, float]) -> None:
        for name, value in more.items():
            into[name] = into.get(name, 0.0) + value

    def requests_of(container: object) -> dict[str, float]:
        res = _mapping(_mapping(container).get("resources"))
        out: dict[str, float] = {}
        for part in ("limits", "requests"):  # requests override limits
            for name, value in _mapping(res.get(part)).items():
                try:
                    out[str(name)] = quantity(value)
                except ValueError:
                    continue
        return out

    containers = pod_spec.get("containers")
    for container in containers if isinstance(containers, list) else ():
        add(total, requests_of(container))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    inits = pod_spec.get("initContainers")
    for container in inits if isinstance(inits, list) else ():
        req = requests_of(container)
        if _mapping(container).get("restartPolicy") == "Always":
            add(sidecars, req)
            continue
        for name, value in req.items():
            init_peak[name] = max(init_peak.get(name, 0.0), value + sidecars.get(name, 0.0))
    add(total, sidecars)
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0.0), value)
    for name, value in _mapping(pod_spec.get("overhead")).items():
        try:
            total[str(name)] = total.get(str(name), 0.0) + quantity(value)
        except ValueError:
            continue
    return total


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    out = []
    for item in spec.get("tolerations") or []:
        t = _mapping(item)
        out.append(
            Toleration(
                key=str(t.get("key") or ""),
                operator=str(t.get("operator") or "Equal"),
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
        )
    return tuple(out)


def _requirements(items: object, *, field: bool) -> list[Requirement]:
    return [
        Requirement(
            key=str(_mapping(r).get("key") or ""),
            operator=str(_mapping(r).get("operator") or ""),
            values=tuple(str(v) for v in _mapping(r).get("values") or []),
            field=field,
        )
        for r in (items if isinstance(items, list) else [])
    ]


def _affinity(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    node = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        t = _mapping(term)
        reqs = _requirements(t.get("matchExpressions"), field=False)
        reqs += _requirements(t.get("matchFields"), field=True)
        terms.append(tuple(reqs))
    return tuple(terms)


def parse_job(obj: Mapping[str, Any]) -> JobSpec | JobDefect:
    """Parse a FungibleJob dict; every problem comes back as a :class:`JobDefect`, never raised."""
    try:
        return _parse_job(obj)
    except _DefectError as bad:
        return _defect(obj, bad.field, bad.reason, bad.message)
    except (ValueError, TypeError, OverflowError, AttributeError, KeyError) as exc:
        # Not a shape this parser foresaw: still this job's problem alone.
        return _defect(obj, "spec", "InvalidSpec", f"{type(exc).__name__}: {exc}")


def _resource_field(pod_spec: Mapping[str, Any], resource: str) -> str:
    """The spec path of the first container that asks for ``resource`` (for the defect)."""
    for part in ("containers", "initContainers"):
        for k, container in enumerate(pod_spec.get(part) or []):
            res = _mapping(_mapping(container).get("resources"))
            for kind in ("limits", "requests"):
                if resource in _mapping(res.get(kind)):
                    return f"spec.template.spec.{part}[{k}].resources.{kind}[{resource}]"
    return f"spec.template.spec.overhead[{resource}]"


def _check_quantities(pod_spec: Mapping[str, Any]) -> None:
    """Every resource quantity of the template is a finite float (``1e400`` is well-formed for
    the API server, but no node holds it and it would overflow every sum)."""
    for part in ("containers", "initContainers"):
        for k, container in enumerate(pod_spec.get(part) or []):
            res = _mapping(_mapping(container).get("resources"))
            for kind in ("limits", "requests"):
                for name, value in _mapping(res.get(kind)).items():
                    try:
                        quantity(value)
                    except ValueError as exc:
                        raise _DefectError(
                            f"spec.template.spec.{part}[{k}].resources.{kind}[{name}]",
                            "InvalidQuantity",
                            str(exc),
                        ) from None


def _parse_job(obj: Mapping[str, Any]) -> JobSpec:
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    namespace = str(meta.get("namespace", ""))
    name = str(meta.get("name", ""))
    if not podtemplate.label_value_ok(name) or len(name) > MAX_NAME:
        raise _DefectError(
            "metadata.name",
            "InvalidName",
            f"the name is the value of the pods' {crd.LABEL_JOB} label, which allows at most "
            f"{MAX_NAME} characters (alphanumeric at both ends); this one has {len(name)}",
        )
    problem = podtemplate.check(spec.get("template"))
    if problem is not None:
        raise _DefectError(problem.field, problem.reason, problem.message)
    template = _mapping(spec.get("template"))
    pod_spec = _mapping(template.get("spec"))
    _check_quantities(pod_spec)
    # The CRD's schema, through its model (walras.core.schema): bounds and types as the API
    # server checks them. The template was checked above, as the API server checks a Pod.
    try:
        checked = schema_parsing.job_spec(spec, template_checked=True)
    except schema_parsing.SpecError as bad:
        raise _DefectError(bad.field, bad.reason, bad.message) from None
    requests = pod_requests(pod_spec)
    gpu_limits: dict[str, int] = {}
    for res_name, count in sorted(requests.items()):
        if podtemplate.is_native(res_name):
            continue
        if count != int(count) or count < 1:
            raise _DefectError(
                _resource_field(pod_spec, res_name),
                "InvalidGPULimit",
                f"GPUs per pod must be a whole number >= 1, got {count:g}",
            )
        if count > 1024:
            raise _DefectError(
                _resource_field(pod_spec, res_name),
                "InvalidGPULimit",
                f"{count:g} per pod is more than any node holds (at most 1024)",
            )
        gpu_limits[res_name] = int(count)
    throughput = dict(sorted(checked.throughput.items()))
    # None declared is valid (measured, estimated or profiled: walras.core.estimation/profiling);
    # declared and 0 everywhere says the job can run nowhere.
    if throughput and not any(a > 0 for a in throughput.values()):
        raise _DefectError(
            "spec.throughput",
            "ZeroThroughput",
            "throughput is 0 on every GPU type, so no allocation has any value",
        )
    util = checked.utility or schema_fungiblejob.Utility()
    kind_crd = util.kind
    alpha = util.alpha if util.alpha is not None else 2.0
    if kind_crd == "targetPriority" and not (util.target or 0.0) > 0:
        raise _DefectError(
            "spec.utility.target", "InvalidUtility", "targetPriority needs a target throughput > 0"
        )
    if kind_crd == "alphaFair" and alpha == 1.0:
        raise _DefectError(
            "spec.utility.alpha", "InvalidUtility", f"alphaFair needs alpha > 0, != 1: {alpha}"
        )
    priority = _number(
        spec.get("priority") or 0, "spec.priority", "InvalidPriority", -(2**31), 2**31 - 1
    )
    tenant = checked.tenant
    return JobSpec(
        forkable=checked.forkable,
        profile=checked.profile or "",
        workload_uid=(checked.workload_ref.uid or "") if checked.workload_ref else "",
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 0),
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        tenant=tenant or namespace,
        replicas=checked.replicas,
        throughput=throughput,
        utility=Utility(
            kind=UTILITY_KINDS[kind_crd],
            weight=util.weight,
            target=util.target if util.target is not None else 0.0,
            alpha=alpha,
        ),
        priority=int(priority),
        total_work=checked.total_work,
        template=template,
        gpu_limits=gpu_limits,
        cpu=requests.get("cpu", 0.0),
        memory=requests.get("memory", 0.0),
        node_selector=_str_map(pod_spec.get("nodeSelector")),
        status=_mapping(obj.get("status")),
        requests=requests,
        tolerations=_tolerations(pod_spec),
        affinity=_affinity(pod_spec),
        priority_class=str(pod_spec.get("priorityClassName") or ""),
    )


def parse_pool(obj: Mapping[str, Any]) -> PoolSpec:
    """Parse a ResourcePool dict, validated by its CRD model (walras.core.schema)."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    defect: str | None = None
    try:
        capacity = schema_parsing.pool_spec(spec).capacity_override
    except schema_parsing.SpecError as err:
        # A pool its CRD's schema refuses (stored before the schema had the rule) offers no
        # GPUs rather than a guess: its Ready condition then names the refused field.
        capacity = 0
        defect = str(err)
    default = spec.get("defaultThroughput")
    return PoolSpec(
        default_throughput=(
            float(default)
            if isinstance(default, int | float)
            and not isinstance(default, bool)
            and 0 < default <= MAX_THROUGHPUT
            else None
        ),
        name=str(meta.get("name", "")),
        gpu_type=str(spec.get("gpuType", "")),
        node_selector=_str_map(spec.get("nodeSelector")),
        resource_name=str(spec.get("resourceName") or crd.DEFAULT_RESOURCE_NAME),
        capacity_override=capacity,
        generation=int(meta.get("generation") or 0),
        status=_mapping(obj.get("status")),
        defect=defect,
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
    conditions = status.get("conditions")
    ready = any(
        _mapping(c).get("type") == "Ready" and _mapping(c).get("status") == "True"
        for c in (conditions if isinstance(conditions, Sequence) else ())
    )
    taints = spec.get("taints")
    return NodeInfo(
        name=str(meta.get("name", "")),
        labels=_str_map(meta.get("labels")),
        allocatable=allocatable,
        ready=ready,
        schedulable=not bool(spec.get("unschedulable")),
        taints=tuple(
            Taint(
                key=str(_mapping(t).get("key") or ""),
                value=str(_mapping(t).get("value") or ""),
                effect=str(_mapping(t).get("effect") or ""),
            )
            for t in (taints if isinstance(taints, list) else [])
        ),
    )


# Kubelet waiting reasons that do not resolve by themselves, so a pod in one holds its node's GPUs
# for nothing until a person changes the image, the node or the template:
# - ErrImageNeverPull: the image is not on the node and imagePullPolicy is Never; nothing will
#   put it there.
# - ErrImagePull / ImagePullBackOff: the pull failed (no such image or tag, no credentials, no
#   registry); the kubelet retries with its own back-off, which can last forever.
# - InvalidImageName: the image reference cannot be parsed; no retry can fix it.
# - CreateContainerConfigError: the container's configuration refers to something missing (a
#   Secret or ConfigMap key, a user that cannot be resolved).
# - CreateContainerError: the runtime refused to create the container from the template.
# ContainerCreating and PodInitializing are the normal way to running and are not here.
STUCK_REASONS = frozenset(
    {
        "ErrImageNeverPull",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def stuck_reason(status: Mapping[str, Any]) -> str:
    """Why a container of a pod cannot start (``container NAME: REASON: MESSAGE``), or "".

    Init containers first: while one is stuck the others never start either.
    """
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = status.get(key)
        if not isinstance(statuses, list):
            continue
        for item in statuses:
            c = _mapping(item)
            waiting = _mapping(_mapping(c.get("state")).get("waiting"))
            reason = str(waiting.get("reason") or "")
            if reason in STUCK_REASONS:
                message = str(waiting.get("message") or "").strip()
                text = f"container {c.get('name', '?')}: {reason}"
                return f"{text}: {message}" if message else text
    return ""


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
    planned_node = annotations.get(crd.ANN_NODE, "")
    if crd.LABEL_REPLICA not in labels:
        # A pod of an adopted workload (walras.core.adapters): its controller made it from the
        # template Walras set, which names the node of each replica.
        adopted = adapters.replica_of(labels, annotations)
        if adopted is not None:
            replica = adopted
            planned_node = planned_node or adapters.base.node_of(annotations, adopted)
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
        planned_node=planned_node,
        group=annotations.get(crd.ANN_GROUP, ""),
        phase=str(_mapping(obj.get("status")).get("phase") or "Pending"),
        terminating=meta.get("deletionTimestamp") is not None,
        round=round_no,
        requests=pod_requests(spec),
        steps_done=annotations.get(ANN_STEPS_DONE, ""),
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        stop_at=annotations.get(ANN_STOP_AT, ""),
        stuck=stuck_reason(_mapping(obj.get("status"))),
    )

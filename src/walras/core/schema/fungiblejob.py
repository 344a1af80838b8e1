"""FungibleJob: a gang of identical pods that can run on several GPU types, with its throughput on
each (the CRD ``fungiblejobs.walras.dev``; ``walras.core.model.parse_job`` parses through it).

The template's shapes here are those the API server would reject in a Pod; the operator checks
the rest (``walras.core.podtemplate``: Kubernetes' Pod validation re-stated) before planning.
Semantic checks the schema cannot state (``targetPriority`` needs a target, ``alpha != 1``,
a declared throughput not 0 everywhere, whole GPUs per pod) are in ``walras.core.model``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from walras.core import crd
from walras.core.schema import limits
from walras.core.schema.definition import AGE, Column, CrdDescriptor
from walras.core.schema.kubetypes import (
    DNS_LABEL_PATTERN,
    Conditions,
    Int32,
    Int64,
    LabelValue,
    Model,
    ObjectMeta,
    OpenModel,
    OpenObject,
    Quantity,
)

# Validation context key: the template was checked by walras.core.podtemplate (see _template).
TEMPLATE_CHECKED = "walras.dev/template-checked"

ResourceMap = Annotated[dict[str, Quantity], Field(max_length=limits.MAX_RESOURCES)]


class TemplateMetadata(OpenModel):
    """The template's metadata; only labels and annotations have a checked shape."""

    labels: dict[str, LabelValue] | None = None
    annotations: dict[str, str] | None = None


class Resources(OpenModel):
    """A container's ``resources``: quantities by resource name."""

    limits: ResourceMap | None = None
    requests: ResourceMap | None = None


class Container(OpenModel):
    """A container of the template (other fields are the Pod API's, kept as they are)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
    image: Annotated[str, StringConstraints(min_length=1)]
    resources: Resources | None = None


class Toleration(Model):
    """A pod toleration."""

    key: str | None = None
    operator: Literal["", "Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: Int64 | None = None


class PodSpec(OpenModel):
    """The template's pod spec: what Walras reads, checked; the rest kept as it is."""

    containers: Annotated[list[Container], Field(min_length=1, max_length=limits.MAX_CONTAINERS)]
    init_containers: Annotated[list[Container], Field(max_length=limits.MAX_CONTAINERS)] | None = (
        None
    )
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: OpenObject | None = None
    restart_policy: Literal["Always", "OnFailure", "Never"] | None = None
    service_account_name: Annotated[str, StringConstraints(max_length=253)] | None = None


class PodTemplate(Model):
    """``spec.template``: a PodTemplateSpec."""

    metadata: TemplateMetadata | None = None
    spec: PodSpec


class Utility(Model):
    """``spec.utility``: how the job values throughput."""

    kind: Literal["log", "linear", "targetPriority", "alphaFair"] = "log"
    weight: float = Field(
        1.0, gt=0, le=limits.MAX_WEIGHT, description="Relative weight, in (0, 1e6]."
    )
    target: float | None = Field(
        None,
        ge=0,
        le=limits.MAX_TARGET,
        description="Target throughput (targetPriority), at most 1e12.",
    )
    alpha: float | None = Field(
        None,
        gt=0,
        le=limits.MAX_ALPHA,
        description="Fairness exponent (alphaFair), 0 < alpha <= 100 and alpha != 1.",
    )


class WorkloadRef(Model):
    """``spec.workloadRef``: the workload a mirror FungibleJob stands for (docs/workloads.md)."""

    api_version: Annotated[str, StringConstraints(max_length=253)] = Field(
        description="apiVersion of the workload (batch/v1, jobset.x-k8s.io/v1alpha2)."
    )
    kind: Annotated[str, StringConstraints(max_length=63)]
    name: Annotated[str, StringConstraints(max_length=253)]
    uid: Annotated[str, StringConstraints(max_length=128)] | None = None


class FungibleJobSpec(Model):
    """``spec`` of a FungibleJob."""

    replicas: Int32 = Field(
        ge=1,
        le=limits.MAX_REPLICAS,
        description="Gang size. All replicas run at once or not at all.",
    )
    template: PodTemplate = Field(
        description=(
            "PodTemplateSpec of every replica. GPUs per pod are the pod's requests of the pool's "
            "resourceName, counted as Kubernetes counts them (sum over containers, at least the "
            "largest initContainer); 1 when no container asks (then Walras adds the limit to the "
            "first container). The shapes below are what the API server would reject in a Pod; "
            "the operator checks the rest before planning."
        )
    )
    throughput: dict[str, Annotated[float, Field(ge=0, le=limits.MAX_THROUGHPUT)]] = Field(
        default_factory=dict,
        max_length=64,
        description=(
            "Work per second of the whole gang on each GPU type (gpuType -> work/s). Optional: "
            "types left out are measured or estimated from reported progress, and a job that "
            "declares none is first profiled on each GPU type (docs/progress.md)."
        ),
    )
    utility: Utility | None = None
    tenant: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        None,
        description=(
            "Ignored (kept so that older manifests still apply). The tenant of a job is its "
            "namespace, or the cluster-scoped Tenant that lists the namespace; see status.tenant."
        ),
    )
    backoff_limit: Int32 = Field(
        3,
        ge=0,
        le=limits.MAX_BACKOFF,
        description=(
            "Pod failures (a container exiting non-zero, not preemption by Walras) after which "
            "the job is Failed; every failure before that restarts the whole gang."
        ),
    )
    forkable: bool = False
    profile: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        None,
        description=(
            "Jobs with the same profile are alike (same model and batch size): their measured "
            "throughputs estimate each other's on GPU types not in spec.throughput. Default: "
            "jobs whose first container has the same image."
        ),
    )
    total_work: float | None = Field(
        None,
        gt=0,
        le=limits.MAX_TOTAL_WORK,
        description="Work units after which the job is Succeeded (optional), at most 1e18.",
    )
    workload_ref: WorkloadRef | None = Field(
        None,
        description=(
            "Set by Walras on the FungibleJob that mirrors an adopted workload (a Job or JobSet "
            "labelled walras.dev/managed): Walras runs that workload through its suspend field "
            "instead of creating pods."
        ),
    )

    @field_validator("template", mode="wrap")
    @classmethod
    def _template(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        # walras.core.model checks the template with walras.core.podtemplate first: Kubernetes'
        # Pod validation, stricter than the shapes here and with reasons of its own
        # (InvalidQuantity...). It says so through the context; the template is then kept as
        # given (the operator reads it as a mapping and copies it into the pods).
        if info.context and info.context.get(TEMPLATE_CHECKED):
            return value
        return handler(value)


class Placement(Model):
    """One entry of ``status.allocation``."""

    gpu_type: str | None = None
    fraction: float | None = None
    nodes: list[str] | None = None


class MeasuredThroughput(Model):
    """One GPU type in ``status.progress.measured``."""

    steps_per_second: float | None = None
    samples: Int64 | None = Field(None, description="Reading intervals measured.")
    steps: float | None = None
    seconds: float | None = None


class Progress(Model):
    """``status.progress``: what the workload reported on its pods (walras.dev/steps-done)."""

    steps_done: float | None = Field(None, description="Steps done, as reported (monotone).")
    updated_at: str | None = Field(None, description="When stepsDone last grew (RFC 3339).")
    estimated_finish: str | None = Field(
        None, description="When stepsDone reaches spec.totalWork at the expected throughput."
    )
    measured: dict[str, MeasuredThroughput] | None = Field(
        None, description="Measured steps per second per GPU type, with sample counts."
    )
    fork_base: float | None = Field(None, description="Forked jobs: steps of copies now gone.")
    copies: dict[str, float] | None = Field(
        None, description="Forked jobs: steps reported by each running copy (round/node)."
    )
    restart_seconds: list[float] | None = Field(
        None,
        description=(
            "The job's last measured restart costs, oldest first: seconds from a start's pod "
            "creation to its first progress above the restored count (docs/workloads.md)."
        ),
    )
    restart_cost_seconds: float | None = Field(
        None, description="Median of restartSeconds: what the realiser prices a restart at."
    )
    steps_lost: Int64 | None = Field(
        None, description="Reported steps that restores fell back from, summed."
    )
    fallbacks: Int64 | None = Field(None, description="Restores that fell back (stepsLost > 0).")
    restores: Int64 | None = Field(
        None, description="Restores whose restored count could be compared with the job's."
    )


class ThroughputInUse(Model):
    """One GPU type in ``status.throughputs``: the value the policy used and where it came from."""

    value: float | None = None
    source: str | None = Field(
        None,
        description=(
            "measured, declared, estimated-own, estimated-similar (from jobs of the same "
            "profile) or default (the pool's defaultThroughput)."
        ),
    )
    declared: float | None = None
    samples: Int64 | None = None


class ProfilingPlan(Model):
    """``status.profiling``: the job's profiling slices (walras.core.profiling)."""

    types: list[Annotated[str, StringConstraints(max_length=253)]] | None = Field(
        None, max_length=64, description="GPU types to profile, in order."
    )
    index: Int32 | None = Field(
        None, ge=0, description="The type being profiled (= len(types): every slice is done)."
    )


class FungibleJobStatus(Model):
    """``status`` of a FungibleJob (written by the operator)."""

    phase: Literal["Pending", "Running", "Succeeded", "Failed"] | None = None
    tenant: str | None = None
    gpu_type: str | None = Field(None, description="GPU type of the largest allocated fraction.")
    conditions: Conditions | None = None
    allocation: list[Placement] | None = None
    expected_throughput: float | None = None
    price: float | None = Field(
        None, description="Price per GPU of gpuType (marginal utility of one more GPU)."
    )
    cost: float | None = Field(
        None,
        description="What the job pays per unit time, sum over types of price x GPUs x fraction.",
    )
    round: Int64 | None = None
    fair_share: float | None = Field(
        None,
        description="Long-run fraction of wall time allocated (sum of allocation fractions).",
    )
    tenant_tasks: float | None = Field(
        None,
        description="PS-DSF policies only, the tenant's total x_n in work units per second.",
    )
    work_done: float | None = None
    failures: Int32 | None = Field(
        None, description="Pod failures counted against spec.backoffLimit."
    )
    received: dict[str, float] | None = Field(
        None, description="Seconds run so far in each placement group (GPU type or node)."
    )
    elapsed: float | None = Field(
        None,
        description="Seconds the job has been schedulable so far (the realiser's history).",
    )
    running_group: str | None = Field(
        None, description="Placement group of the current slice (empty when not running)."
    )
    running_since: str | None = Field(
        None, description="Start of the current slice (RFC 3339 with microseconds)."
    )
    accounted_at: str | None = Field(
        None, description="Time up to which received, elapsed and workDone are accounted."
    )
    productive_from: str | None = Field(
        None,
        description=(
            "When the current slice's gang starts doing work (its start plus the restart cost)."
        ),
    )
    progress: Progress | None = None
    throughputs: dict[str, ThroughputInUse] | None = Field(
        None, description="Per GPU type, the throughput the policy used and its source."
    )
    declared_throughput: float | None = Field(
        None, description="spec.throughput on gpuType (absent: not declared)."
    )
    measured_throughput: float | None = Field(
        None, description="Measured steps per second on gpuType (absent: not measured yet)."
    )
    profiling: ProfilingPlan | None = Field(
        None, description="Profiling slices of a job with no known throughput (docs/progress.md)."
    )


class FungibleJob(Model):
    """A FungibleJob object as the API server stores it."""

    # The name check needs metadata, which the API server validates before this rule runs.
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.metadata.name.size() <= {limits.MAX_NAME}",
                    "message": (
                        f"metadata.name may have at most {limits.MAX_NAME} characters: it is the "
                        f"value of the pods' {crd.LABEL_JOB} label"
                    ),
                }
            ]
        }
    )

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: FungibleJobSpec
    status: FungibleJobStatus | None = None


DESCRIPTOR = CrdDescriptor(
    model=FungibleJob,
    kind=crd.JOB_KIND,
    plural=crd.JOB_PLURAL,
    scope="Namespaced",
    file="fungiblejob.yaml",
    comment=(
        "FungibleJob: a gang of identical pods that can run on several GPU types, with its "
        "throughput on each. Walras (the operator in walras.operator) decides the GPU type, the "
        "share of time and the nodes each round, creates the pods from `template` and binds them."
    ),
    columns=(
        Column("Tenant", "string", ".status.tenant"),
        Column("GPU type", "string", ".status.gpuType"),
        Column("Share", "number", ".status.fairShare"),
        Column("Throughput", "number", ".status.expectedThroughput"),
        Column("Declared", "number", ".status.declaredThroughput"),
        Column("Measured", "number", ".status.measuredThroughput"),
        Column("Steps", "number", ".status.progress.stepsDone"),
        Column("Price", "number", ".status.price"),
        Column("Phase", "string", ".status.phase"),
        AGE,
    ),
    short_names=("fjob",),
    categories=("walras",),
)

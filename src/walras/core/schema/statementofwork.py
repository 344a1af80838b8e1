"""StatementOfWork: a recurring GPU job declared once (docs/algorithms.md#statements-of-work; CRD
``statementsofwork.walras.dev``; ``walras.core.sow_shell`` turns it into the mechanism's SoW).

The schema states what the API server can check at admission, naming the field: a
non-increasing value function (CEL over pairs of points), probabilities summing to 1 (CEL),
durations ≥ 1, a period with a recurrence, one of points or deadline, and an immutable spec
(``self == oldSelf``). Each CEL rule has a pydantic twin so both validators agree. Bounds that
depend on the market (``K``, ``D``, ``V``, the GPU types) are checked by the operator at birth.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from walras.core.schema.definition import AGE, Column, CrdDescriptor
from walras.core.schema.fungiblejob import PodTemplate
from walras.core.schema.kubetypes import Conditions, Int32, Int64, Model, ObjectMeta, OpenObject

# "<name>-<instance>" (up to 64 instances) is the pods' walras.dev/job label: at most 63.
MAX_NAME = 56
MAX_ROUNDS = 100_000
MAX_AMOUNT = 1e9
PROBABILITY_TOLERANCE = 1e-6


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class ValuePoint(Model):
    """One point of a piecewise-linear value function."""

    after: float = Field(ge=0, le=MAX_ROUNDS, description="Rounds after the release.")
    amount: float = Field(ge=0, le=MAX_AMOUNT)


NOT_INCREASING = (
    "spec.value.points: the value function must be non-increasing (a later point has a larger "
    "amount)"
)
SORTED = "spec.value.points: times (after) must increase from one point to the next"
DUPLICATE = "spec.value.points: two points have the same time (after)"

Points = Annotated[
    list[ValuePoint],
    Field(
        min_length=1,
        max_length=32,
        json_schema_extra=_cel(
            ("self.map(p, p.after).isSorted()", SORTED),
            ("self.all(p, self.exists_one(q, q.after == p.after))", DUPLICATE),
            (
                "self.all(p, self.all(q, q.after <= p.after || q.amount <= p.amount))",
                NOT_INCREASING,
            ),
        ),
    ),
]


class Value(Model):
    """``spec.value``: points, or a deadline with an amount."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.points) != (has(self.deadline) || has(self.amount))",
                "give either value.points or value.deadline with value.amount",
            ),
            (
                "has(self.deadline) == has(self.amount)",
                "value.deadline and value.amount go together",
            ),
        )
    )

    deadline: Int32 | None = Field(
        None,
        ge=1,
        le=MAX_ROUNDS,
        description="Rounds after the release by which the instance must complete.",
    )
    amount: float | None = Field(
        None, ge=0, le=MAX_AMOUNT, description="The value of completing by the deadline."
    )
    points: Points | None = None

    @model_validator(mode="after")
    def _shape(self) -> Value:
        # The CEL rules of this object and of its points, for pydantic.
        if (self.points is not None) == (self.deadline is not None or self.amount is not None):
            raise ValueError("give either value.points or value.deadline with value.amount")
        if (self.deadline is None) != (self.amount is None):
            raise ValueError("value.deadline and value.amount go together")
        pts = self.points or []
        for a, b in itertools.pairwise(pts):
            if b.after < a.after:
                raise ValueError(SORTED)
            if b.after == a.after:
                raise ValueError(DUPLICATE)
            if b.amount > a.amount:
                raise ValueError(NOT_INCREASING)
        return self


class SupportPoint(Model):
    """One (arrival, duration) outcome and its probability."""

    arrival: Int32 = Field(ge=0, le=MAX_ROUNDS)
    duration: Int32 = Field(ge=1, le=MAX_ROUNDS)
    probability: float = Field(ge=0, le=1)


SUM_TO_ONE = "spec.distribution: the probabilities must sum to 1"

Distribution = Annotated[
    list[SupportPoint],
    Field(
        min_length=1,
        max_length=64,
        json_schema_extra=_cel(
            (
                f"self.map(p, p.probability).sum() > {1 - PROBABILITY_TOLERANCE} && "
                f"self.map(p, p.probability).sum() < {1 + PROBABILITY_TOLERANCE}",
                SUM_TO_ONE,
            )
        ),
        description=(
            "The joint distribution of (arrival, duration) as weighted support points: arrival "
            "in rounds after the release, duration in rounds on the reference type. "
            "Probabilities sum to 1."
        ),
    ),
]


class Recurrence(Model):
    """``spec.recurrence``."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.count == 1 || self.period >= 1",
                "spec.recurrence.period must be >= 1 when count > 1",
            )
        )
    )

    count: Int32 = Field(
        1, ge=1, le=64, description="Instances, released period rounds apart from the birth."
    )
    period: Int32 = Field(0, ge=0, le=MAX_ROUNDS)

    @model_validator(mode="after")
    def _period(self) -> Recurrence:
        if self.count > 1 and self.period < 1:
            raise ValueError("spec.recurrence.period must be >= 1 when count > 1")
        return self


IMMUTABLE = (
    "spec is immutable: a statement of work is binding from its birth; delete it and create a "
    "new one (a new birth) to change it"
)


class StatementOfWorkSpec(Model):
    """``spec`` of a StatementOfWork (immutable after creation)."""

    model_config = ConfigDict(json_schema_extra=_cel(("self == oldSelf", IMMUTABLE)))

    concurrency: Int32 = Field(
        ge=1,
        le=4096,
        description=(
            "k, the GPUs the gang holds for its whole run (on every type in throughput unless "
            "concurrencyPerType says otherwise). Pods = k / GPUs per pod of the template."
        ),
    )
    concurrency_per_type: (
        Annotated[dict[str, Annotated[Int32, Field(ge=1, le=4096)]], Field(max_length=16)] | None
    ) = Field(None, description="k on a given GPU type (overrides concurrency for that type).")
    throughput: dict[str, Annotated[float, Field(gt=0, le=1000)]] = Field(
        min_length=1,
        max_length=16,
        description=(
            "Acceptable GPU types and their speed relative to the reference type the durations "
            "are given in (gpuType -> relative speed; 1 = the reference). A duration d takes "
            "ceil(d / throughput) rounds on that type."
        ),
    )
    value: Value = Field(
        description=(
            "Non-increasing value of the completion time, in rounds after the instance's "
            "release: either points (linear between them, the first value before the first "
            "point, 0 after the last) or a deadline with a value."
        )
    )
    distribution: Distribution
    duration_revealed: bool = Field(
        False,
        description=(
            "The duration is known when the instance arrives (the paper's signal), so the "
            "launch plan may depend on it."
        ),
    )
    recurrence: Recurrence | None = None
    template: PodTemplate = Field(
        description=(
            "PodTemplateSpec of every pod of an instance, as in a FungibleJob (GPUs per pod are "
            "the pod's requests of the pool's resourceName, 1 when none). The operator checks "
            "it before admission."
        )
    )

    @model_validator(mode="after")
    def _sums_to_one(self) -> StatementOfWorkSpec:
        total = sum(p.probability for p in self.distribution)
        if not 1 - PROBABILITY_TOLERANCE < total < 1 + PROBABILITY_TOLERANCE:
            raise ValueError(SUM_TO_ONE)
        return self


class InstanceStatus(Model):
    """One instance in ``status.instances``."""

    index: Int64 | None = None
    job: str | None = None
    phase: (
        Literal["pending", "waiting", "running", "completed", "evicted", "cancelled", "not_run"]
        | None
    ) = None
    arrival: Int64 | None = None
    signal: Int64 | None = None
    start: Int64 | None = None
    gpu_type: str | None = None
    finish: Int64 | None = None
    charge: float | None = None
    value: float | None = None


class StatementOfWorkStatus(Model):
    """``status`` of a StatementOfWork (written by the operator)."""

    phase: Literal["Pending", "Admitted", "Done", "Rejected"] | None = Field(
        None,
        description=(
            "Pending (not admitted yet), Admitted (plan posted, instances not all done), Done "
            "(every instance completed, evicted, cancelled or not run), Rejected (invalid: see "
            "the Admitted condition)."
        ),
    )
    birth: Int64 | None = Field(
        None, description="The mechanism round of the SoW's birth (its admission)."
    )
    birth_time: str | None = None
    round_seconds: float | None = Field(
        None, description="Seconds per mechanism round when it was born."
    )
    epoch: str | None = Field(None, description="Wall time (RFC 3339) of mechanism round 0.")
    sequence: Int64 | None = Field(
        None, description="Birth order of its first instance among all admitted jobs."
    )
    gpu_type: str | None = Field(None, description="GPU type of the most probable planned start.")
    run_probability: float | None = None
    failure_probability: float | None = Field(
        None, description="Posted failure estimate averaged over the planned outcomes."
    )
    expected_utility: float | None = None
    charged: float | None = Field(
        None, description="Sum of the charges (completed instances only)."
    )
    admissions: list[OpenObject] | None = Field(
        None,
        description=(
            "Per instance, what was posted at birth: the price menu per GPU type, the failure "
            "table and the launch plan (walras explain sow NAME shows them)."
        ),
    )
    instances: list[InstanceStatus] | None = Field(
        None, description="Per instance, its phase, realised times, charge and value."
    )
    conditions: Conditions | None = None
    round: Int64 | None = None


class StatementOfWork(Model):
    """A StatementOfWork object as the API server stores it."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                f"self.metadata.name.size() <= {MAX_NAME}",
                f'metadata.name may have at most {MAX_NAME} characters: "<name>-<instance>" '
                "is the value of the pods' walras.dev/job label",
            )
        )
    )

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: StatementOfWorkSpec
    status: StatementOfWorkStatus | None = None


DESCRIPTOR = CrdDescriptor(
    model=StatementOfWork,
    kind="StatementOfWork",
    plural="statementsofwork",
    scope="Namespaced",
    file="statementofwork.yaml",
    comment=(
        "StatementOfWork: a recurring GPU job declared once "
        "(docs/algorithms.md#statements-of-work). At its "
        "birth Walras posts prices and failure estimates, chooses a binding launch plan (a start "
        "round per arrival outcome, or not run), reserves the GPUs the plan commits before the "
        "running policy plans the rest, and charges the posted price only when an instance "
        "completes. Later-born SoWs are evicted first (LIFO of birth) when committed load "
        "exceeds capacity. The spec is immutable after creation: to change a SoW, delete it and "
        "create a new one (a new birth). docs/sow.md."
    ),
    columns=(
        Column("Birth", "integer", ".status.birth"),
        Column("GPU type", "string", ".status.gpuType"),
        Column("Run prob", "number", ".status.runProbability"),
        Column("Failure", "number", ".status.failureProbability"),
        Column("Charged", "number", ".status.charged"),
        Column("Phase", "string", ".status.phase"),
        AGE,
    ),
    short_names=("sow",),
    categories=("walras",),
)

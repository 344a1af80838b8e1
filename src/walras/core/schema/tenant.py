"""Tenant: who shares the cluster, and how much (the CRD ``tenants.walras.dev``, cluster-scoped,
written by cluster admins only; ``walras.core.governance`` reads it)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, StringConstraints, model_validator

from walras.core.schema.definition import AGE, Column, CrdDescriptor
from walras.core.schema.kubetypes import Conditions, Model, ObjectMeta, unique

MAX_TENANT_WEIGHT = 1e6
Weight = Annotated[float, Field(gt=0, le=MAX_TENANT_WEIGHT)]
Count = Annotated[int, Field(ge=0, le=1_000_000)]
NamespaceName = Annotated[str, StringConstraints(min_length=1, max_length=63)]
# A Tenant's name: a DNS subdomain, as every cluster-scoped object's.
TenantName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
]


def _cel(rule: str, message: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": rule, "message": message}]}


class JobWeight(Model):
    """``spec.jobWeight``: the range job weights are clamped to."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            "!has(self.min) || !has(self.max) || self.min <= self.max",
            "jobWeight.min must not exceed jobWeight.max",
        )
    )

    min: Weight | None = None
    max: Weight | None = None

    @model_validator(mode="after")
    def _ordered(self) -> JobWeight:
        # The CEL rule above, for pydantic.
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("jobWeight.min must not exceed jobWeight.max")
        return self


class Quota(Model):
    """One GPU type's quota, in GPUs."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            "!has(self.guaranteed) || !has(self.maximum) || self.guaranteed <= self.maximum",
            "guaranteed must not exceed maximum",
        )
    )

    guaranteed: Count | None = None
    maximum: Count | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Quota:
        # The CEL rule above, for pydantic.
        if (
            self.guaranteed is not None
            and self.maximum is not None
            and self.guaranteed > self.maximum
        ):
            raise ValueError("guaranteed must not exceed maximum")
        return self


class TenantSpec(Model):
    """``spec`` of a Tenant."""

    weight: Weight = Field(
        1.0,
        description=(
            "The tenant's weight: its jobs together weigh this much against other tenants, "
            "however many jobs it runs and whatever weights they ask for."
        ),
    )
    namespaces: (
        Annotated[
            list[NamespaceName],
            AfterValidator(unique),
            Field(max_length=1024, json_schema_extra={"x-kubernetes-list-type": "set"}),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Namespaces whose jobs belong to this tenant. A namespace listed by no Tenant is a "
            "tenant of its own."
        ),
    )
    job_weight: JobWeight | None = Field(
        None,
        description=(
            "Allowed range of spec.utility.weight for this tenant's jobs; weights outside it are "
            "clamped (default 0.1 to 10)."
        ),
    )
    quotas: Annotated[dict[str, Quota], Field(max_length=64)] | None = Field(
        None,
        description=(
            "Per GPU type (the ResourcePools' gpuType), in GPUs, for the tenant and its "
            "descendants together: guaranteed is what they may always claim (Kueue's nominal "
            "quota; lent to others while unused), maximum what they may hold at most (nominal "
            "quota plus borrowing limit). A child's guarantee comes out of its parent's."
        ),
    )
    priority_classes: (
        Annotated[
            list[TenantName],
            AfterValidator(unique),
            Field(max_length=256, json_schema_extra={"x-kubernetes-list-type": "set"}),
        ]
        | None
    ) = Field(
        None,
        description=(
            "PriorityClasses (scheduling.k8s.io/v1) this tenant's jobs may name in their pod "
            "template's priorityClassName beyond the default class and the time-shared classes "
            "of no higher value, which every tenant may use. Within a tenant, a higher class "
            "value gets GPUs first and loses them last; a class annotated "
            'walras.dev/time-sharing: "false" runs its jobs to completion inside the tenant\'s '
            "guarantee. A job naming a class it may not use is scheduled as the default, with a "
            "SpecWarnings condition."
        ),
    )
    parent: TenantName | None = Field(
        None,
        description=(
            "The Tenant this one belongs to (organisation, team, ...). Its weight shares its "
            "parent's share among its siblings, and its guarantees come out of its parent's. A "
            "missing parent, a cycle, or guarantees beyond the parent's (or, for tenants without "
            "a parent, beyond the pools' GPUs) make the tenant a flat tenant without quotas, "
            "with a condition naming the field."
        ),
    )


GpuCount = Annotated[float, Field(ge=0)]


class TenantGpus(Model):
    """One GPU type's GPUs of the tenant and its descendants, after the last round
    (``walras.core.tenant_usage``)."""

    guaranteed: GpuCount = Field(
        0, description="Its accepted guarantee (scaled down while the pools hold fewer GPUs)."
    )
    in_use: GpuCount = Field(0, description="GPUs its jobs hold.")
    borrowed: GpuCount = Field(0, description="GPUs held beyond the guarantee.")
    lent: GpuCount = Field(
        0, description="GPUs of its unused guarantee that others hold (not the free ones)."
    )
    maximum: GpuCount | None = Field(None, description="Its maximum, if it has one.")


class TenantStatus(Model):
    """``status`` of a Tenant (written by the operator)."""

    conditions: Conditions | None = None
    gpus: Annotated[dict[str, TenantGpus], Field(max_length=64)] | None = Field(
        None,
        description=(
            "Per GPU type it has a quota of or uses: guaranteed, in use, borrowed and lent, "
            "after the last round."
        ),
    )
    summary: str | None = Field(
        None,
        description=(
            "The GPUs column: per type 'TYPE IN_USE/GUARANTEED', then '+N' borrowed or '-N' "
            "lent (e.g. 'v100 8/4 +4, k80 0/2 -2')."
        ),
    )


class Tenant(Model):
    """A Tenant object as the API server stores it."""

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: TenantSpec | None = None
    status: TenantStatus | None = None


DESCRIPTOR = CrdDescriptor(
    model=Tenant,
    kind="Tenant",
    plural="tenants",
    scope="Cluster",
    file="tenant.yaml",
    comment=(
        "Tenant: who shares the cluster, and how much. Cluster-scoped and written by cluster "
        "admins only (the chart gives users no RBAC on it; the controller only reads it). A job's "
        "tenant is the Tenant that lists its namespace in spec.namespaces, else its namespace "
        "(configured by a Tenant of that name, if one exists). Inside a tenant, job weights are "
        "normalised so that the tenant's jobs together weigh spec.weight "
        "(walras.core.governance): splitting a job or raising its weight never moves share "
        "between tenants."
    ),
    columns=(
        Column("Weight", "number", ".spec.weight"),
        Column("Parent", "string", ".spec.parent"),
        Column("GPUs", "string", ".status.summary"),
        AGE,
        Column("Namespaces", "string", ".spec.namespaces", priority=1),
    ),
    categories=("walras",),
    status_subresource=True,
)

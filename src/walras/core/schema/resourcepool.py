"""ResourcePool: one GPU type, selecting its nodes by label (the CRD ``resourcepools.walras.dev``;
``walras.core.model.parse_pool`` parses through it). Walras prices each pool's GPU type and
reports capacity, allocation and utilisation in status.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from walras.core import crd
from walras.core.schema import limits
from walras.core.schema.definition import AGE, Column, CrdDescriptor
from walras.core.schema.kubetypes import Conditions, Int64, Model, ObjectMeta

GPU_TYPE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


class ResourcePoolSpec(Model):
    """``spec`` of a ResourcePool."""

    gpu_type: Annotated[
        str, StringConstraints(min_length=1, max_length=63, pattern=GPU_TYPE_PATTERN)
    ]
    node_selector: dict[str, str] | None = Field(
        None, description="Node labels that select this pool's nodes (all must match)."
    )
    resource_name: Annotated[str, StringConstraints(min_length=1)] = crd.DEFAULT_RESOURCE_NAME
    capacity_override: Int64 | None = Field(
        None,
        ge=0,
        description="GPUs of this type to offer instead of the nodes' allocatable sum.",
    )
    default_throughput: float | None = Field(
        None,
        gt=0,
        le=limits.MAX_THROUGHPUT,
        description=(
            "Steps per second assumed for a job on this GPU type when neither its spec, its "
            "measurements nor similar jobs say anything (docs/progress.md)."
        ),
    )


class ResourcePoolStatus(Model):
    """``status`` of a ResourcePool (written by the operator)."""

    nodes: int | None = None
    capacity: int | None = None
    allocated: float | None = Field(
        None, description="GPUs of the pool bound to Walras pods in the last round."
    )
    price: float | None = Field(
        None, description="Price of one GPU of this type (the solver's dual variable)."
    )
    utilisation: float | None = Field(None, description="allocated / capacity in the last round.")
    round: Int64 | None = None
    conditions: Conditions | None = None


class ResourcePool(Model):
    """A ResourcePool object as the API server stores it."""

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: ResourcePoolSpec
    status: ResourcePoolStatus | None = None


DESCRIPTOR = CrdDescriptor(
    model=ResourcePool,
    kind=crd.POOL_KIND,
    plural=crd.POOL_PLURAL,
    scope="Cluster",
    file="resourcepool.yaml",
    comment=(
        "ResourcePool: one GPU type, selecting its nodes by label. Walras prices each pool's GPU "
        "type and reports capacity, allocation and utilisation in status."
    ),
    columns=(
        Column("GPU type", "string", ".spec.gpuType"),
        Column("Nodes", "integer", ".status.nodes"),
        Column("Capacity", "integer", ".status.capacity"),
        Column("Allocated", "number", ".status.allocated"),
        Column("Price", "number", ".status.price"),
        Column("Utilisation", "number", ".status.utilisation"),
        AGE,
    ),
    short_names=("rpool",),
    categories=("walras",),
)

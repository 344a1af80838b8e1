"""NodeAllocation: one per node, written by that node's ``walras agent`` (distributed PS-DSF,
docs/algorithms.md#distributed-ps-dsf); the CRD ``nodeallocations.walras.dev``.

``status.tasks`` holds x_{n,i}: the tasks of each tenant n on node i, in the units of the PS-DSF
model. The reserved name ``walras-tenant-totals`` is the totals aggregator's object: its
``status.tasks`` holds x_n = Σ_i x_{n,i} over fresh NodeAllocations.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from walras.core.schema.definition import AGE, Column, CrdDescriptor
from walras.core.schema.kubetypes import DateTime, Model

NonNegative = Annotated[float, Field(ge=0)]


class NodeAllocationSpec(Model):
    """``spec`` of a NodeAllocation (nothing to set: the object is named after its node)."""

    node_name: str | None = Field(
        None,
        description="The node this allocation belongs to (informational; equals metadata.name).",
    )


class NodeAllocationStatus(Model):
    """``status`` of a NodeAllocation (written by the agent or the totals aggregator)."""

    tasks: dict[str, NonNegative] | None = Field(
        None,
        description=(
            "Tenant -> x_{n,i}, the tenant's tasks on this node (work units when throughput "
            "tables are given). On the totals object: tenant -> x_n summed over fresh nodes."
        ),
    )
    pods: dict[str, NonNegative] | None = Field(
        None, description="Tenant -> x_{n,i} / throughput_{n,i}, the same allocation in pods."
    )
    eligible: list[str] | None = Field(
        None, description="Tenants eligible on this node (delta_{n,i} = 1), sorted."
    )
    nodes: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        None,
        description="Totals object only. Tenant -> number of fresh nodes where it is eligible.",
    )
    node_count: int | None = Field(
        None, ge=0, description="Totals object only. Fresh NodeAllocations summed."
    )
    period: float | None = Field(
        None,
        ge=0,
        description="Totals object only. Seconds between the aggregator's last two publishes.",
    )
    source_resource_version: str | None = Field(
        None,
        description=(
            "Totals object only. resourceVersion of the NodeAllocation list the totals were "
            "summed from; an agent whose own last write is newer waits for the next totals."
        ),
    )
    iteration: int | None = Field(
        None, ge=0, description="Agent steps (aggregations on the totals object) so far."
    )
    timestamp: DateTime | None = Field(
        None,
        description="When this status was written (RFC 3339, UTC); used for staleness.",
    )
    residual: float | None = Field(
        None,
        ge=0,
        description=(
            "Largest change of x_{n,i} in the last step, relative to the node's largest entry."
        ),
    )
    damping: float | None = Field(
        None, ge=0, description="Effective damping factor theta used in the last step."
    )


class NodeAllocation(Model):
    """A NodeAllocation object as the API server stores it."""

    spec: NodeAllocationSpec | None = Field(
        None, description="Empty; the object is named after its node."
    )
    status: NodeAllocationStatus | None = None


DESCRIPTOR = CrdDescriptor(
    model=NodeAllocation,
    kind="NodeAllocation",
    plural="nodeallocations",
    scope="Cluster",
    file="nodeallocation.yaml",
    comment=(
        "NodeAllocation: one per node, written by that node's `walras agent` (distributed "
        "PS-DSF, docs/algorithms.md#distributed-ps-dsf). status.tasks holds x_{n,i}: the "
        "tasks of each tenant n on this node i, in the units of the PS-DSF model (work units per "
        "unit time when the tenants' jobs carry a throughput table, as "
        "fairness.FairnessResult.tasks).\n"
        "\n"
        "The reserved name `walras-tenant-totals` (label walras.dev/role=tenant-totals) is the "
        "one object the totals aggregator (`walras agent --aggregate`) publishes: status.tasks "
        "holds the tenant totals x_n = Σ_i x_{n,i} over fresh NodeAllocations, status.nodes the "
        "per-tenant count of nodes where the tenant is eligible. Agents read only that object, "
        "so their per-step cost does not grow with the number of nodes."
    ),
    columns=(
        Column("Iteration", "integer", ".status.iteration"),
        Column("Residual", "number", ".status.residual"),
        Column("Timestamp", "string", ".status.timestamp"),
        AGE,
    ),
    short_names=("nalloc",),
)

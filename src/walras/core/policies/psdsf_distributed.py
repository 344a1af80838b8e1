"""``psdsf-distributed``: PS-DSF whose tasks the node agents computed.

The same tenant model and task → target conversion as ``psdsf``; the tasks ``x_{n,i}`` are the
agents' converged NodeAllocations, read through ``Handle.distributed_reader`` (the operator
builds it from ``walras.kube.nodeallocations``). Without a reader every round reports
:class:`PolicyUnavailableError`. Its argument ``mode`` must match the agents' own ``--mode``.
"""

from __future__ import annotations

from walras.core.policies.psdsf import PSDSF, PsdsfArgs
from walras.core.policies.registry import register


@register(
    "psdsf-distributed",
    summary="PS-DSF computed by the node agents (walras agent), read from their NodeAllocations",
    args=PsdsfArgs,
)
class PSDSFDistributed(PSDSF):
    """PS-DSF whose tasks come from the node agents (needs ``handle.distributed_reader``)."""

    name = "psdsf-distributed"
    distributed = True

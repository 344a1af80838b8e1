"""``psdsf-distributed``: PS-DSF whose tasks the node agents computed.

The same tenant model and task → target conversion as ``psdsf``; the tasks ``x_{n,i}`` are the
agents' converged NodeAllocations, read through ``PolicyOptions.distributed_reader`` (the operator
builds it from ``walras.kube.nodeallocations``). Without a reader every round reports
:class:`PolicyUnavailableError`.
"""

from __future__ import annotations

from walras.core.policies.psdsf import PSDSF
from walras.core.policies.registry import register


@register(
    "psdsf-distributed",
    summary="PS-DSF computed by the node agents (walras agent), read from their NodeAllocations",
)
class PSDSFDistributed(PSDSF):
    """PS-DSF whose tasks come from the node agents (needs ``options.distributed_reader``)."""

    name = "psdsf-distributed"
    distributed = True

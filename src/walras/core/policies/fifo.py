"""``fifo-aware`` and ``fifo-agnostic``: Gavel's FIFO, first come first served.

Gavel's ``fifo_perf`` (alias of ``fifo-aware``: each job in arrival order takes the fastest type
with room) and ``fifo`` (alias of ``fifo-agnostic``: any type with room), solved by
``walras.allocator.gavel``; inputs as :mod:`walras.core.policies.gavel_adapter` describes. FIFO
keeps its queue across rounds, keyed by the adapter's stable job ids.
"""

from __future__ import annotations

from walras.core.policies.gavel_adapter import GavelBaseline
from walras.core.policies.registry import register


@register("fifo-aware", summary="Gavel's FIFO: arrival order, fastest type", aliases=("fifo_perf",))
class FifoAware(GavelBaseline):
    name = "fifo-aware"
    gavel_name = "fifo_perf"


@register("fifo-agnostic", summary="Gavel's FIFO: arrival order, any type", aliases=("fifo",))
class FifoAgnostic(GavelBaseline):
    name = "fifo-agnostic"
    gavel_name = "fifo"

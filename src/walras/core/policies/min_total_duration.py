"""``min-total-duration`` and ``min-total-duration-agnostic``:
Gavel's min-total-duration: shortest makespan of the remaining work.

Aliases: Gavel's heterogeneity-aware ``min_total_duration_perf`` is ``min-total-duration``; its
heterogeneity-agnostic ``min_total_duration`` is ``min-total-duration-agnostic``. Solved by
``walras.allocator.gavel``; inputs as :mod:`walras.core.policies.gavel_adapter` describes.
"""

from __future__ import annotations

from walras.core.policies.gavel_adapter import GavelBaseline
from walras.core.policies.registry import register

SUMMARY = "Gavel's min-total-duration: shortest makespan of the remaining work"


@register("min-total-duration", summary=SUMMARY, aliases=("min_total_duration_perf",))
class MinTotalDuration(GavelBaseline):
    name = "min-total-duration"
    gavel_name = "min_total_duration_perf"
    needs_remaining = True


@register(
    "min-total-duration-agnostic",
    summary=SUMMARY + ", heterogeneity-agnostic",
    aliases=("min_total_duration",),
)
class MinTotalDurationAgnostic(GavelBaseline):
    name = "min-total-duration-agnostic"
    gavel_name = "min_total_duration"
    needs_remaining = True

"""``max-min-fairness`` and ``max-min-fairness-agnostic``:
Gavel's max-min fairness (least attained service) over GPU types.

Aliases: Gavel's heterogeneity-aware ``max_min_fairness_perf`` is ``max-min-fairness``; its
heterogeneity-agnostic ``max_min_fairness`` is ``max-min-fairness-agnostic``. Solved by
``walras.allocator.gavel``; inputs as :mod:`walras.core.policies.gavel_adapter` describes.
"""

from __future__ import annotations

from walras.core.policies.gavel_adapter import GavelBaseline
from walras.core.policies.registry import register

SUMMARY = "Gavel's max-min fairness (least attained service) over GPU types"


@register("max-min-fairness", summary=SUMMARY, aliases=("max_min_fairness_perf",))
class MaxMinFairness(GavelBaseline):
    name = "max-min-fairness"
    gavel_name = "max_min_fairness_perf"
    needs_remaining = False


@register(
    "max-min-fairness-agnostic",
    summary=SUMMARY + ", heterogeneity-agnostic",
    aliases=("max_min_fairness",),
)
class MaxMinFairnessAgnostic(GavelBaseline):
    name = "max-min-fairness-agnostic"
    gavel_name = "max_min_fairness"
    needs_remaining = False

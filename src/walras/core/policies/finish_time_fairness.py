"""``finish-time-fairness`` and ``finish-time-fairness-agnostic``:
Gavel's finish-time fairness: equal finish-time ratios (Themis).

Aliases: Gavel's heterogeneity-aware ``finish_time_fairness_perf`` is ``finish-time-fairness``; its
heterogeneity-agnostic ``finish_time_fairness`` is ``finish-time-fairness-agnostic``. Solved by
``walras.allocator.gavel``; inputs as :mod:`walras.core.policies.gavel_adapter` describes.
"""

from __future__ import annotations

from walras.core.policies.gavel_adapter import GavelBaseline
from walras.core.policies.registry import register

SUMMARY = "Gavel's finish-time fairness: equal finish-time ratios (Themis)"


@register("finish-time-fairness", summary=SUMMARY, aliases=("finish_time_fairness_perf",))
class FinishTimeFairness(GavelBaseline):
    name = "finish-time-fairness"
    gavel_name = "finish_time_fairness_perf"
    needs_remaining = True


@register(
    "finish-time-fairness-agnostic",
    summary=SUMMARY + ", heterogeneity-agnostic",
    aliases=("finish_time_fairness",),
)
class FinishTimeFairnessAgnostic(GavelBaseline):
    name = "finish-time-fairness-agnostic"
    gavel_name = "finish_time_fairness"
    needs_remaining = True

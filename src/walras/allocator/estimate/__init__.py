"""Throughput estimation: fill in the (job × GPU type) steps/s nobody declared or measured.

:func:`estimate_throughputs` takes the matrix with NaN for unknown entries,
sample counts (measured vs declared), group labels (same ``spec.profile`` or image) and per-type
admin defaults, and returns every entry with its :class:`Source`: ``declared``, ``measured``,
``estimated-own``, ``estimated-similar``, ``default`` or ``unknown``.

The fit is low-rank matrix completion in log space (a job's speed × a type's speed-up, plus ``r``
interaction factors), by ridge-regularised alternating least squares (:mod:`.als`, formula
there). Callers: the operator (missing ``spec.throughput`` entries) and ``walras simulate
--hide-fraction/--estimate`` (:mod:`walras.sim.declared`). Pure: numpy and scipy only.
"""

from walras.allocator.estimate.estimator import estimate_throughputs
from walras.allocator.estimate.result import Source, ThroughputEstimate

__all__ = ["Source", "ThroughputEstimate", "estimate_throughputs"]

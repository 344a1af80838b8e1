"""HadarE's end-game split: a forked job's remaining work shared so that every copy ends together.

Copy ``c`` of a forked job runs at ``r_c`` work units per second from ``s_c`` seconds into the round
(0 for a copy that keeps its pods, the restart for one placed afresh). The remaining work ``W`` is
split so that all copies that get work finish at one common time ``T``::

    Σ_c r_c · max(0, T − s_c) = W,        steps_c = r_c · max(0, T − s_c)

The left side is continuous, piecewise linear and increasing in ``T`` (from the first start on), so
``T`` is unique; it is found exactly by walking the starts in order. ``T`` is also the earliest
time by which the copies can do ``W`` between them (any other split leaves some copy working past
``T``), i.e. the job's finish time, whether inside this round or beyond it.

Why: a copy given more than its share keeps working after the others stop (their GPUs idle while
the job is not done); one given less idles itself. Shares in proportion to ``r_c · (L − s_c)``
(the earlier rule) are equal-finish only when every copy starts at the same time.

Worked example: a kept copy at 3 units/s (``s = 0``) and a new one at 1 unit/s (``s = 10``),
``W = 130``: over ``[0, 10]`` only the kept copy works (30 units), the remaining 100 at 4 units/s
take 25 s more, so ``T = 35``: steps 105 and 25.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

FloatArray = npt.NDArray[np.float64]


def finish_together(
    rates: Sequence[float] | FloatArray,
    starts: Sequence[float] | FloatArray,
    work: float,
) -> tuple[float, FloatArray]:
    """``(T, steps)`` of the equal-finish split (module docstring).

    Raises:
        InvalidProblem: negative or non-finite rates, starts or work; work > 0 with no positive
            rate.
    """
    r = np.asarray(rates, dtype=np.float64)
    s = np.asarray(starts, dtype=np.float64)
    if r.shape != s.shape or r.ndim != 1:
        raise InvalidProblem("rates and starts must be 1-D of one length", field="rates")
    for name, arr in (("rates", r), ("starts", s)):
        if not np.isfinite(arr).all() or (arr < 0).any():
            raise InvalidProblem(f"{name} must be finite and >= 0", field=name)
    if not (np.isfinite(work) and work >= 0):
        raise InvalidProblem(f"work must be finite and >= 0, got {work}", field="work")
    steps = np.zeros_like(r)
    live = np.flatnonzero(r > 0)
    if work == 0:
        return (float(s[live].min()) if live.size else 0.0), steps
    if live.size == 0:
        raise InvalidProblem("work > 0 but no copy has a positive rate", field="rates")
    order = live[np.argsort(s[live], kind="stable")]
    rate_sum = 0.0
    weighted = 0.0
    t = 0.0
    for i, c in enumerate(order):
        rate_sum += float(r[c])
        weighted += float(r[c] * s[c])
        t = (work + weighted) / rate_sum
        nxt = float(s[order[i + 1]]) if i + 1 < order.size else np.inf
        if t <= nxt:
            break
    steps[live] = r[live] * np.maximum(t - s[live], 0.0)
    # Rounding: the shares add up to ``work`` exactly; the earliest copy, which always works,
    # absorbs the difference.
    steps[int(order[0])] += work - float(steps.sum())
    return float(t), steps

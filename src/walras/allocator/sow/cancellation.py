"""Free cancellation of a running job once completing can no longer pay under its report.

The SoW paper's truthfulness proof (Appendix B) assumes every executed outcome has ``v − P ≥ 0``, so
that a higher failure probability can only hurt. Without the duration signal a plan's start
serves every duration of one arrival, and the late ones may complete with ``v(c − r) <
P(s, k, c − s)``; over-reporting ``k`` then raises ``q̂`` and turns those outcomes into free LIFO
evictions ("insurance"). The rule that closes the gap:

    before round τ, a job running since s < τ is cancelled (charge 0, GPUs freed) when
        v(τ + 1 − r) − P(s, k, τ + 1 − s) < 0

under its REPORTED value function ``v``, concurrency ``k`` (on its type) and the menu posted at
its birth. ``τ + 1`` is the earliest completion still possible; ``v`` is non-increasing and ``P``
is non-decreasing in the duration (every unit price is > 0), so every later completion is
unprofitable too: the rule cancels exactly the outcomes whose completion would have ``v − P < 0``
and nothing else. Per outcome ``(s, d)`` (on-type duration ``d``) the job then occupies rounds
``s … e − 1`` with

    e(s, d) = min(s + d,  s + d* − 1),   d* = min{δ ≥ 1 : v(s + δ − r) < P(s, k, δ)}

and its estimated utility is ``(1 − q̂(s, d))·(v − P)⁺`` (:mod:`.plan`). ``d* = 1`` never happens
to a planned start: a start is chosen only with some profitable duration, and then duration 1 is
profitable too. So an unprofitable cancellation always hits a job that has run (``start <
finish``), which tells it apart from a LIFO cancellation (a job that had not started).

Why it restores Theorem 3.2 (``gain ≤ 2Δ`` for every misreport, with ``Δ = max_π |Û(π) −
U(π)|`` between estimated and true utilities ``Σ f (1 − q)(v − P)⁺`` of plans for the true SoW):

- a job's realised utility for outcome ``(s, d)`` is ``1[not cancelled]·1[not evicted in
  [s, s + d)]·(v − P)``; eviction depends on earlier-born jobs only (LIFO, Lemma 3.1), and their
  cancellations are functions of their own reports, so ``q(s, k, d)`` is unchanged by the rule;
- for a fixed plan and ``k``, the expected true utility under ANY cancellation rule is
  ``≤ Σ f (1 − q)(v − P)⁺`` (a rule can only zero positive terms or keep negative ones), with
  equality for the rule under the TRUE ``v``: misreporting ``v`` or ``F`` picks another plan
  and another rule, so ``U(π_r) ≤ U⁺(π_r) ≤ Û⁺(π_r) + Δ ≤ Û⁺(π_truth) + Δ ≤ U⁺(π_truth) + 2Δ``;
- ``k_r > k``: ``q`` and ``P`` grow with ``k`` and ``(·)⁺ ≥ 0``, so each outcome's term at
  ``k_r`` is ``≤`` the same start's term ``(1 − q(k))(v − P(k))⁺`` at ``k``: no insurance left;
- ``k_r < k``: the job cannot do its work, its utility is ``≤ 0 ≤ Û⁺(π_truth) ≤ U⁺(π_truth) + Δ``.

With ``duration_revealed`` and a truthful report every planned outcome has ``v − P > 0``, so the
rule never fires (tests check it); it can then fire only for a job that runs longer than any
duration it reported.

Example: ``v = deadline(2, 1)``, released 0, started 0, ``k = 1``, flat ``p = 0.3``: before round 1
the earliest completion is 2 (value 1, price 0.6): it continues; before round 2 the earliest is 3
(value 0, price 0.9 > 0): cancelled, so ``e = 2`` for every duration ``≥ 3``.
"""

from __future__ import annotations

import numpy as np

from walras.allocator.sow.model import Instance
from walras.allocator.sow.prices import PriceMenu


def unprofitable(inst: Instance, menu: PriceMenu, concurrency: int, start: int, tau: int) -> bool:
    """True when no completion from ``τ + 1`` on can pay: ``v(τ + 1 − r) < P(s, k, τ + 1 − s)``.

    Evaluated through :func:`profitable_span` so that the round step and the admission's usage
    model round the price identically.
    """
    rounds = tau + 1 - start
    return profitable_span(inst, menu, concurrency, start, rounds) < rounds


def profitable_span(
    inst: Instance, menu: PriceMenu, concurrency: int, start: int, longest: int
) -> int:
    """``d* − 1``: the most rounds a job started at ``start`` can run before the rule cancels it.

    Durations up to the returned span complete with ``v − P ≥ 0``; ``longest`` caps the search
    (returns ``longest`` when every duration up to it pays).
    """
    if longest <= 0:
        return 0
    cum = menu.cumulative(start, start + longest)
    durations = np.arange(1, longest + 1)
    value = inst.value.values(start + durations - inst.release)
    bad = value < concurrency * cum[1:]
    return int(np.argmax(bad)) if bad.any() else longest


def run_end(
    inst: Instance, menu: PriceMenu, concurrency: int, start: int, duration: int, cancel: bool
) -> int:
    """``e(s, d)``: the round (exclusive) the job stops holding its GPUs if nothing evicts it."""
    if not cancel:
        return start + duration
    return start + min(duration, profitable_span(inst, menu, concurrency, start, duration))


def completes(
    inst: Instance, menu: PriceMenu, concurrency: int, start: int, duration: int, cancel: bool
) -> bool:
    """Whether outcome ``(start, duration)`` survives the rule (ignoring LIFO)."""
    return run_end(inst, menu, concurrency, start, duration, cancel) == start + duration


def positive_part(surplus: np.ndarray, cancel: bool) -> np.ndarray:
    """``(v − P)⁺`` with the rule (an unprofitable completion is cancelled: worth 0), else as is."""
    return np.maximum(surplus, 0.0) if cancel else surplus

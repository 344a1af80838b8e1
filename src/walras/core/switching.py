"""When a running gang switches GPU type: the realiser's credit, priced from the restart cost.

A gang placed afresh loses ``restart_s`` seconds of work (checkpoint, reschedule, reload; about
10 s, Hadar's figure). Gavel's priority moves a job whose targets split over two types between
them every round, so every such job pays ``restart_s`` per round. The realiser
(``walras.allocator.rounds.plan_round`` with ``order="balanced"``) instead visits pairs by their
deficit ``target · elapsed − received`` (seconds owed) divided by ``√target`` and gives a running
gang a credit ``θ`` on its own pair's key, so it switches only when some key elsewhere exceeds its
own by ``θ``.

Why ``√target``. The plain deficit (``order="deficit"``) favours pairs with large targets, which
under price discovery's remaining-work weighting are the short jobs: on Gavel's D5 (price
discovery, β = −0.5, backfill, 10 s restarts) it gave an average JCT of 41.5 h but a makespan of
346.4 h (the long, small-target jobs wait). Normalising by the target as Gavel's ratio does
(``"behind"``: ``elapsed − received/target``) gave 332.6 h but 50.4 h. The geometric middle gave
343.8 h and 42.7 h (Gavel's max-min fairness record: 345.3 h, 62.3 h), and on
``bench/bench_realiser.py`` 4.9 % of pods restarted per steady round when everything fits and
3.7× fewer restarts than Gavel's order when oversubscribed, at no worse share error. It is the one
middle value measured, not a fitted one.

The band below is derived for the deficit key (``θ/2``); for the balanced key the same argument
gives ``L = θ·√(t(1 − t))/(√t + √(1 − t))`` (``θ/(2√2)`` at ``t = 1/2``; tested in
``tests/unit/test_rounds_blocks.py``), so blocks are about 30 % shorter at the same ``θ``.

Why ``θ = HOLD_PER_RESTART · restart_s`` (the restart cost counted against the gain). A job alone,
split ``(t, 1 − t)`` over groups a and b, leads on a by ``ℓ`` and on b by ``−ℓ`` (its received
times add up to its elapsed time). On a, its key there is ``θ − ℓ`` and on b ``ℓ``: it moves when
``ℓ > θ / 2``, then symmetrically back. So ``ℓ`` swings over ``[−θ/2, θ/2]``: it stays
``θ / (1 − t)`` on a and ``θ / t`` on b, a cycle of ``θ / (t (1 − t)) ≥ 4 θ`` seconds with two
restarts. The restart overhead is at most ``2 restart_s / 4θ = 1 / (2 · HOLD_PER_RESTART)`` of
its time (0.7 % with 72), against about ``restart_s / round_s`` (2.8 % at 10 s per 360 s round)
when it alternates every round. The price is the realised-share error: ``|received / elapsed −
target| ≤ (θ / 2 + one round) / elapsed``, which still falls like ``1 / elapsed``.

When every job with a positive target fits at once (the cluster is not oversubscribed), who runs
is settled and only *where* is at stake: a lead on one type moves throughput between the job's own
types, which costs the job utility (price discovery's log utility) only in second order, while
each restart avoided saves ``restart_s`` of work. :func:`fit_credit` gives each job the credit
that minimises the two together at its age (blocks grow like ``elapsed^(2/3)``; a split between
types of the same rate is rounded to one type). Utility given up (the policy's own log utility of
the realised work rate against the target rate) is reported beside the restarts saved by
``bench/bench_realiser.py``.

``restart_s = 0`` keeps Gavel's priority order exactly (an explicit ``hold`` then keeps its old
meaning): with no restart cost there is nothing to trade.

Worked example: ``restart_s = 10`` gives ``θ = 720 s`` (two 360 s rounds); a job split 0.5/0.5
alone stays about ``720 / 0.5 = 1440 s`` (4 rounds) on each type instead of switching every round
(5 rounds in whole rounds: the lead moves by half a round per round and ties go to the lower
group; ``walras.allocator.rounds`` shows the sequence).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

HOLD_PER_RESTART = 72.0
"""Credit per second of restart cost while the cluster is oversubscribed (overhead ≤ 1/144)."""

FIT_SCALE = 3.0
""":func:`fit_credit` uses ``FIT_SCALE · θ*``: longer blocks than the model's optimum (whose loss
at ``3θ*`` is ``(3²/2 + 1/3) / 1.5 ≈ 3.2×`` its minimum), the price of at most 5 % of pods
restarted per round on the 1,000-job benchmark, where it still gives up less utility than Gavel's
order (docs/evaluation.md#restarts-and-realiser-error)."""


@dataclass(frozen=True, slots=True)
class Switching:
    """``plan_round``'s ordering and credit; ``fit``: use :func:`fit_credit` when all jobs fit."""

    order: str
    hold: float
    fit: bool


def switching(restart_s: float, hold_s: float) -> Switching:
    """The realiser's settings for a restart cost and an explicit extra credit (both seconds).

    >>> switching(10.0, 0.0)
    Switching(order='balanced', hold=720.0, fit=True)
    >>> switching(0.0, 0.0)
    Switching(order='gavel', hold=0.0, fit=False)
    """
    if restart_s <= 0:
        # No restart cost: nothing to trade; an explicit hold alone keeps its old meaning.
        return Switching("gavel", max(hold_s, 0.0), False)
    return Switching("balanced", hold_s + HOLD_PER_RESTART * restart_s, True)


def fit_credit(
    targets: FloatArray, rates: FloatArray, elapsed: FloatArray, restart_s: float, floor: float
) -> FloatArray:
    """Per job, the credit that minimises its utility given up when every job fits.

    ``targets`` ``(J, G)``, ``rates`` ``(J, G)`` (work per second of the job on each group's
    type), ``elapsed`` ``(J,)`` seconds. A job split ``(t, 1 − t)`` between types whose rates
    differ by ``gap``, at target rate ``u``, with a lead ``ℓ`` seconds on one of them after
    ``e`` seconds, runs at ``u + ℓ · gap / e`` instead of ``u``: its log utility is off by about
    ``½ (ℓ gap / (u e))²``, ``(θ gap / (u e))² / 24`` on average over the band ``ℓ ∈ [−θ/2, θ/2]``.
    Its restarts cost ``2 restart_s t (1 − t) / θ`` of its time (two per cycle of
    ``θ / (t (1 − t))``). The sum is least at

        θ* = (24 · restart_s · t (1 − t) · (u e / gap)²)^(1/3),

    (used times :data:`FIT_SCALE`), which grows like ``e^(2/3)``: the share error
    ``(θ/2 + one round) / e`` still falls (like ``e^(−1/3)``), and restarts per round fall too.
    Jobs whose types run at the same rate (``gap = 0``) are never moved (their split is rounded
    to one type, which costs the job nothing); the credit is capped at ``2 e + floor`` (a lead
    never exceeds ``e``) and is at least ``floor``.

    Example: ``restart_s = 10``, ``t = 0.5``, ``u / gap = 1``, ``e = 10,800 s`` (30 rounds of
    360 s): ``θ* = (24 · 10 · 0.25 · 10,800²)^(1/3) ≈ 1,913 s``, about five rounds.
    """
    t = np.asarray(targets, dtype=np.float64)
    a = np.asarray(rates, dtype=np.float64)
    e = np.asarray(elapsed, dtype=np.float64)
    pos = t > 0
    rows = t.sum(axis=1)
    share = np.where(rows > 0, t.max(axis=1, initial=0.0) / np.where(rows > 0, rows, 1.0), 1.0)
    spread = share * (1.0 - share)
    u = (t * a).sum(axis=1)
    hi = np.where(pos, a, -np.inf).max(axis=1, initial=-np.inf)
    lo = np.where(pos, a, np.inf).min(axis=1, initial=np.inf)
    gap = np.where(pos.sum(axis=1) > 1, hi - lo, 0.0)
    cap = 2.0 * e + floor
    with np.errstate(divide="ignore", invalid="ignore"):
        best = FIT_SCALE * np.cbrt(24.0 * restart_s * spread * (u * e / gap) ** 2)
    best = np.where(gap > 0, best, np.where(spread > 0, cap, floor))
    best = np.where(np.isfinite(best), best, cap)
    return np.asarray(np.clip(best, floor, cap), dtype=np.float64)

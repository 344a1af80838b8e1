"""When a running gang switches GPU type: the realiser's credit, priced from the restart cost.

A gang placed afresh loses ``restart_s`` seconds of work (checkpoint, reschedule, reload; about
10 s, Hadar's figure). Gavel's priority moves a job whose targets split over two types between
them every round, so every such job pays ``restart_s`` per round. The realiser
(``walras.allocator.rounds.plan_round`` with ``order="deficit"``) instead visits pairs by their
deficit ``target · elapsed − received`` (seconds owed) and gives a running gang a credit ``θ`` on
its own pair, so it switches only when some deficit elsewhere exceeds its own by ``θ``.

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
is settled and only *where* is at stake: a deviation moves throughput between a job's own types
and is paid back within the cycle, so the realiser lets the blocks grow to
``FIT_HOLD_PER_RESTART · restart_s`` (restart overhead ≤ 0.06 %). Utility given up (the
policy's own log utility of the realised work rate against the target rate) is reported beside
the restarts saved by ``bench/bench_realiser.py``.

``restart_s = 0`` (and no explicit ``hold``) keeps Gavel's priority order exactly: with no
restart cost there is nothing to trade.

Worked example: ``restart_s = 10`` gives ``θ = 720 s`` (two 360 s rounds); a job split 0.5/0.5
alone stays ``720 / 0.5 = 1440 s`` (4 rounds) on each type instead of switching every round.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_PER_RESTART = 72.0
"""Credit per second of restart cost while the cluster is oversubscribed (overhead ≤ 1/144)."""

FIT_HOLD_PER_RESTART = 864.0
"""Credit per second of restart cost when every job fits at once (overhead ≤ 1/1728)."""


@dataclass(frozen=True, slots=True)
class Switching:
    """``plan_round``'s ordering and credits (``hold_fit`` None: one credit for both cases)."""

    order: str
    hold: float
    hold_fit: float | None


def switching(restart_s: float, hold_s: float) -> Switching:
    """The realiser's settings for a restart cost and an explicit extra credit (both seconds).

    >>> switching(10.0, 0.0)
    Switching(order='deficit', hold=720.0, hold_fit=8640.0)
    >>> switching(0.0, 0.0)
    Switching(order='gavel', hold=0.0, hold_fit=None)
    """
    if restart_s <= 0 and hold_s <= 0:
        return Switching("gavel", 0.0, None)
    if restart_s <= 0:
        return Switching("gavel", hold_s, None)  # an explicit hold alone keeps its old meaning
    return Switching(
        "deficit",
        hold_s + HOLD_PER_RESTART * restart_s,
        hold_s + FIT_HOLD_PER_RESTART * restart_s,
    )

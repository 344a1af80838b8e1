"""Restart-aware re-planning (``plan_round(preempt=True)``, ``admission.QueueJob.stay``).

The rule: "running jobs keep their GPUs unless moving them gains more than the restart cost". With
every job re-planned each round, a running job's options are: keep its GPUs (no restart) or any
allocation (restart paid). Oracles: the queue choice against enumerating every subset and every
type-count allocation with that rule written out, and the rule's exact break-even points.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from walras.allocator.hadar import Hyperbolic, make_inputs, plan_round
from walras.allocator.hadar.admission import Market, QueueJob, choose

FloatArray = npt.NDArray[np.float64]

RESTART = 10.0
H = 3600.0  # Hyperbolic's time scale


def hyperbolic(gang: int, tau: float) -> float:
    """``Hyperbolic`` utility written out: ``W · h / (h + τ)`` (weight 1)."""
    return gang * H / (H + tau)


def price(gamma: FloatArray, cap: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """Eq. 5, pooled per type: ``lo · (hi/lo)^(γ/c)``."""
    return np.asarray(lo * (hi / lo) ** (gamma / cap), dtype=np.float64)


def compositions(total: int, caps: list[int]) -> Iterator[tuple[int, ...]]:
    for w in itertools.product(*(range(c + 1) for c in caps)):
        if sum(w) == total:
            yield w


def brute(
    speed: FloatArray,
    gangs: list[int],
    rem: list[float],
    elapsed: list[float],
    stay: list[tuple[int, ...] | None],
    cap: FloatArray,
    lo: FloatArray,
    hi: FloatArray,
) -> float:
    """Max total payoff over subsets admitted in index order, each at its best allocation; a
    running job pays no restart iff it keeps exactly its GPUs per type (``stay``)."""
    n = len(gangs)
    best_total = 0.0
    for subset in itertools.product((False, True), repeat=n):
        free = [int(c) for c in cap]
        total, ok = 0.0, True
        for j in (j for j in range(n) if subset[j]):
            prices = price(cap - np.array(free, dtype=np.float64), cap, lo, hi)
            best, arg = -math.inf, None
            for w in compositions(gangs[j], free):
                used = [t for t in range(len(w)) if w[t] > 0]
                rate = min(float(speed[j, t]) for t in used)
                if rate <= 0:
                    continue
                restart = 0.0 if stay[j] == w else RESTART
                tau = elapsed[j] + restart + rem[j] / rate
                pay = hyperbolic(gangs[j], tau) - sum(w[t] * float(prices[t]) for t in used)
                if pay > best:
                    best, arg = pay, w
            if arg is None or not best > 0:
                ok = False
                break
            total += best
            free = [f - x for f, x in zip(free, arg, strict=True)]
        if ok:
            best_total = max(best_total, total)
    return best_total


def queue_job(
    j: int, speed: FloatArray, gang: int, rem: float, elapsed: float, stay: tuple[int, ...] | None
) -> QueueJob:
    """The QueueJob of the rule: utilities with the restart; a running job's stay without."""
    with np.errstate(divide="ignore"):
        tau = elapsed + RESTART + rem / speed
    utils = np.where(speed > 0, [hyperbolic(gang, float(t)) for t in tau], 0.0)
    if stay is None:
        return QueueJob(j, speed, gang, utils)
    rate = min(float(speed[t]) for t in range(len(stay)) if stay[t] > 0)
    util = hyperbolic(gang, elapsed + rem / rate)
    return QueueJob(j, speed, gang, utils, np.array(stay, dtype=np.int64), util, rate)


def test_restart_aware_choice_matches_brute_force() -> None:
    rng = np.random.default_rng(14)
    stayed_for_restart = 0
    for _ in range(60):
        n, T = int(rng.integers(2, 5)), 2
        cap = rng.integers(1, 4, T).astype(np.float64)
        speed = rng.uniform(0.5, 4.0, (n, T))
        gangs = [int(g) for g in rng.integers(1, 3, n)]
        rem = [float(r) for r in rng.uniform(500.0, 5000.0, n)]
        elapsed = [float(e) for e in rng.uniform(0.0, 2000.0, n)]
        # Some jobs run now: each on a random whole allocation within what is left of capacity.
        left = [int(c) for c in cap]
        stay: list[tuple[int, ...] | None] = []
        for g in gangs:
            options = list(compositions(g, left)) if rng.random() < 0.6 else []
            w = options[int(rng.integers(len(options)))] if options else None
            stay.append(w)
            if w is not None:
                left = [a - b for a, b in zip(left, w, strict=True)]
        # Bounds differ per type so that allocations do not tie in payoff.
        lo = rng.uniform(0.05, 0.3, T)
        hi = lo * rng.uniform(2.0, 20.0, T)
        queue = [queue_job(j, speed[j], gangs[j], rem[j], elapsed[j], stay[j]) for j in range(n)]
        market = Market(cap, lo, hi)
        free0 = cap.astype(np.int64)
        want = brute(speed, gangs, rem, elapsed, stay, cap, lo, hi)
        dp, used = choose(queue, free0, market, "dp")
        assert used == "dp"
        assert sum(a.payoff for a in dp) == pytest.approx(want, rel=1e-9, abs=1e-12)
        greedy, _ = choose(queue, free0, market, "greedy")
        assert sum(a.payoff for a in greedy) <= want + 1e-9
        for a in dp:
            s = stay[a.job]
            if s is not None and tuple(int(x) for x in a.counts) == s:
                assert a.rate == pytest.approx(queue[a.job].stay_rate)
                stayed_for_restart += 1
    assert stayed_for_restart > 0  # the sample exercises the stay option


def _two_jobs_one_gpu(margin: float, restart_aware: bool = True) -> tuple[bool, bool]:
    """Job 0 runs on the only GPU; job 1 waits with less work left:
    ``rem_1 / r = rem_0 / r − (RESTART + margin)``. Equal gangs, rates and prices: the payoffs
    differ only in the utility, a decreasing function of the completion time, so job 1 should
    take the GPU iff ``e + RESTART + rem_1/r < e + rem_0/r``, i.e. iff ``margin > 0``.
    Returns (job 0 placed, job 1 placed)."""
    r, rem0 = 2.0, 7200.0
    rem1 = rem0 - r * (RESTART + margin)
    inputs = make_inputs(
        np.array([[r], [r]]),
        [1, 1],
        [rem0, rem1],
        [0],
        [1],
        elapsed=[600.0, 600.0],
        current=np.array([[1], [0]]),
        total_work=[1e5, 1e5],
        restart_seconds=RESTART,
        utility=Hyperbolic(H),
        u_min=[0.01],
        u_max=[0.02],
    )
    plan = plan_round(inputs, method="dp", preempt=True, restart_aware=restart_aware)
    return plan.job(0) is not None, plan.job(1) is not None


@pytest.mark.parametrize("margin", [-1.0, 1.0])
def test_running_job_is_preempted_only_when_the_gain_exceeds_the_restart(margin: float) -> None:
    kept, took = _two_jobs_one_gpu(margin)
    assert (kept, took) == ((False, True) if margin > 0 else (True, False))


def test_without_the_credit_a_waiting_job_preempts_for_less_than_the_restart() -> None:
    # The same instance at margin −1: re-planned as if it waited, job 0 also pays the restart, so
    # the one with less work (job 1) wins although its gain (9 s) is below the restart (10 s).
    assert _two_jobs_one_gpu(-1.0, restart_aware=False) == (False, True)


@pytest.mark.parametrize("margin", [-1.0, 1.0])
def test_running_job_moves_only_when_the_time_saved_exceeds_the_restart(margin: float) -> None:
    # Flat equal prices on both types: moving pays iff rem/slow − rem/fast > restart.
    fast, slow = 2.0, 1.0
    rem = (RESTART + margin) / (1.0 / slow - 1.0 / fast)
    inputs = make_inputs(
        np.array([[fast, slow]]),
        [1],
        [rem],
        [0, 1],
        [1, 1],
        current=np.array([[0, 1]]),
        total_work=[1000.0],
        elapsed=[50.0],
        restart_seconds=RESTART,
        u_min=[0.1, 0.1],
        u_max=[0.1, 0.1],
    )
    jp = plan_round(inputs, preempt=True, method="dp").job(0)
    assert jp is not None
    if margin > 0:
        assert jp.moved and jp.placement == ((0, 1),)
    else:
        assert jp.kept and not jp.moved and jp.placement == ((1, 1),)

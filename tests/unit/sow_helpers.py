"""Independent oracles for the SoW mechanism tests (one GPU type).

- :func:`literal_lifo` plays rounds literally, as the SoW paper (§3) words it: committed load is
  the ``k`` of running/starting jobs; while it exceeds ``C``, remove the most recently born
  active job (pending ones are cancelled, running ones evicted). It does not use the mechanism's
  sequential "loads of earlier-born jobs" shortcut, so it checks that shortcut.
- :func:`exact_failure` enumerates every joint outcome of the earlier-born jobs (exact ``q``).
- :func:`true_utility`, :func:`estimation_slack`, :func:`late_charge` evaluate a launch plan
  under the reporter's TRUE SoW (Theorem 3.2's quantities).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from walras.allocator.sow import Admission, FailureTable, Instance, PriceMenu


@dataclass(frozen=True)
class SimJob:
    """A job in birth order: ``k`` GPUs, arrives at ``arrival``, starts at ``start`` (or never).

    It is active (can be cancelled or evicted) from round ``born`` on.
    """

    k: int
    arrival: int
    start: int | None
    duration: int
    born: int = 0


def literal_lifo(jobs: Sequence[SimJob], capacity: int, first_round: int = 0) -> list[str]:
    """Fate of each job: ``"completed"``, ``"failed"`` (evicted/cancelled) or ``"not_run"``."""
    return literal_trace(jobs, capacity, first_round)[0]


def literal_trace(
    jobs: Sequence[SimJob], capacity: int, first_round: int = 0, until: int | None = None
) -> tuple[list[str], list[tuple[int, int, str]]]:
    """Fates, and the observable events ``(round, job, event)`` of rounds before ``until``."""
    fate = ["active"] * len(jobs)
    events: list[tuple[int, int, str]] = []
    end = max([first_round + 1] + [j.arrival + 1 for j in jobs])
    end = max([end] + [(j.start or 0) + j.duration + 1 for j in jobs])
    for tau in range(first_round, end):
        log = until is None or tau < until
        for i, j in enumerate(jobs):
            if j.born <= tau and j.arrival == tau and log:
                events.append((tau, i, "arrived"))
            if fate[i] == "active" and j.start is None and j.arrival == tau:
                fate[i] = "not_run"

        def running(i: int, tau: int = tau) -> bool:
            j = jobs[i]
            live = fate[i] == "active" and j.born <= tau and j.start is not None
            return live and j.start is not None and j.start <= tau < j.start + j.duration

        load = sum(jobs[i].k for i in range(len(jobs)) if running(i))
        for i in range(len(jobs) - 1, -1, -1):
            if load <= capacity:
                break
            if fate[i] != "active" or jobs[i].born > tau:
                continue
            if running(i):
                load -= jobs[i].k
            fate[i] = "failed"
            if log:
                events.append((tau, i, "failed"))
        for i, j in enumerate(jobs):
            if running(i) and j.start is not None and j.start + j.duration - 1 == tau:
                fate[i] = "completed"
                if log:
                    events.append((tau, i, "completed"))
    return fate, events


def outcomes(adm: Admission) -> list[tuple[float, SimJob]]:
    """The earlier job's support points as (probability, SimJob under its plan)."""
    inst = adm.instance
    out = []
    for a, d, f in zip(inst.arrivals, inst.durations, inst.probabilities, strict=True):
        if f <= 0:
            continue
        entry = adm.plan.lookup(inst.key(a, d))
        start = entry.start if entry is not None else None
        out.append((f, SimJob(inst.demands[0].concurrency, a, start, d)))
    return out


class ExactOracle:
    """Exact failure probability of a newest job against fixed earlier-born admissions."""

    def __init__(self, earlier: Sequence[Admission], capacity: int, first_round: int = 0):
        self.earlier = [outcomes(a) for a in earlier]
        self.capacity = capacity
        self.first_round = first_round
        self.failure = lru_cache(maxsize=None)(self._failure)

    def _failure(self, k: int, arrival: int, start: int, duration: int) -> float:
        q = 0.0
        me = SimJob(k, arrival, start, duration)
        for combo in itertools.product(*self.earlier):
            w = 1.0
            for f, _ in combo:
                w *= f
            fate = literal_lifo([j for _, j in combo] + [me], self.capacity, self.first_round)
            q += w * (fate[-1] == "failed")
        return q


def true_utility(
    oracle: ExactOracle,
    true_inst: Instance,
    adm: Admission,
    k_true: int,
    cancelled: Callable[[int, int], bool] | None = None,
) -> float:
    """Expected TRUE utility of the reporter under the plan and prices of ``adm``.

    Outcomes follow the true distribution; the job holds the reported ``k_r`` GPUs; with
    ``k_r < k_true`` it cannot do its work (value 0) but still pays if it "completes".
    ``cancelled(start, duration)``: outcomes a cancellation rule ends for free (worth 0).
    """
    k_r = adm.instance.demands[0].concurrency
    total = 0.0
    for a, d, f in zip(
        true_inst.arrivals, true_inst.durations, true_inst.probabilities, strict=True
    ):
        entry = adm.plan.lookup(adm.instance.key(a, d))
        if entry is None or entry.start is None:
            continue
        s = entry.start
        if cancelled is not None and cancelled(s, d):
            continue
        q = oracle.failure(k_r, a, s, d)
        v = true_inst.value(s + d - true_inst.release) if k_r >= k_true else 0.0
        total += f * (1.0 - q) * (v - adm.menus[0].bundle(s, k_r, d))
    return total


def _points_by_key(inst: Instance) -> dict[tuple[int, ...], list[tuple[int, int, float]]]:
    groups: dict[tuple[int, ...], list[tuple[int, int, float]]] = {}
    for a, d, f in zip(inst.arrivals, inst.durations, inst.probabilities, strict=True):
        groups.setdefault(inst.key(a, d), []).append((a, d, f))
    return groups


def estimation_slack(
    oracle: ExactOracle, true_inst: Instance, k: int, menu: PriceMenu, table: FailureTable
) -> float:
    """``Δ = max_π |Û(π) − U(π)|`` over plans for the true SoW (Theorem 3.2's error term).

    ``Û`` uses the posted ``q̂``, ``U`` the exact ``q``. Both separate over plan keys, so the max
    over plans is the sum over keys of the max over {don't run (0)} ∪ starts.
    """
    last = table.first_start + len(table.q) - 1
    delta = 0.0
    for key, pts in _points_by_key(true_inst).items():
        best = 0.0
        for s in range(key[0], last + 1):
            err = 0.0
            for a, d, f in pts:
                if d not in table.durations:
                    continue
                q = oracle.failure(k, a, s, d)
                surplus = true_inst.value(s + d - true_inst.release) - menu.bundle(s, k, d)
                err += f * (q - table.at(s, d)) * surplus
            best = max(best, abs(err))
        delta += best
    return delta


def optimal_utility(
    oracle: ExactOracle, true_inst: Instance, k: int, menu: PriceMenu, last_start: int
) -> float:
    """``max_π U(π)`` with exact ``q``: no report can do better (with the true ``k``)."""
    total = 0.0
    for key, pts in _points_by_key(true_inst).items():
        best = 0.0
        for s in range(key[0], last_start + 1):
            u = 0.0
            for a, d, f in pts:
                v = true_inst.value(s + d - true_inst.release)
                u += f * (1.0 - oracle.failure(k, a, s, d)) * (v - menu.bundle(s, k, d))
            best = max(best, u)
        total += best
    return total


def late_charge(oracle: ExactOracle, true_inst: Instance, adm: Admission, k_true: int) -> float:
    """``N(π) = Σ f (1 − q) (P − v)⁺`` at the TRUE ``k``: expected charge beyond value.

    A plan whose completions can cost more than they are worth leaves room for "insurance":
    a larger reported ``k`` can turn those outcomes into (free) evictions.
    """
    total = 0.0
    for a, d, f in zip(
        true_inst.arrivals, true_inst.durations, true_inst.probabilities, strict=True
    ):
        entry = adm.plan.lookup(adm.instance.key(a, d))
        if entry is None or entry.start is None:
            continue
        s = entry.start
        q = oracle.failure(k_true, a, s, d)
        surplus = true_inst.value(s + d - true_inst.release) - adm.menus[0].bundle(s, k_true, d)
        total += f * (1.0 - q) * max(0.0, -surplus)
    return total

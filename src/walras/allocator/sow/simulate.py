"""Drive the mechanism over a known realisation: births, arrivals, completions (pure).

The simulator and the benchmark know each job's realised ``(arrival, duration)`` in advance; the
ledger does not: it is told each arrival in its round (with the duration if the SoW reveals it)
and each completion at the end of the round it happens in, like the operator would.

Welfare is ``Σ v`` over completed jobs, revenue ``Σ P`` over them (paper §2). ``cancelled``
counts LIFO cancellations; ``unprofitable`` the running jobs the mechanism cancelled because no
completion could pay (:mod:`.cancellation`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow.admission import admit
from walras.allocator.sow.ledger import Ledger, Phase
from walras.allocator.sow.model import StatementOfWork, instances
from walras.allocator.sow.params import MechanismParams
from walras.allocator.sow.plan import last_start
from walras.allocator.sow.round_step import RoundReport, end_round, start_round

Realisation = Mapping[str, tuple[int, int]]
"""Job id → (absolute arrival round, duration on the reference type)."""


@dataclass(frozen=True, slots=True)
class MarketOutcome:
    """Result of one simulated run."""

    ledger: Ledger
    reports: tuple[RoundReport, ...]
    welfare: float
    revenue: float
    completed: int
    evicted: int
    cancelled: int
    not_run: int
    admit_seconds: tuple[float, ...]
    unprofitable: int = 0  # cancelled while running: no completion could pay (not in cancelled)


def sample_realisation(sows: Sequence[StatementOfWork], rng: np.random.Generator) -> Realisation:
    """Draw every job's ``(arrival, duration)`` from its SoW's distribution (in name order)."""
    out: dict[str, tuple[int, int]] = {}
    for sow in sorted(sows, key=lambda s: (s.birth, s.name)):
        for inst in instances(sow):
            i = int(rng.choice(len(inst.probabilities), p=np.asarray(inst.probabilities)))
            out[inst.job] = (inst.arrivals[i], inst.durations[i])
    return out


def run_market(
    params: MechanismParams,
    capacities: Mapping[str, int],
    sows: Sequence[StatementOfWork],
    realisation: Realisation,
    horizon: int | None = None,
    clock: Callable[[], float] | None = None,
) -> MarketOutcome:
    """Admit SoWs at their births (ties by name), play rounds until nothing is active.

    ``clock`` (optional, a zero-argument callable returning seconds) times each admission.
    """
    ledger = Ledger.empty(params, dict(capacities))
    order = sorted(sows, key=lambda s: (s.birth, s.name))
    last = max([s.birth for s in order] + [a + d for a, d in realisation.values()] + [0])
    end = horizon if horizon is not None else last + 2 * params.max_duration + _slack(order)
    reports = []
    timings: list[float] = []
    nxt = 0
    for t in range(end):
        while nxt < len(order) and order[nxt].birth == t:
            t0 = clock() if clock is not None else 0.0
            ledger, _ = admit(ledger, order[nxt])
            if clock is not None:
                timings.append(clock() - t0)
            nxt += 1
        arrivals: dict[str, int | None] = {}
        finished = []
        for j in ledger.jobs:
            if j.job not in realisation:
                raise InvalidProblem(f"no realisation for job {j.job}", field="realisation")
            a, d = realisation[j.job]
            inst = j.admission.instance
            if j.phase is Phase.PENDING and a == t:
                arrivals[j.job] = d if inst.duration_revealed else None
        ledger, report = start_round(ledger, arrivals)
        for j in ledger.jobs:
            if j.phase is Phase.RUNNING and j.start is not None and j.gpu_type is not None:
                dem = next(x for x in j.admission.instance.demands if x.gpu_type == j.gpu_type)
                if j.start + dem.duration_on(realisation[j.job][1]) - 1 == t:
                    finished.append(j.job)
        ledger, done = end_round(ledger, finished)
        reports.append(replace(report, completed=done.completed, charges=done.charges))
        if nxt >= len(order) and not any(j.phase.active for j in ledger.jobs) and t >= last:
            break
    done_jobs = [j for j in ledger.jobs if j.phase is Phase.COMPLETED]
    return MarketOutcome(
        ledger,
        tuple(reports),
        float(sum(j.value for j in done_jobs)),
        float(sum(j.charge for j in done_jobs)),
        len(done_jobs),
        sum(j.phase is Phase.EVICTED for j in ledger.jobs),
        sum(j.phase is Phase.CANCELLED and not j.unprofitable for j in ledger.jobs),
        sum(j.phase is Phase.NOT_RUN for j in ledger.jobs),
        tuple(timings),
        sum(j.unprofitable for j in ledger.jobs),
    )


def _slack(order: Sequence[StatementOfWork]) -> int:
    return max((last_start(i) for s in order for i in instances(s)), default=0) + 1

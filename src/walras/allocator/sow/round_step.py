"""One round of the mechanism: arrivals, starts per plan, LIFO eviction, completions (§3).

``step(ledger, arrivals, finished)`` plays round ``t = ledger.time``; the operator calls its two
halves apart: :func:`start_round` (steps 1-4, at the round boundary) and :func:`end_round`
(step 5, with the completions observed during the round):

1. each job in ``arrivals`` (observed arriving in round ``t``, with the revealed duration if its
   SoW says so) looks up its plan: ``waiting`` for its start, or ``not_run``;
2. with ``cancel_unprofitable`` (the default), a job running since ``s < t`` whose earliest
   possible completion ``t + 1`` cannot pay under its report, ``v(t + 1 − r) < P(s, k, t + 1 −
   s)``, is cancelled for free (:mod:`.cancellation`; phase ``cancelled`` with ``start <
   finish``, listed in :attr:`RoundReport.unprofitable`); jobs whose start is ``t`` are
   *scheduled to start*;
3. the committed load of a type is the sum of ``k`` over jobs running on it or scheduled to start
   on it. While some type is over capacity, walk the active jobs from the most recently born:
   a job running or starting on an overloaded type is evicted (cancelled if it was only
   starting); a job that has not started (pending, or waiting for a later round) is cancelled;
   a job running on a type that is not overloaded stays. This is the paper's LIFO rule ("over
   all active jobs, including jobs that are not scheduled to run in the current round"), per
   type; with one type it is exactly the paper's;
4. scheduled jobs start;
5. each job in ``finished`` (observed completing at the end of round ``t``) completes: it gets
   ``v(t + 1 − release)`` and is charged ``P(s, k, t + 1 − s)`` from the menu posted at its
   birth. Evicted, cancelled and not-run jobs are charged 0.

A job listed in ``finished`` that this round's eviction already removed is ignored (the world
reports completions without knowing the eviction).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow.cancellation import unprofitable
from walras.allocator.sow.ledger import JobState, Ledger, Phase


@dataclass(frozen=True, slots=True)
class RoundReport:
    """What happened in round ``time`` (job ids in birth order)."""

    time: int
    started: tuple[str, ...]
    evicted: tuple[str, ...]
    cancelled: tuple[str, ...]
    not_run: tuple[str, ...]
    completed: tuple[str, ...]
    charges: tuple[tuple[str, float], ...]
    load: tuple[tuple[str, int], ...]
    unprofitable: tuple[str, ...] = ()  # running jobs cancelled because no completion could pay


def step(
    ledger: Ledger, arrivals: Mapping[str, int | None], finished: Collection[str] = ()
) -> tuple[Ledger, RoundReport]:
    """Play round ``ledger.time`` (:func:`start_round` then :func:`end_round`)."""
    ledger, report = start_round(ledger, arrivals)
    ledger, done = end_round(ledger, finished)
    return ledger, replace(report, completed=done.completed, charges=done.charges)


def start_round(ledger: Ledger, arrivals: Mapping[str, int | None]) -> tuple[Ledger, RoundReport]:
    """Steps 1-4 of round ``ledger.time``: arrivals, starts, LIFO eviction."""
    if ledger.round_open:
        raise InvalidProblem(f"round {ledger.time} was already started", field="time")
    t = ledger.time
    jobs = list(ledger.jobs)
    pos = {j.job: i for i, j in enumerate(jobs)}
    not_run: list[str] = []
    for job_id in sorted(arrivals, key=lambda x: pos.get(x, -1)):
        i = _index(pos, job_id, "arrivals")
        jobs[i] = _arrive(jobs[i], t, arrivals[job_id])
        if jobs[i].phase is Phase.NOT_RUN:
            not_run.append(job_id)
    unprofitable = _cancel_unprofitable(jobs, t) if ledger.params.cancel_unprofitable else []
    starting = {i for i, j in enumerate(jobs) if j.phase is Phase.WAITING and j.start == t}
    load = {g: 0 for g in ledger.gpu_types}
    for i, j in enumerate(jobs):
        if j.phase is Phase.RUNNING or i in starting:
            assert j.gpu_type is not None  # running and waiting jobs always have a type
            load[j.gpu_type] += j.concurrency_on(j.gpu_type)
    caps = dict(ledger.capacities)
    evicted: list[str] = []
    cancelled: list[str] = []
    for i in range(len(jobs) - 1, -1, -1):
        over = {g for g in load if load[g] > caps[g]}
        if not over:
            break
        j = jobs[i]
        if not j.phase.active:
            continue
        committed = j.phase is Phase.RUNNING or i in starting
        if committed and j.gpu_type not in over:
            continue
        if committed:
            assert j.gpu_type is not None
            load[j.gpu_type] -= j.concurrency_on(j.gpu_type)
        if j.phase is Phase.RUNNING:
            jobs[i] = replace(j, phase=Phase.EVICTED, finish=t)
            evicted.append(j.job)
        else:
            jobs[i] = replace(j, phase=Phase.CANCELLED, finish=t)
            cancelled.append(j.job)
            starting.discard(i)
    started = []
    for i in sorted(starting):
        jobs[i] = replace(jobs[i], phase=Phase.RUNNING)
        started.append(jobs[i].job)
    report = RoundReport(
        t,
        tuple(started),
        tuple(sorted(evicted, key=pos.__getitem__)),
        tuple(sorted(cancelled, key=pos.__getitem__)),
        tuple(not_run),
        (),
        (),
        tuple(sorted(load.items())),
        tuple(unprofitable),
    )
    return replace(ledger, jobs=tuple(jobs), round_open=True), report


def _cancel_unprofitable(jobs: list[JobState], t: int) -> list[str]:
    """Cancel (in place) running jobs that no completion from ``t + 1`` on can pay; their ids."""
    out = []
    for i, j in enumerate(jobs):
        if j.phase is not Phase.RUNNING or j.start is None or j.gpu_type is None or j.start >= t:
            continue
        inst = j.admission.instance
        di = [d.gpu_type for d in inst.demands].index(j.gpu_type)
        k = inst.demands[di].concurrency
        if unprofitable(inst, j.admission.menus[di], k, j.start, t):
            jobs[i] = replace(j, phase=Phase.CANCELLED, finish=t)
            out.append(j.job)
    return out


@dataclass(frozen=True, slots=True)
class Completions:
    """Jobs completed at the end of round ``time`` and their charges (birth order)."""

    time: int
    completed: tuple[str, ...]
    charges: tuple[tuple[str, float], ...]


def end_round(ledger: Ledger, finished: Collection[str] = ()) -> tuple[Ledger, Completions]:
    """Step 5: jobs observed finishing at the end of the open round complete; time advances."""
    if not ledger.round_open:
        raise InvalidProblem(f"round {ledger.time} was not started", field="time")
    t = ledger.time
    jobs = list(ledger.jobs)
    pos = {j.job: i for i, j in enumerate(jobs)}
    completed: list[str] = []
    charges: list[tuple[str, float]] = []
    for job_id in sorted(finished, key=lambda x: pos.get(x, -1)):
        i = _index(pos, job_id, "finished")
        j = jobs[i]
        if j.phase in (Phase.EVICTED, Phase.CANCELLED) and j.finish == t:
            continue
        if j.phase is not Phase.RUNNING:
            raise InvalidProblem(f"job {job_id} finished but is {j.phase.value}", field="finished")
        jobs[i] = _complete(j, t)
        completed.append(job_id)
        charges.append((job_id, jobs[i].charge))
    nxt = replace(ledger, time=t + 1, jobs=tuple(jobs), round_open=False)
    return nxt, Completions(t, tuple(completed), tuple(charges))


def _index(pos: Mapping[str, int], job_id: str, field_name: str) -> int:
    if job_id not in pos:
        raise InvalidProblem(f"unknown job {job_id!r} in {field_name}", field=field_name)
    return pos[job_id]


def _arrive(j: JobState, t: int, signal: int | None) -> JobState:
    inst = j.admission.instance
    if j.phase is not Phase.PENDING:
        # A job cancelled while pending may still "arrive" in the world: it stays cancelled.
        if j.phase is Phase.CANCELLED:
            return j
        raise InvalidProblem(f"job {j.job} arrived but is {j.phase.value}", field="arrivals")
    if inst.duration_revealed and signal is None:
        raise InvalidProblem(f"job {j.job} reveals its duration at arrival", field="arrivals")
    key = (t, signal) if inst.duration_revealed and signal is not None else (t,)
    entry = j.admission.plan.lookup(key)
    if entry is None or entry.start is None or entry.gpu_type is None:
        return replace(j, phase=Phase.NOT_RUN, arrival=t, signal=signal, finish=t)
    return replace(
        j,
        phase=Phase.WAITING,
        arrival=t,
        signal=signal,
        start=entry.start,
        gpu_type=entry.gpu_type,
    )


def _complete(j: JobState, t: int) -> JobState:
    assert j.start is not None and j.gpu_type is not None  # RUNNING invariant
    inst = j.admission.instance
    gi = [d.gpu_type for d in inst.demands].index(j.gpu_type)
    k = inst.demands[gi].concurrency
    charge = j.admission.menus[gi].bundle(j.start, k, t + 1 - j.start)
    return replace(
        j,
        phase=Phase.COMPLETED,
        finish=t + 1,
        charge=charge,
        value=inst.value(t + 1 - inst.release),
    )

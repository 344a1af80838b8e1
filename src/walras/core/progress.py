"""Progress that workloads report: the ``walras.dev/steps-done`` pod annotation, checked and summed.

A running workload patches ``walras.dev/steps-done: "<n>"`` (a decimal integer, monotone) on its
own pod (``walras.workload.report_progress``, ``docs/progress.md``). Both shells read it through the
pods they already see: the operator from its pod watch, a simulator from its simulated pods. Each
round the shell hands the job's pods' readings to :meth:`Tracker.observe`, which

1. **checks** every reading against the same pod's previous accepted one. A reading is ignored,
   and comes back as a :class:`Rejection` naming the pod (the operator posts it as an Event), when
   it is not a non-negative integer, is lower than that pod's previous reading, or implies a rate
   above ``ABSURD_FACTOR`` × the fastest rate the shell knows for the job on any GPU type
   (declared, measured or estimated)::

       (steps − steps_prev) / (t − t_prev)  >  ABSURD_FACTOR · fastest      ⇒  ignored

   A pod's first reading is bounded the same way from the job's last accepted progress (or its
   creation) — a workload restored from a checkpoint may report less than the job had (accepted:
   the work since the checkpoint is lost, and the job's total never goes down).
2. **sums** readings per job. *Gang* (any job that is not forked): every replica of a synchronous
   gang runs the same step sequence and reports the job's cumulative step counter (restored with
   its checkpoint), so ``stepsDone = max`` over the readings ever accepted (replicas that do not
   report do not hold the job back). *HadarE copies* (``spec.forkable``; pods of one copy share a
   round and a node): each copy reports the steps *it* ran since it started (from 0), and
   ``stepsDone = base + Σ_copies max over the copy's replicas``, where ``base`` holds the copies
   that are gone.
3. **measures** steps per second per GPU type: when a pod's reading changes from ``s₀`` (first
   seen at ``t₀``) to ``s₁`` (first seen at ``t₁``), the interval adds ``s₁ − s₀`` steps and
   ``t₁ − t₀`` seconds to the pod's GPU type; the measured rate is ``Σ steps / Σ seconds``, and
   each interval is one sample. The start-up before the first report is left out (a restart is
   not throughput). Times are when the shell saw the reading, so each end of an interval is late
   by at most one round: the error of a rate measured over ``T`` seconds is at most
   ``round / T``. Example: a pod seen at 100 steps at t=10 s and at 400 steps at t=70 s on a
   ``v100`` adds 300 steps, 60 s and one sample to ``v100``: 5 steps/s.

A unit of work is one step: ``spec.totalWork`` and ``spec.throughput`` (work per second of the
whole gang) are in steps when a workload reports progress. A restarted operator rebuilds the
tracker from ``status.progress`` (:meth:`Tracker.observe` reads it the first time it sees a job).

Nothing here imports the rest of the core: the shells build :class:`Reading` values from their
pods, so the simulator can use the module too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from walras.workload import identity

# The name the workload side writes (walras.workload, stdlib only, so the constant lives there).
ANN_STEPS_DONE: Final = identity.ANN_STEPS_DONE
# A reading faster than this many times the fastest known rate of its job is absurd: well above
# any honest measurement noise (a round's observation lag doubles a short interval's rate at
# worst), well below what a wrong unit (ms for s, bytes for steps) produces.
ABSURD_FACTOR: Final = 10.0
# Readings above this are absurd whatever the job declares (the CRD's bound on totalWork).
MAX_STEPS: Final = 10**18
# Measured rates replace declared ones once they have this many samples (walras.operator).
MIN_SAMPLES: Final = 3
# A declared throughput off from the measured one by more than this factor gets a condition.
MISMATCH_FACTOR: Final = 2.0

# Rejection reasons (Event reasons on the job; the message names the pod).
INVALID: Final = "ProgressInvalid"
DECREASING: Final = "ProgressDecreasing"
TOO_FAST: Final = "ProgressTooFast"

_INTEGER = re.compile(r"^\s*[+-]?[0-9]+\s*$")

JobKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Reading:
    """One pod's annotation as the shell sees it this round.

    ``copy`` is ``""`` for a gang; for a forked job, the copy the pod belongs to (its round and
    node). ``text`` is the raw annotation value (``""``: the pod has not reported).
    """

    pod: str
    uid: str
    gpu_type: str
    text: str
    copy: str = ""


@dataclass(frozen=True, slots=True)
class Rejection:
    """A reading that was ignored; ``reason`` is one of INVALID, DECREASING, TOO_FAST."""

    pod: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Measured:
    """Steps counted over seconds on one GPU type; ``samples`` reading intervals."""

    steps: float
    seconds: float
    samples: int

    @property
    def rate(self) -> float:
        """Steps per second (0 before the first interval)."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    def add(self, steps: float, seconds: float) -> Measured:
        return Measured(self.steps + steps, self.seconds + seconds, self.samples + 1)


@dataclass(frozen=True, slots=True)
class Progress:
    """A job's progress as far as its workload reported it.

    ``steps_done`` is None while no reading was ever accepted (the shells then fall back to the
    accounted work, ``walras.core.history``); ``updated_at`` is when it last grew.
    """

    steps_done: float | None = None
    updated_at: float | None = None
    measured: Mapping[str, Measured] = field(default_factory=dict)

    def measured_rate(self, gpu_type: str, min_samples: int = MIN_SAMPLES) -> float | None:
        """Measured steps/s on ``gpu_type`` once it has ``min_samples`` samples, else None."""
        m = self.measured.get(gpu_type)
        if m is None or m.samples < min_samples or m.seconds <= 0:
            return None
        return m.rate


def parse_steps(text: str) -> int:
    """The annotation's value as a non-negative integer; ValueError saying why otherwise."""
    if not _INTEGER.match(text):
        raise ValueError(f"{text[:40]!r} is not an integer")
    value = int(text)
    if value < 0:
        raise ValueError(f"{value} is negative")
    if value > MAX_STEPS:
        raise ValueError(f"{value} is above {MAX_STEPS:.0e}")
    return value


def estimated_finish(
    now: float, steps_done: float, total_work: float | None, rate: float
) -> float | None:
    """When the job reaches ``total_work`` at ``rate`` steps/s from ``now`` (None: unknown).

    ``now + (totalWork − stepsDone) / rate``; e.g. 400 of 1000 steps at 5 steps/s from t=10 s
    finishes at t=130 s.
    """
    if total_work is None or not rate > 0 or not math.isfinite(rate):
        return None
    return now + max(0.0, total_work - steps_done) / rate


def mismatch(declared: float, measured: float, factor: float = MISMATCH_FACTOR) -> bool:
    """Declared and measured throughput differ by more than ``factor`` either way."""
    if declared <= 0 or measured <= 0:
        return declared != measured
    return max(declared / measured, measured / declared) > factor


@dataclass(slots=True)
class _PodState:
    steps: int
    seen_at: float


@dataclass(slots=True)
class _JobState:
    created: float
    steps_done: float | None = None
    updated_at: float | None = None
    measured: dict[str, Measured] = field(default_factory=dict)
    pods: dict[str, _PodState] = field(default_factory=dict)  # by pod uid
    base: float = 0.0  # forked jobs: steps of copies that are gone
    copies: dict[str, float] = field(default_factory=dict)  # forked jobs: live copy -> steps


def _float(value: object, default: float = 0.0) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]  # any status value; failures caught below
    except (TypeError, ValueError, OverflowError):
        return default
    return x if math.isfinite(x) else default


def _restore(status: Mapping[str, Any], created: float) -> _JobState:
    """The tracker's state of one job from its persisted ``status.progress``."""
    raw = status.get("progress")
    state = _JobState(created=created)
    if not isinstance(raw, Mapping):
        return state
    from walras.core.model import parse_time  # lazy: model imports this module

    if raw.get("stepsDone") is not None:
        state.steps_done = max(0.0, _float(raw.get("stepsDone")))
        state.updated_at = parse_time(raw.get("updatedAt"))
    measured = raw.get("measured")
    for gpu_type, m in measured.items() if isinstance(measured, Mapping) else ():
        if isinstance(m, Mapping):
            state.measured[str(gpu_type)] = Measured(
                max(0.0, _float(m.get("steps"))),
                max(0.0, _float(m.get("seconds"))),
                max(0, int(_float(m.get("samples")))),
            )
    state.base = max(0.0, _float(raw.get("forkBase")))
    copies = raw.get("copies")
    for name, steps in copies.items() if isinstance(copies, Mapping) else ():
        state.copies[str(name)] = max(0.0, _float(steps))
    return state


class Tracker:
    """Per-job reported progress, kept by a shell across rounds (keyed by job UID)."""

    def __init__(self, factor: float = ABSURD_FACTOR) -> None:
        self.factor = factor
        self._jobs: dict[str, _JobState] = {}

    def observe(
        self,
        uid: str,
        readings: Sequence[Reading],
        now: float,
        *,
        forked: bool = False,
        fastest: float | None = None,
        created: float = 0.0,
        status: Mapping[str, Any] | None = None,
    ) -> list[Rejection]:
        """Take this round's readings of one job's pods (see the module docstring).

        ``fastest``: the highest steps/s the job is known to reach on any type (declared or
        measured); None disables the rate check. ``status``: the job's status, read the first
        time the job is seen. Returns the readings ignored, in the order given.
        """
        state = self._jobs.get(uid)
        if state is None:
            state = _restore(status or {}, created)
            self._jobs[uid] = state
        # Not the job's own measured rates: a job measured on a slow type may move to a type
        # ten times faster; the shell passes the best rate it knows across types.
        limit = fastest if fastest is not None and fastest > 0 else None
        rejected: list[Rejection] = []
        live_copies: set[str] = set()
        # First readings are bounded from the job's progress before this round (several pods of
        # a gang, or several copies, may report for the first time in the same round).
        since = state.updated_at if state.updated_at is not None else state.created
        before = (since, state.steps_done or 0.0)
        for r in readings:
            if forked:
                live_copies.add(r.copy)
            if not r.text:
                continue
            bad = self._take(state, r, now, forked, limit, before)
            if bad is not None:
                rejected.append(bad)
        if forked:
            for gone in sorted(set(state.copies) - live_copies):
                state.base += state.copies.pop(gone)
        live_pods = {r.uid for r in readings}
        for pod_uid in [u for u in state.pods if u not in live_pods]:
            del state.pods[pod_uid]
        return rejected

    def _take(
        self,
        state: _JobState,
        r: Reading,
        now: float,
        forked: bool,
        limit: float | None,
        before: tuple[float, float],
    ) -> Rejection | None:
        try:
            steps = parse_steps(r.text)
        except ValueError as exc:
            return Rejection(r.pod, INVALID, f"pod {r.pod} reported steps-done {exc}; ignored")
        prev = state.pods.get(r.uid)
        if prev is not None and steps == prev.steps:
            return None
        if prev is not None and steps < prev.steps:
            return Rejection(
                r.pod,
                DECREASING,
                f"pod {r.pod} reported {steps} steps done after {prev.steps}; ignored",
            )
        gained: float
        if prev is not None:
            gained, since = float(steps - prev.steps), now - prev.seen_at
        else:
            # A pod's first reading: a fresh copy counts from 0; a gang pod may resume the job's
            # counter, so only the part above what the job had is new.
            start = 0.0 if forked else before[1]
            gained = max(0.0, steps - start)
            since = now - before[0]
        if limit is not None and gained > self.factor * limit * max(since, 0.0):
            return Rejection(
                r.pod,
                TOO_FAST,
                f"pod {r.pod} reported {steps} steps done: {gained:.0f} more in {since:.1f} s "
                f"is faster than {self.factor:g} x the fastest known rate {limit:.3g}/s; ignored",
            )
        if prev is not None and since > 0:
            m = state.measured.get(r.gpu_type, Measured(0.0, 0.0, 0))
            state.measured[r.gpu_type] = m.add(float(gained), since)
        state.pods[r.uid] = _PodState(steps, now)
        if forked:
            state.copies[r.copy] = max(state.copies.get(r.copy, 0.0), float(steps))
            total = state.base + sum(state.copies.values())
        else:
            total = float(steps)
        if state.steps_done is None or total > state.steps_done:
            state.steps_done = total
            state.updated_at = now
        return None

    def knows(self, uid: str) -> bool:
        """Whether the job has been observed (and not forgotten)."""
        return uid in self._jobs

    def progress(self, uid: str) -> Progress:
        """What the job's workload reported so far (empty for a job never observed)."""
        state = self._jobs.get(uid)
        if state is None:
            return Progress()
        return Progress(state.steps_done, state.updated_at, dict(state.measured))

    def status_fields(self, uid: str) -> dict[str, Any]:
        """The persisted part of ``status.progress`` (what :func:`_restore` reads back)."""
        state = self._jobs.get(uid)
        if state is None or (state.steps_done is None and not state.measured):
            return {}
        from walras.core.model import format_time  # lazy: model imports this module

        out: dict[str, Any] = {
            "measured": {
                t: {
                    "stepsPerSecond": round(m.rate, 6),
                    "samples": m.samples,
                    "steps": m.steps,
                    "seconds": round(m.seconds, 3),
                }
                for t, m in sorted(state.measured.items())
            }
        }
        if state.steps_done is not None:
            out["stepsDone"] = state.steps_done
            if state.updated_at is not None:
                out["updatedAt"] = format_time(state.updated_at)
        if state.copies or state.base:
            out["forkBase"] = state.base
            out["copies"] = dict(sorted(state.copies.items()))
        return out

    def forget(self, live: Iterable[str]) -> None:
        """Drop jobs whose UID is not in ``live`` (deleted jobs)."""
        keep = set(live)
        for uid in [u for u in self._jobs if u not in keep]:
            del self._jobs[uid]

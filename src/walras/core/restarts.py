"""Restart cost and steps lost, measured per job from facts the shell already has.

A *start* of a job is the set of its pods created for one round (``PodInfo.round``; a gang's
pods share it). For each start the shell knows the pods' ``metadata.creationTimestamp`` and, from
the pod watch, their ``walras.dev/steps-done`` readings and when it saw them. ``walras.workload``
reports the step count it restored as soon as it starts, then its progress. So, per start:

* ``created`` = the earliest creation time of its pods;
* ``restored`` = its first reading (any replica: a gang's replicas report the same count);
* ``before`` = the highest reading of the job's earlier starts (none for the first start);
* **restart cost** = ``resumed − created``, where ``resumed`` is when the shell first saw a
  reading above ``restored`` — from the pod's creation to its first real progress: scheduling,
  image pull, container start, checkpoint load, warm-up;
* **steps lost** = ``before − restored`` when positive: steps the job had reported that the
  restore fell back from (work since the last checkpoint, lost to a SIGKILL or a lost node).

A workload that does not report at start makes its first reading already above ``restored``;
then that reading ends the restart, and when it is above ``before`` the restore cannot be seen
and no steps-lost sample is taken. Times are when the shell saw a reading: a cost is late by at
most the shell's observation interval (the operator sees annotations from its pod watch as they
change, so a few seconds; a shell that only looks once a round is late by up to a round).
A start stopped before it made progress gives no sample (its cost is only known to exceed its
life). Forked jobs (HadarE copies count from zero) are not measured.

Example: a job reported 1,200 steps, was preempted, and its next start's pods were created at
t = 100 s; it reported 1,000 (its checkpoint) at t = 104 s and 1,050 at t = 112 s: restart cost
12 s, 200 steps lost.

The realiser prices each job's restarts at the **median of its last** ``KEEP`` costs once it
has one (the median: one slow image pull does not move it), and at the flag's value
(``--restart-seconds``) before (:meth:`Tracker.costs`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from walras.core import model, progress

KEEP: Final = 5
"""Costs kept per job (the last ones: a job's image or checkpoint size may change)."""
ROUNDS_KEPT: Final = 8
"""Starts remembered per job (the current one and a few before, for ``before``)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One start measured: its restart cost in seconds, and steps lost (None: not seen)."""

    round: int
    seconds: float
    steps_lost: int | None


@dataclass(frozen=True, slots=True)
class RestartStats:
    """A job's restart measurements so far."""

    costs: tuple[float, ...] = ()  # the last KEEP restart costs, oldest first
    steps_lost: int = 0  # summed over every restore that fell back
    fallbacks: int = 0  # restores that fell back (steps_lost > 0)
    restores: int = 0  # starts whose restored count could be compared

    @property
    def median(self) -> float | None:
        """The median of the kept costs (None before the first)."""
        return statistics.median(self.costs) if self.costs else None


@dataclass(slots=True)
class _Start:
    created: float
    before: int | None
    restored: int | None = None
    lost: int | None = None
    done: bool = False


@dataclass(slots=True)
class _Job:
    costs: list[float] = field(default_factory=list)
    steps_lost: int = 0
    fallbacks: int = 0
    restores: int = 0
    starts: dict[int, _Start] = field(default_factory=dict)  # by round
    highest: dict[int, int] = field(default_factory=dict)  # highest reading per round


class Tracker:
    """Per-job restart measurements, kept by a shell across rounds (keyed by job UID)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}

    def observe(
        self,
        uid: str,
        pods: Sequence[model.PodInfo],
        now: float,
        *,
        status: Mapping[str, Any] | None = None,
    ) -> list[Sample]:
        """Take one job's pods as seen at ``now``; returns the starts measured by this call.

        ``status``: the job's status, read the first time the job is seen (a restarted
        operator keeps its samples). Pods whose reading is not a valid count are skipped here
        (``walras.core.progress`` reports them).
        """
        job = self._jobs.get(uid)
        if job is None:
            job = _restore(status or {})
            self._jobs[uid] = job
        out: list[Sample] = []
        for pod in sorted(pods, key=lambda p: (p.round, p.name)):
            start = job.starts.get(pod.round)
            if start is None:
                if not pod.created:
                    continue  # no creation time: nothing to measure from
                earlier = [v for r, v in job.highest.items() if r < pod.round]
                start = _Start(pod.created, max(earlier) if earlier else None)
                job.starts[pod.round] = start
            start.created = min(start.created, pod.created) if pod.created else start.created
            if not pod.steps_done:
                continue
            try:
                steps = progress.parse_steps(pod.steps_done)
            except ValueError:
                continue
            job.highest[pod.round] = max(job.highest.get(pod.round, steps), steps)
            if start.done:
                continue
            if start.restored is None:
                start.restored = steps
                # A first start restores nothing: any count above 0 is already progress.
                floor = start.before if start.before is not None else 0
                if steps > floor:
                    # Progress before its first report (the restore is not seen): that
                    # reading ends the restart.
                    out.append(self._done(job, pod.round, start, now, None))
                else:
                    start.lost = _lost(job, start, steps)
                continue
            if steps > start.restored:
                out.append(self._done(job, pod.round, start, now, start.lost))
        for r in sorted(job.starts)[:-ROUNDS_KEPT]:
            del job.starts[r]
        for r in sorted(job.highest)[:-ROUNDS_KEPT]:
            # Folded into the job's peak (key -1, below every round) so ``before`` keeps it.
            job.highest[-1] = max(job.highest.get(-1, 0), job.highest.pop(r))
        return out

    def _done(
        self, job: _Job, round_no: int, start: _Start, now: float, lost: int | None
    ) -> Sample:
        start.done = True
        seconds = max(0.0, now - start.created)
        job.costs = [*job.costs, seconds][-KEEP:]
        return Sample(round_no, seconds, lost)

    def stats(self, uid: str) -> RestartStats:
        """The job's measurements (empty for a job never observed)."""
        job = self._jobs.get(uid)
        if job is None:
            return RestartStats()
        return RestartStats(tuple(job.costs), job.steps_lost, job.fallbacks, job.restores)

    def cost(self, uid: str, default: float) -> float:
        """The job's restart cost: the median of its last costs, else ``default``."""
        median = self.stats(uid).median
        return default if median is None else median

    def costs(self, jobs: Iterable[model.JobSpec]) -> dict[model.JobKey, float]:
        """Measured costs of the given jobs that have any (``cycle.plan``'s ``restart_costs``;
        a job left out is priced at the flag's value)."""
        out = {}
        for job in jobs:
            median = self.stats(job.uid).median
            if median is not None:
                out[job.key] = median
        return out

    def forget(self, live: Iterable[str]) -> None:
        """Drop jobs whose UID is not in ``live``."""
        keep = set(live)
        for uid in [u for u in self._jobs if u not in keep]:
            del self._jobs[uid]

    def status_fields(self, uid: str) -> dict[str, Any]:
        """What ``status.progress`` may show and :meth:`observe` reads back after a restart."""
        s = self.stats(uid)
        if not s.costs and not s.restores:
            return {}
        out: dict[str, Any] = {
            "restartSeconds": [round(c, 3) for c in s.costs],
            "stepsLost": s.steps_lost,
            "fallbacks": s.fallbacks,
            "restores": s.restores,
        }
        if s.median is not None:
            out["restartCostSeconds"] = round(s.median, 3)
        return out


def _lost(job: _Job, start: _Start, restored: int) -> int | None:
    """Count the restore of ``start`` (at ``restored``) against the job's earlier reports."""
    if start.before is None:
        return None
    lost = max(0, start.before - restored)
    job.restores += 1
    if lost:
        job.steps_lost += lost
        job.fallbacks += 1
    return lost


def _restore(status: Mapping[str, Any]) -> _Job:
    raw = status.get("progress")
    job = _Job()
    if not isinstance(raw, Mapping):
        return job
    costs = raw.get("restartSeconds")
    if isinstance(costs, list):
        job.costs = [float(c) for c in costs if isinstance(c, int | float) and c >= 0][-KEEP:]
    done = raw.get("stepsDone")
    if isinstance(done, int | float) and done >= 0:
        job.highest[-1] = int(done)  # what earlier starts reported, for the next one's fallback
    for name in ("stepsLost", "fallbacks", "restores"):
        value = raw.get(name)
        if isinstance(value, int) and value >= 0:
            setattr(job, "steps_lost" if name == "stepsLost" else name, value)
    return job

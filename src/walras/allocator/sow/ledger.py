"""The mechanism's state: admitted jobs, their plans and phases, and expected committed usage.

A :class:`Ledger` is an immutable snapshot. :func:`walras.allocator.sow.admission.admit` and
:func:`walras.allocator.sow.round_step.step` take one and return the next, so the operator and
the simulator can keep, compare or replay snapshots. Jobs are stored in birth order
(``sequence``); LIFO eviction walks that order backwards.

Phases of a job (one instance of a SoW):

- ``pending``: born, not yet arrived (its arrival is still random);
- ``waiting``: arrived; its plan starts it at a later round;
- ``running``: started at ``start`` on ``gpu_type``;
- ``completed``: finished at ``finish`` (charged its posted price ``P``);
- ``evicted`` (was running) / ``cancelled`` (had not started): removed by LIFO eviction at
  round ``finish``, charged 0;
- ``cancelled`` with ``start < finish`` (was running): no completion could pay any more under
  its report (:mod:`.cancellation`), charged 0 (:attr:`JobState.unprofitable`);
- ``not_run``: the plan said "don't run" for the realised arrival; charged 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow.model import Instance
from walras.allocator.sow.params import MechanismParams
from walras.allocator.sow.prices import PriceMenu


class Phase(StrEnum):
    PENDING = "pending"
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    EVICTED = "evicted"
    CANCELLED = "cancelled"
    NOT_RUN = "not_run"

    @property
    def active(self) -> bool:
        return self in (Phase.PENDING, Phase.WAITING, Phase.RUNNING)


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """Plan for one outcome key: start ``start`` on ``gpu_type``, or "don't run" (``None``).

    ``key`` is ``(arrival,)`` or ``(arrival, duration)`` (absolute round; reference duration).
    ``utility`` is the estimated ``Σ f·(1 − q̂)(v − P)`` of this key's support points.
    """

    key: tuple[int, ...]
    gpu_type: str | None
    start: int | None
    utility: float


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """A binding map from arrival outcome to start (paper §3, "launch plans")."""

    entries: tuple[PlanEntry, ...]

    def lookup(self, key: tuple[int, ...]) -> PlanEntry | None:
        for e in self.entries:
            if e.key == key:
                return e
        return None

    @property
    def expected_utility(self) -> float:
        return sum(e.utility for e in self.entries)


@dataclass(frozen=True, slots=True)
class FailureTable:
    """Estimated failure probabilities ``q̂(s, k, d)`` of one job on one type (zeroed < θ).

    ``q[i][j]`` is for start ``first_start + i`` and on-type duration ``durations[j]`` (tuples, so
    that posted tables compare and hash by value; :attr:`array` is the numpy view).
    """

    gpu_type: str
    concurrency: int
    first_start: int
    durations: tuple[int, ...]
    q: tuple[tuple[float, ...], ...]
    samples: int

    @property
    def array(self) -> np.ndarray:
        return np.array(self.q, dtype=np.float64).reshape(len(self.q), len(self.durations))

    def at(self, start: int, duration: int) -> float:
        i = start - self.first_start
        if duration not in self.durations or not 0 <= i < len(self.q):
            raise InvalidProblem(
                f"no failure estimate for start {start}, duration {duration} on {self.gpu_type}",
                field="start",
            )
        return self.q[i][self.durations.index(duration)]


@dataclass(frozen=True, slots=True)
class Admission:
    """What the platform posted to one job at its birth, and the plan it chose.

    ``menus[i]``/``failure[i]`` belong to ``instance.demands[i]`` (types sorted by name).
    """

    instance: Instance
    sequence: int
    menus: tuple[PriceMenu, ...]
    failure: tuple[FailureTable, ...]
    plan: LaunchPlan

    @property
    def job(self) -> str:
        return self.instance.job


@dataclass(frozen=True, slots=True)
class JobState:
    """One admitted job and what has happened to it so far."""

    admission: Admission
    phase: Phase = Phase.PENDING
    arrival: int | None = None
    signal: int | None = None
    start: int | None = None
    gpu_type: str | None = None
    finish: int | None = None
    charge: float = 0.0
    value: float = 0.0

    @property
    def job(self) -> str:
        return self.admission.instance.job

    @property
    def sequence(self) -> int:
        return self.admission.sequence

    @property
    def unprofitable(self) -> bool:
        """Cancelled while running because no completion could pay (never a LIFO removal: LIFO
        evicts running jobs and cancels only jobs that had not started)."""
        return (
            self.phase is Phase.CANCELLED
            and self.start is not None
            and self.finish is not None
            and self.start < self.finish
        )

    def concurrency_on(self, gpu_type: str) -> int:
        for d in self.admission.instance.demands:
            if d.gpu_type == gpu_type:
                return d.concurrency
        raise InvalidProblem(f"job {self.job} has no demand on {gpu_type}", field="gpu_type")


@dataclass(frozen=True, slots=True)
class Ledger:
    """Immutable snapshot of the mechanism.

    Attributes:
        params: mechanism parameters.
        capacities: ``(gpu_type, C)`` sorted by type.
        time: the next round to be played (admissions happen at ``time``, before the round).
        jobs: admitted jobs in birth order.
        usage: expected committed usage ``y`` per type (same order as ``capacities``) for rounds
            ``0 … len − 1``; read-only arrays.
        sows: names of admitted SoWs in birth order.
        round_open: round ``time`` was started (:func:`.round_step.start_round`) but not ended.
    """

    params: MechanismParams
    capacities: tuple[tuple[str, int], ...]
    time: int = 0
    jobs: tuple[JobState, ...] = ()
    usage: tuple[np.ndarray, ...] = field(default=())
    sows: tuple[str, ...] = ()
    round_open: bool = False

    @classmethod
    def empty(cls, params: MechanismParams, capacities: dict[str, int]) -> Ledger:
        if not capacities:
            raise InvalidProblem("no GPU types", field="capacities")
        for g, c in capacities.items():
            if c < 1:
                raise InvalidProblem(f"capacity of {g!r} is {c} < 1", field="capacities")
        caps = tuple(sorted((str(g), int(c)) for g, c in capacities.items()))
        usage = tuple(_frozen(np.zeros(0)) for _ in caps)
        return cls(params, caps, 0, (), usage, ())

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(g for g, _ in self.capacities)

    def type_index(self, gpu_type: str) -> int:
        return self.gpu_types.index(gpu_type)

    def job(self, job_id: str) -> JobState:
        for j in self.jobs:
            if j.job == job_id:
                return j
        raise InvalidProblem(f"unknown job {job_id!r}", field="job")

    def admission(self, job_id: str) -> Admission:
        return self.job(job_id).admission


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.flags.writeable = False
    return a


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only float64 copy (ledger arrays are never mutated in place)."""
    return _frozen(a)

"""Statements of work (Babaioff et al. 2022 §2): what a customer declares once, at the job's birth.

A SoW is the paper's tuple ``(k, v, F)`` plus Walras's recurrence and GPU-type options:

- concurrency ``k``: GPUs held for the whole run (gang, non-preemptable); optionally one
  :class:`TypeDemand` per acceptable GPU type, each with its own ``k`` and a throughput relative
  to the reference type the durations are given in (duration on type ``g`` is
  ``⌈d / throughput_g⌉`` rounds);
- value ``v(c − r)``: a non-increasing function of the completion time ``c`` measured from the
  instance's release ``r`` (piecewise linear through points, constant before the first point and
  0 after the last; :meth:`ValueFunction.deadline` is "value ``V`` until the deadline, then 0");
- distribution ``F`` over (arrival offset from ``r``, duration) as weighted support points;
- recurrence: ``instances`` copies released at ``r_i = birth + i · period``, each a separate job
  of the paper, all born at the SoW's birth (paper Remark 1: simultaneous births are handled one
  after another, in instance order).

Time is in integer rounds. A job started at ``s`` with duration ``d`` holds its GPUs during rounds
``s, …, s + d − 1`` and completes at ``c = s + d`` (the end of its last round). Example: release
``r = 10``, arrival offset 0, start 11, duration 2 → rounds 11, 12, completion 13, value
``v(3)``; with ``ValueFunction.deadline(3, 5.0)`` that is 5.0, with deadline 2 it is 0.

``duration_revealed`` is the paper's signal ``σ = d``: the platform learns the duration when the
job arrives, so the launch plan may depend on it (Theorem 5.2 needs it; the adversarial mechanism
works with either). Without it the plan maps arrival time → start only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from walras.allocator.errors import InvalidProblem

_PROB_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class ValueFunction:
    """Non-increasing value of completion, as points ``(elapsed since release, value)``.

    Elapsed times strictly increase; values are finite, ≥ 0 and non-increasing. Linear between
    points, ``points[0]`` value before the first point, 0 after the last point.
    """

    points: tuple[tuple[float, float], ...]

    @classmethod
    def deadline(cls, deadline: float, value: float) -> ValueFunction:
        """``value`` if the job completes within ``deadline`` rounds of its release, else 0."""
        return cls(((float(deadline), float(value)),))

    @classmethod
    def linear(cls, points: Sequence[tuple[float, float]]) -> ValueFunction:
        return cls(tuple((float(x), float(v)) for x, v in points))

    @property
    def horizon(self) -> float:
        """Largest elapsed time with positive value (beyond it the value is 0)."""
        return max((x for x, v in self.points if v > 0), default=-math.inf)

    @property
    def max_value(self) -> float:
        return self.points[0][1] if self.points else 0.0

    def __call__(self, elapsed: float) -> float:
        return float(self.values(np.asarray([elapsed], dtype=np.float64))[0])

    def values(self, elapsed: np.ndarray) -> np.ndarray:
        xs = np.array([p[0] for p in self.points], dtype=np.float64)
        vs = np.array([p[1] for p in self.points], dtype=np.float64)
        return np.asarray(
            np.interp(np.asarray(elapsed, dtype=np.float64), xs, vs, left=vs[0], right=0.0)
        )


@dataclass(frozen=True, slots=True)
class Distribution:
    """Joint distribution of (arrival offset, duration) as weighted support points.

    ``arrivals[i]`` rounds after the release, ``durations[i]`` rounds on the reference type, with
    probability ``probabilities[i]``; probabilities are ≥ 0 and sum to 1.
    """

    arrivals: tuple[int, ...]
    durations: tuple[int, ...]
    probabilities: tuple[float, ...]

    @classmethod
    def of(cls, points: Sequence[tuple[int, int, float]]) -> Distribution:
        """From ``(arrival offset, duration, probability)`` triples."""
        return cls(
            tuple(int(a) for a, _, _ in points),
            tuple(int(d) for _, d, _ in points),
            tuple(float(p) for _, _, p in points),
        )

    @classmethod
    def fixed(cls, arrival: int, duration: int) -> Distribution:
        return cls((int(arrival),), (int(duration),), (1.0,))


@dataclass(frozen=True, slots=True)
class TypeDemand:
    """``concurrency`` GPUs of ``gpu_type``, running ``throughput`` × as fast as the reference."""

    gpu_type: str
    concurrency: int
    throughput: float = 1.0

    def duration_on(self, duration: int) -> int:
        # A small tolerance so that throughput 0.5 on duration 3 is 6 rounds, not 7.
        return max(1, math.ceil(duration / self.throughput - 1e-9))


@dataclass(frozen=True, slots=True)
class Recurrence:
    """``instances`` releases, ``period`` rounds apart (``instances = 1``: a one-off job)."""

    instances: int = 1
    period: int = 0


@dataclass(frozen=True, slots=True)
class StatementOfWork:
    """One customer's report (Babaioff et al. 2022: ``(k, v, F)`` at birth time ``birth``)."""

    name: str
    birth: int
    demands: tuple[TypeDemand, ...]
    value: ValueFunction
    distribution: Distribution
    recurrence: Recurrence = field(default_factory=Recurrence)
    duration_revealed: bool = False

    @classmethod
    def single(
        cls,
        name: str,
        birth: int,
        concurrency: int,
        value: ValueFunction,
        distribution: Distribution,
        *,
        gpu_type: str = "gpu",
        recurrence: Recurrence | None = None,
        duration_revealed: bool = False,
    ) -> StatementOfWork:
        """A SoW for ``concurrency`` GPUs of one type."""
        return cls(
            name,
            birth,
            (TypeDemand(gpu_type, concurrency),),
            value,
            distribution,
            recurrence or Recurrence(),
            duration_revealed,
        )

    @property
    def concurrency(self) -> int:
        """Largest concurrency over the acceptable types."""
        return max(d.concurrency for d in self.demands)


def _bad(sow: StatementOfWork, field_name: str, why: str) -> InvalidProblem:
    return InvalidProblem(f"SoW {sow.name!r}: {field_name}: {why}", field=field_name)


def validate(sow: StatementOfWork, gpu_types: Sequence[str] | None = None) -> None:
    """Raise :class:`InvalidProblem` naming the field if ``sow`` is malformed.

    Bounds relative to a market (``K``, ``D``, ``V``) are checked at admission.
    """
    if not sow.name:
        raise _bad(sow, "name", "empty")
    if sow.birth < 0:
        raise _bad(sow, "birth", f"negative ({sow.birth})")
    if not sow.demands:
        raise _bad(sow, "concurrency", "no GPU type demanded")
    seen: set[str] = set()
    for d in sow.demands:
        if d.concurrency < 1:
            raise _bad(sow, "concurrency", f"k = {d.concurrency} < 1 on type {d.gpu_type!r}")
        if not (math.isfinite(d.throughput) and d.throughput > 0):
            raise _bad(sow, "throughput", f"{d.throughput} on type {d.gpu_type!r} is not > 0")
        if d.gpu_type in seen:
            raise _bad(sow, "demands.gpu_type", f"type {d.gpu_type!r} listed twice")
        if gpu_types is not None and d.gpu_type not in gpu_types:
            raise _bad(sow, "demands.gpu_type", f"unknown GPU type {d.gpu_type!r}")
        seen.add(d.gpu_type)
    _validate_value(sow)
    _validate_distribution(sow)
    rec = sow.recurrence
    if rec.instances < 1:
        raise _bad(sow, "recurrence.instances", f"{rec.instances} < 1")
    if rec.period < 0 or (rec.instances > 1 and rec.period < 1):
        raise _bad(sow, "recurrence.period", f"{rec.period} is not ≥ 1")


def _validate_value(sow: StatementOfWork) -> None:
    pts = sow.value.points
    if not pts:
        raise _bad(sow, "value_function", "no points")
    for i, (x, v) in enumerate(pts):
        if not (math.isfinite(x) and math.isfinite(v)):
            raise _bad(sow, "value_function", f"point {i} is not finite")
        if v < 0:
            raise _bad(sow, "value_function", f"negative value {v} at point {i}")
        if i and x <= pts[i - 1][0]:
            raise _bad(sow, "value_function", f"times not strictly increasing at point {i}")
        if i and v > pts[i - 1][1]:
            raise _bad(sow, "value_function", f"increasing ({pts[i - 1][1]} → {v} at point {i})")


def _validate_distribution(sow: StatementOfWork) -> None:
    dist = sow.distribution
    n = len(dist.probabilities)
    if n == 0:
        raise _bad(sow, "distribution", "no support points")
    if len(dist.arrivals) != n or len(dist.durations) != n:
        raise _bad(sow, "distribution", "arrivals, durations and probabilities differ in length")
    for i in range(n):
        if dist.arrivals[i] < 0:
            raise _bad(sow, "distribution.arrivals", f"negative arrival offset at point {i}")
        if dist.durations[i] < 1:
            raise _bad(
                sow, "distribution.durations", f"duration {dist.durations[i]} < 1 at point {i}"
            )
        p = dist.probabilities[i]
        if not (math.isfinite(p) and p >= 0):
            raise _bad(sow, "distribution.probabilities", f"{p} at point {i} is not ≥ 0")
    total = math.fsum(dist.probabilities)
    if abs(total - 1.0) > _PROB_TOL:
        raise _bad(sow, "distribution.probabilities", f"sum to {total}, not 1")


@dataclass(frozen=True, slots=True)
class Instance:
    """One job of the paper: instance ``index`` of a SoW, released at ``release``.

    ``arrivals`` are absolute rounds; ``durations`` are on the reference type.
    """

    job: str
    sow: str
    index: int
    birth: int
    release: int
    demands: tuple[TypeDemand, ...]
    value: ValueFunction
    arrivals: tuple[int, ...]
    durations: tuple[int, ...]
    probabilities: tuple[float, ...]
    duration_revealed: bool

    def key(self, arrival: int, duration: int) -> tuple[int, ...]:
        """The launch-plan key of an outcome: ``(a,)``, or ``(a, d)`` if ``d`` is revealed."""
        return (arrival, duration) if self.duration_revealed else (arrival,)

    @property
    def keys(self) -> tuple[tuple[int, ...], ...]:
        """Distinct plan keys in support order (sorted)."""
        return tuple(
            sorted({self.key(a, d) for a, d in zip(self.arrivals, self.durations, strict=True)})
        )


def instance_id(sow_name: str, index: int) -> str:
    return f"{sow_name}#{index}"


def instances(sow: StatementOfWork) -> tuple[Instance, ...]:
    """The jobs a SoW stands for, in instance order."""
    out = []
    for i in range(sow.recurrence.instances):
        release = sow.birth + i * sow.recurrence.period
        out.append(
            Instance(
                job=instance_id(sow.name, i),
                sow=sow.name,
                index=i,
                birth=sow.birth,
                release=release,
                demands=tuple(sorted(sow.demands, key=lambda d: d.gpu_type)),
                value=sow.value,
                arrivals=tuple(release + a for a in sow.distribution.arrivals),
                durations=sow.distribution.durations,
                probabilities=sow.distribution.probabilities,
                duration_revealed=sow.duration_revealed,
            )
        )
    return tuple(out)

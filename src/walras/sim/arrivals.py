"""Admission of trace jobs on a simulated clock: a pointer over arrival-sorted jobs.

Both mechanics admit jobs only when they plan (Gavel: at round boundaries), so the queue answers
two questions: which jobs have arrived by ``now`` (:meth:`ArrivalQueue.admit`) and when the next
one arrives (:meth:`ArrivalQueue.next_time`, for the clock jump of an idle cluster).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class ArrivalQueue:
    """Jobs ``0..N-1`` with non-decreasing ``arrivals`` (the trace reader checks the order)."""

    def __init__(self, arrivals: npt.NDArray[np.float64]) -> None:
        self._arrivals = [float(a) for a in arrivals]
        self._next = 0

    def __len__(self) -> int:
        return len(self._arrivals) - self._next

    def next_time(self) -> float | None:
        """Arrival time of the next job not yet admitted, or ``None``."""
        return self._arrivals[self._next] if self._next < len(self._arrivals) else None

    def admit(self, now: float) -> list[int]:
        """Ids of the jobs with arrival ≤ ``now`` not admitted before, in order."""
        start = self._next
        while self._next < len(self._arrivals) and self._arrivals[self._next] <= now:
            self._next += 1
        return list(range(start, self._next))


def poisson_arrivals(n: int, rate_per_hour: float, seed: int) -> npt.NDArray[np.float64]:
    """Gavel's arrival stream (``Scheduler._sample_arrival_time_delta``): job 0 at t = 0, then
    gaps ``−ln(1 − U) · 3600 / rate`` with ``U`` from ``random.Random(seed + 3)``, Gavel's
    inter-arrival generator, so a sweep at rate R and seed s sees Gavel's arrival times.

    Example: ``rate_per_hour = 3600`` gives unit-mean gaps in seconds.
    """
    import math
    import random

    if rate_per_hour <= 0:
        raise ValueError(f"arrival rate must be > 0 jobs/hour, got {rate_per_hour}")
    rng = random.Random(seed + 3)
    mean_gap = 3600.0 / rate_per_hour
    out = np.zeros(n, dtype=np.float64)
    t = 0.0
    for i in range(1, n):
        t += -math.log(1.0 - rng.random()) * mean_gap
        out[i] = t
    return out

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

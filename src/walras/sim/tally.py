"""Job progress and GPU busy-time accounting shared by the mechanics, and the per-round timeline.

The mechanics decide *what* runs; the tally records what happened: steps done, completion or
failure times, restarts, busy seconds per GPU and one :class:`RoundRecord` per dispatched round.
:mod:`walras.sim.metrics` turns a finished tally into the summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from walras.sim.workload import Workload

if TYPE_CHECKING:  # the per-tenant report needs the core, which Gavel's mechanics never import
    from walras.sim.guarantees import TenantReport


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One dispatched round: its span, GPUs busy per type and jobs waiting (admitted, not run)."""

    start_s: float
    end_s: float
    busy_gpus: tuple[int, ...]
    running: int
    queued: int


class Tally:
    """Mutable accounting for one run (one per simulation, never shared)."""

    def __init__(self, workload: Workload, n_gpus: int) -> None:
        n = workload.n_jobs
        self.workload = workload
        self.steps_done = [0] * n
        self.completion_s = [math.nan] * n
        self.failed = [False] * n
        self.first_start_s = [math.nan] * n
        self.rounds_run = [0] * n
        self.restarts = [0] * n
        self.gpu_seconds = [0.0] * n
        self.gpu_busy_s = [0.0] * n_gpus
        self.rounds: list[RoundRecord] = []
        self.solve_s: list[float] = []
        self.solve_cpu_s: list[float] = []
        self.finished = 0
        # --tenants (walras.sim.tenants): each job's tenant and the guarantees, round by round.
        self.tenants: TenantReport | None = None

    def remaining(self, job: int) -> int:
        return int(self.workload.total_steps[job]) - self.steps_done[job]

    def dispatched(self, job: int, now: float, restarted: bool) -> None:
        if math.isnan(self.first_start_s[job]):
            self.first_start_s[job] = now
        self.rounds_run[job] += 1
        self.restarts[job] += int(restarted)

    def ran(self, job: int, steps: int, busy_s: float, gpus: tuple[int, ...]) -> None:
        """A successful micro-task: ``steps`` done, ``busy_s`` credited to each of ``gpus``."""
        self.steps_done[job] += steps
        self.gpu_seconds[job] += busy_s * len(gpus)
        for g in gpus:
            self.gpu_busy_s[g] += busy_s

    def complete(self, job: int, at_s: float, *, failed: bool = False) -> None:
        self.completion_s[job] = at_s
        self.failed[job] = failed
        self.finished += 1

    def jct_s(self) -> np.ndarray:
        """JCT per job (completion − trace arrival); NaN for failed or unfinished jobs."""
        c = np.array(self.completion_s, dtype=np.float64)
        c[np.array(self.failed, dtype=bool)] = np.nan
        return c - self.workload.arrivals

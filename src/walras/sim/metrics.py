"""The result of a run and its summary metrics (Gavel's definitions).

- makespan: the clock when the last job leaves (t = 0 is the trace's time origin);
- JCT of a job: completion − arrival *in the trace* (waiting for a round boundary counts); jobs
  that failed (Gavel's failed-gang quirk) have none and are left out of every JCT statistic;
- utilisation: mean over GPUs of busy seconds ÷ makespan, where a micro-task makes each GPU of its
  gang busy from the round start to its finish (restart seconds included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.sim.cluster import Cluster
from walras.sim.config import SimConfig
from walras.sim.tally import Tally

SUMMARY_KEYS = (
    "makespan_s",
    "avg_jct_s",
    "jct_p50_s",
    "jct_p95_s",
    "jct_p99_s",
    "avg_jct_window_s",
    "utilization",
    "jobs",
    "rounds",
    "restarts",
    "solve_s_mean",
    "solve_s_p95",
    "solve_s_max",
    "wall_s",
    "tenants",
)


@dataclass(frozen=True, slots=True)
class SimResult:
    """A finished run: its inputs' descriptions, the tally and the final clock."""

    policy: str
    config: SimConfig
    cluster: Cluster
    tally: Tally
    makespan_s: float
    wall_s: float

    def jct_s(self) -> npt.NDArray[np.float64]:
        return self.tally.jct_s()

    def utilization(self) -> float:
        if self.makespan_s <= 0:
            return 0.0
        return float(np.mean(np.array(self.tally.gpu_busy_s) / self.makespan_s))

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object (keys :data:`SUMMARY_KEYS`; the window key only with a window,
        ``tenants`` only with ``--tenants``)."""
        jct = self.jct_s()
        done = jct[~np.isnan(jct)]
        solves = np.array(self.tally.solve_s, dtype=np.float64)
        out: dict[str, Any] = {
            "makespan_s": self.makespan_s,
            "avg_jct_s": _stat(done, np.mean),
            "jct_p50_s": _pct(done, 50),
            "jct_p95_s": _pct(done, 95),
            "jct_p99_s": _pct(done, 99),
        }
        if self.config.window is not None:
            a, b = self.config.window
            win = jct[a:b]
            out["avg_jct_window_s"] = _stat(win[~np.isnan(win)], np.mean)
        out.update(
            {
                "utilization": self.utilization(),
                "jobs": self.tally.workload.n_jobs,
                "rounds": len(self.tally.rounds),
                "restarts": int(sum(self.tally.restarts)),
                "solve_s_mean": _stat(solves, np.mean),
                "solve_s_p95": _pct(solves, 95),
                "solve_s_max": _stat(solves, np.max),
                "wall_s": self.wall_s,
            }
        )
        if self.tally.tenants is not None:
            from walras.sim import tenants  # the core's tenant model: only for --tenants runs

            out["tenants"] = tenants.summary(self.tally.tenants, self.tally)
        return out


def _stat(values: npt.NDArray[np.float64], fn: Any) -> float | None:
    return float(fn(values)) if values.size else None


def _pct(values: npt.NDArray[np.float64], q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None

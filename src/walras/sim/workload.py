"""The jobs of one simulation as arrays: what every mechanics (Gavel's, Walras's) reads.

Built from a parsed trace, a throughput table and the cluster's GPU types (columns in the
cluster's order). :func:`build_workload` refuses a job that no type of the cluster can ever run
(no type with a positive throughput and at least ``scale_factor`` GPUs): Gavel would loop
forever on it; here the error names the trace line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.sim.cluster import Cluster
from walras.sim.errors import SimInputError
from walras.sim.throughputs import ThroughputTable
from walras.sim.trace import Trace

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Workload:
    """Immutable per-job inputs; row ``j`` is trace job ``j``."""

    source: str
    job_types: tuple[str, ...]
    lines: tuple[int, ...]
    total_steps: IntArray
    scale_factors: IntArray
    arrivals: FloatArray
    priority_weights: FloatArray
    throughputs: FloatArray
    gpu_types: tuple[str, ...]

    @property
    def n_jobs(self) -> int:
        return len(self.job_types)


def build_workload(trace: Trace, table: ThroughputTable, cluster: Cluster) -> Workload:
    """Arrays for ``trace`` on ``cluster``'s GPU types (see the module docstring)."""
    jobs = trace.jobs
    thr = table.matrix(jobs, cluster.gpu_types, trace=trace.source)
    sf = np.array([j.scale_factor for j in jobs], dtype=np.int64)
    counts = np.array(cluster.counts, dtype=np.int64)
    runnable = ((thr > 0) & (sf[:, None] <= counts[None, :])).any(axis=1)
    if not runnable.all():
        j = int(np.argmin(runnable))
        raise SimInputError(
            f"{trace.source}:{jobs[j].line}: field 7 (scale_factor): job {j} "
            f"({jobs[j].job_type}, {jobs[j].scale_factor} GPUs) fits on no GPU type of the "
            f"cluster ({cluster.describe()}) with a positive throughput"
        )
    return Workload(
        source=trace.source,
        job_types=tuple(j.job_type for j in jobs),
        lines=tuple(j.line for j in jobs),
        total_steps=np.array([j.total_steps for j in jobs], dtype=np.int64),
        scale_factors=sf,
        arrivals=np.array([j.arrival_s for j in jobs], dtype=np.float64),
        priority_weights=np.array([j.priority_weight for j in jobs], dtype=np.float64),
        throughputs=thr,
        gpu_types=cluster.gpu_types,
    )

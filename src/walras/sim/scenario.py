"""A scenario: a trace read against a throughput table on a cluster (what one run simulates).

The one place that turns user-facing inputs (paths and spec strings) into a
:class:`~walras.sim.workload.Workload` and a :class:`~walras.sim.cluster.Cluster`; the CLI, the
sweep and the benchmark all go through :func:`load_scenario`.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from walras.sim.cluster import Cluster, build_cluster, parse_cluster, parse_gpus_per_node
from walras.sim.throughputs import ThroughputTable, load_throughputs
from walras.sim.trace import Trace, read_trace
from walras.sim.workload import Workload, build_workload


@dataclass(frozen=True, slots=True)
class Scenario:
    trace: Trace
    cluster: Cluster
    workload: Workload


def load_scenario(
    trace: str | pathlib.Path | Trace,
    *,
    cluster: str = "v100=20,p100=20,k80=20",
    gpus_per_node: str = "1",
    throughputs: str | pathlib.Path | ThroughputTable | None = None,
) -> Scenario:
    """Read and check everything a run needs; errors are :class:`~.errors.SimInputError`."""
    parsed = trace if isinstance(trace, Trace) else read_trace(trace)
    counts = parse_cluster(cluster)
    types = [t for t, c in counts.items() if c > 0]
    built = build_cluster(counts, parse_gpus_per_node(gpus_per_node, types))
    table = (
        throughputs if isinstance(throughputs, ThroughputTable) else load_throughputs(throughputs)
    )
    return Scenario(parsed, built, build_workload(parsed, table, built))

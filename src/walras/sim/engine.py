"""Entry point of a simulation: inputs in, :class:`~walras.sim.metrics.SimResult` out.

``run`` builds the shared pieces (workload arrays, tally) and hands them to the round mechanics
named by ``config.semantics``. Mechanics are modules with one ``run(workload, cluster, policy,
config, tally, progress) -> final clock`` function, registered in :data:`MECHANICS`; the Gavel
one is :mod:`walras.sim.gavel_mechanics`. The clock is simulated, so nothing here sleeps or reads
the wall clock except to time the run itself.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

from threadpoolctl import threadpool_limits

from walras.sim.cluster import Cluster
from walras.sim.config import SimConfig
from walras.sim.errors import SimInputError
from walras.sim.metrics import SimResult
from walras.sim.policies import Policy
from walras.sim.tally import Tally
from walras.sim.workload import Workload

Mechanics = Callable[
    [Workload, Cluster, Policy, SimConfig, Tally, Callable[[int, int], None] | None], float
]

MECHANICS: dict[str, str] = {
    "gavel": "walras.sim.gavel_mechanics",
    "walras": "walras.sim.walras_mechanics",
}
"""Semantics name → module with the ``run`` function. Imported when chosen: the walras mechanics
pull in the operator's core and policies (about 0.3 s CPU), which a Gavel-semantics run never
needs."""


def run(
    workload: Workload,
    cluster: Cluster,
    policy: Policy,
    config: SimConfig,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate ``workload`` on ``cluster`` under ``policy``."""
    module = MECHANICS.get(config.semantics)
    if module is None:
        raise SimInputError(
            f"--semantics: {config.semantics!r} is not available (have: {', '.join(MECHANICS)})"
        )
    mechanics: Mechanics = importlib.import_module(module).run
    if config.round_s <= 0:
        raise SimInputError(f"--round-seconds must be > 0, got {config.round_s:g}")
    if not 0 <= config.restart_s < config.round_s:
        raise SimInputError(
            f"--restart-seconds must be in [0, round length {config.round_s:g}), "
            f"got {config.restart_s:g}"
        )
    if config.window is not None:
        a, b = config.window
        if not 0 <= a < b:
            raise SimInputError(f"--window: expected A:B with 0 ≤ A < B, got {a}:{b}")
    started = time.perf_counter()
    tally = Tally(workload, cluster.n_gpus)
    # Policies solve many small problems (3×3 blocks per job); OpenBLAS worker threads would
    # busy-wait between them and take the CPU from the solver itself (see
    # walras.allocator.pricing.solver.one_blas_thread). Restored when the run ends.
    with threadpool_limits(limits=1, user_api="blas"):
        makespan = mechanics(workload, cluster, policy, config, tally, progress)
    return SimResult(
        policy=policy.name,
        config=config,
        cluster=cluster,
        tally=tally,
        makespan_s=makespan,
        wall_s=time.perf_counter() - started,
    )

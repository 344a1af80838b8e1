"""PS-DSF: per-server dominant-share fairness on heterogeneous nodes (docs/algorithms.md#ps-dsf).

Public interface (the cross-team contract):

- :class:`FairnessProblem`, :func:`monopoly_tasks` — the instance and its ``γ``;
- :func:`solve` → :class:`FairnessResult` — centralised TDM/RDM solve (TDM through Fisher-market
  prices, ``market``; RDM and the TDM fallback by Gauss–Seidel sweeps with an exact finish);
- :func:`node_update` — one node agent's update from local information (distributed form);
- :func:`certificate` — largest Theorem 1 (RDM) / Theorem 2 (TDM) violation;
- :func:`simulate_async` — in-process asynchronous agents (convergence study);
- ``baselines`` — DRF (one node), C-DRFH and TSF for comparison.

Modules: ``problem`` (inputs, validation, γ, dominant resources), ``waterfill`` (exact per-node
server procedure), ``market`` (TDM equilibrium prices), ``crossover`` (exact TDM finish of the
sweeps), ``rdm_crossover`` (exact RDM finish), ``solver``, ``certificates``, ``distributed``,
``baselines``.
"""

from walras.allocator.fairness.certificates import certificate
from walras.allocator.fairness.distributed import (
    ChurnEvent,
    SimulationTrace,
    node_update,
    simulate_async,
)
from walras.allocator.fairness.problem import (
    FairnessProblem,
    dominant_resources,
    monopoly_tasks,
)
from walras.allocator.fairness.solver import FairnessResult, solve

__all__ = [
    "ChurnEvent",
    "FairnessProblem",
    "FairnessResult",
    "SimulationTrace",
    "certificate",
    "dominant_resources",
    "monopoly_tasks",
    "node_update",
    "simulate_async",
    "solve",
]

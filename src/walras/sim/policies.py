"""The simulator's Gavel mechanics and its policies: a thin adapter over Gavel's one front door.

``--semantics gavel`` (:mod:`walras.sim.gavel_mechanics`) hands a policy a :data:`PolicyView`
(the active jobs as arrays, columns in the cluster's GPU-type order: Gavel's own inputs,
:class:`walras.allocator.gavel.GavelInputs`) and gets back ``X[j, t]``, the fraction of time job
``j`` should run on type ``t``. :class:`GavelPolicy` gets its policy object from
:func:`walras.allocator.gavel.make_policy` (HiGHS, or Gavel's cvxpy + ECOS with
``lp_solver="ecos"``), the same door the scheduling core's Gavel policies use, and adds only what
Gavel's round mechanics read from a policy's name. ``--semantics walras`` runs the core's own
policies instead, built by ``walras.core.policies.build`` as the operator builds them. Gavel's
policy objects keep state across calls (FIFO's queue, finish-time fairness's isolated time), so
one policy object serves one simulation.
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import GavelPolicy as Policy
from walras.allocator.gavel.inputs import FloatArray, GavelInputs, IntArray
from walras.sim.errors import SimInputError

GAVEL_POLICIES = (
    "max_min_fairness_perf",
    "max_min_fairness",
    "min_total_duration_perf",
    "min_total_duration",
    "finish_time_fairness_perf",
    "finish_time_fairness",
    "fifo_perf",
    "fifo",
)

PolicyView = GavelInputs
"""What a policy sees at one solve: one row per active job, one column per GPU type."""

__all__ = ["GAVEL_POLICIES", "FloatArray", "GavelPolicy", "IntArray", "Policy", "PolicyView"]


class GavelPolicy:
    """One of Gavel's policies (:data:`GAVEL_POLICIES`) from :func:`walras.allocator.gavel.
    make_policy`, solved with HiGHS or, ``lp_solver="ecos"``, Gavel's own solver."""

    def __init__(self, name: str, *, seed: int = 0, lp_solver: str = "highs") -> None:
        if name not in GAVEL_POLICIES:
            raise SimInputError(
                f"--policy: unknown policy {name!r} (Gavel's: {', '.join(GAVEL_POLICIES)})"
            )
        from walras.allocator import gavel

        self.name = name
        try:
            self._policy = gavel.make_policy(name, seed=seed, lp_solver=lp_solver)
        except InvalidProblem as exc:  # no cvxpy/ECOS, or an unknown --lp-solver: bad input
            raise SimInputError(str(exc)) from None

    @property
    def heterogeneity_aware(self) -> bool:
        """Gavel walks GPU types in a fixed order for ``_perf`` policies, shuffled otherwise."""
        return self.name.endswith("_perf")

    @property
    def fifo(self) -> bool:
        """Gavel skips priority-0 jobs in a round only for FIFO policies."""
        return self.name.startswith("fifo")

    def allocate(self, view: PolicyView) -> FloatArray:
        return np.asarray(self._policy.allocate(view), dtype=np.float64)

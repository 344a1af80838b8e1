"""The policy interface of the simulator and the adapter to Gavel's policies.

A mechanics hands a policy a :class:`PolicyView` (the active jobs as arrays, columns in the
cluster's GPU-type order) and gets back ``X[j, t]``, the fraction of time job ``j`` should run on
type ``t``. :class:`GavelPolicy` wraps :mod:`walras.allocator.gavel` (Gavel's policies as LPs,
imported lazily so ``walras --help`` stays fast); the Walras policies arrive later through the
core registry. Gavel's policy objects keep state across calls (FIFO's queue, finish-time
fairness's isolated time), so one policy object serves one simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from walras.sim.errors import SimInputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

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


@dataclass(frozen=True, slots=True)
class PolicyView:
    """What a policy sees at one solve: one row per active job, one column per GPU type."""

    throughputs: FloatArray
    scale_factors: IntArray
    capacity: FloatArray
    job_ids: IntArray
    priority_weights: FloatArray
    num_steps_remaining: FloatArray
    times_since_start: FloatArray
    type_names: tuple[str, ...]


class Policy(Protocol):
    """Anything with a name and ``allocate(view) -> X`` (time fractions, shape of throughputs)."""

    name: str

    def allocate(self, view: PolicyView) -> FloatArray: ...


class GavelPolicy:
    """One of Gavel's policies (:data:`GAVEL_POLICIES`) from :mod:`walras.allocator.gavel`
    (HiGHS), or with ``lp_solver="ecos"`` solved by Gavel's own solver (:mod:`.ecos_lp`)."""

    def __init__(self, name: str, *, seed: int = 0, lp_solver: str = "highs") -> None:
        if name not in GAVEL_POLICIES:
            raise SimInputError(
                f"--policy: unknown policy {name!r} (Gavel's: {', '.join(GAVEL_POLICIES)})"
            )
        from walras.allocator import gavel

        self.name = name
        self._gavel = gavel
        self._policy = gavel.make_policy(name, seed=seed)
        self._ecos: Policy | None = None
        if lp_solver != "highs":
            # Opt-in: Gavel's own solver, cvxpy + ECOS (walras.sim.ecos_lp; extra walras[ecos]).
            from walras.sim import ecos_lp

            self._ecos = ecos_lp.for_policy(name, lp_solver)

    @property
    def heterogeneity_aware(self) -> bool:
        """Gavel walks GPU types in a fixed order for ``_perf`` policies, shuffled otherwise."""
        return self.name.endswith("_perf")

    @property
    def fifo(self) -> bool:
        """Gavel skips priority-0 jobs in a round only for FIFO policies."""
        return self.name.startswith("fifo")

    def allocate(self, view: PolicyView) -> FloatArray:
        if self._ecos is not None:
            return self._ecos.allocate(view)
        inputs = self._gavel.GavelInputs(
            throughputs=view.throughputs,
            scale_factors=view.scale_factors,
            capacity=view.capacity,
            job_ids=view.job_ids,
            priority_weights=view.priority_weights,
            num_steps_remaining=view.num_steps_remaining,
            times_since_start=view.times_since_start,
            type_names=view.type_names,
        )
        return np.asarray(self._policy.allocate(inputs), dtype=np.float64)

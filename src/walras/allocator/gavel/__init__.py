"""Gavel's baseline policies (space sharing off), as exact optimisations with Gavel's meaning.

Max-min fairness *with* space sharing (a variable per pair of co-located jobs, Gavel's
``max_min_fairness_packed``, Narayanan et al. 2021's POP benchmark) is :mod:`.packed`.

Gavel (Narayanan et al., OSDI 2020; github.com/stanford-futuredata/gavel, ``scheduler/policies``)
turns the active jobs into time fractions ``x[j, t]``: the share of wall time job ``j`` should run
on GPU type ``t``. Its round-based mechanism then realises them.

:func:`make_policy` is the one front door to these policies: the simulator's Gavel mechanics
(``walras simulate --semantics gavel``, through ``walras.sim.policies.GavelPolicy``) and the
scheduling core's Gavel policies (``walras.core.policies.gavel_adapter``) both get their policy
object from it, with HiGHS (default) or, ``lp_solver="ecos"``, Gavel's own cvxpy + ECOS
(:mod:`.ecos`), and call ``policy.allocate(inputs)`` wherever Gavel calls
``Scheduler._compute_allocation``; the round mechanics are not here.

Every policy returns a ``(J, T)`` matrix with rows summing to ≤ 1 and
``Σ_j x[j, t] · scale[j] ≤ capacity[t]`` (except where Gavel's agnostic FIFO itself overbooks a
type, documented in :mod:`.fifo`). Min-total-duration and finish-time fairness find their
optimal values with scipy's HiGHS (one LP; a root-finding over LPs). Where an LP has many optima,
the matrix matters to the rounds mechanism: by default the policies return the analytic center
of the optimal face, the point Gavel's interior-point solver (ECOS) converges to, by a
path-following barrier method (:mod:`.center`; for max-min fairness that method alone solves the
LP, to a duality gap of 1e-6); ``central=False`` returns HiGHS's optimal vertex instead.
Inside Gavel's own simulator, the central choice reproduces Gavel's D1–D5 records far better
than vertices (e.g. D4 min-total-duration JCT −4 % vs +19 %).

Stateful policies (FIFO, finish-time fairness) keep Gavel's per-job state inside the policy
object, keyed by job id, exactly as Gavel's policy objects do: create one object per simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel.fifo import Fifo
from walras.allocator.gavel.finish_time_fairness import FinishTimeFairness
from walras.allocator.gavel.inputs import FloatArray, GavelInputs, IntArray
from walras.allocator.gavel.lp import SolverError
from walras.allocator.gavel.max_min_fairness import MaxMinFairness
from walras.allocator.gavel.min_total_duration import MinTotalDuration


class GavelPolicy(Protocol):
    """One Gavel policy: a name and ``allocate(inputs) -> (J, T) time fractions``."""

    name: str

    def allocate(self, inputs: GavelInputs) -> FloatArray: ...


_REGISTRY: dict[str, Callable[[int, bool], GavelPolicy]] = {
    "max_min_fairness_perf": lambda seed, central: MaxMinFairness(aware=True, central=central),
    "max_min_fairness": lambda seed, central: MaxMinFairness(aware=False, central=central),
    "min_total_duration_perf": lambda seed, central: MinTotalDuration(aware=True, central=central),
    "min_total_duration": lambda seed, central: MinTotalDuration(aware=False, central=central),
    "finish_time_fairness_perf": lambda seed, central: FinishTimeFairness(
        aware=True, central=central
    ),
    "finish_time_fairness": lambda seed, central: FinishTimeFairness(aware=False, central=central),
    "fifo_perf": lambda seed, central: Fifo(aware=True),
    "fifo": lambda seed, central: Fifo(aware=False, seed=seed),
}

POLICY_NAMES: tuple[str, ...] = tuple(_REGISTRY)

LP_SOLVERS = ("highs", "ecos")
"""How the LP policies are solved: HiGHS (scipy; default) or Gavel's own cvxpy + ECOS."""


def make_policy(
    name: str, *, seed: int = 0, central: bool = True, lp_solver: str = "highs"
) -> GavelPolicy:
    """A fresh policy object for Gavel's policy ``name``.

    ``seed`` seeds the agnostic FIFO's generator (Gavel's ``--seed``). ``central`` selects, for
    the LP policies, the analytic center of the optimal face (default; what Gavel's
    interior-point solver returns, see :mod:`.center`) or HiGHS's optimal vertex (``False``).
    ``lp_solver="ecos"`` solves the LP policies with cvxpy + ECOS in Gavel's problem shape
    (:mod:`.ecos`; FIFO has no LP and is the same either way).
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise InvalidProblem(
            f"unknown Gavel policy {name!r}; known: {', '.join(POLICY_NAMES)}", field="policy"
        )
    if lp_solver not in LP_SOLVERS:
        raise InvalidProblem(
            f"--lp-solver: {lp_solver!r} is not one of {', '.join(LP_SOLVERS)}", field="lp_solver"
        )
    if lp_solver == "ecos" and not name.startswith("fifo"):
        from walras.allocator.gavel.ecos import EcosGavelLp  # opt-in: cvxpy only when asked

        return EcosGavelLp(name)
    return factory(seed, central)


__all__ = [
    "LP_SOLVERS",
    "POLICY_NAMES",
    "FloatArray",
    "GavelInputs",
    "GavelPolicy",
    "IntArray",
    "SolverError",
    "make_policy",
]

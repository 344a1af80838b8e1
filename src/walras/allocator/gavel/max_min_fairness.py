"""Gavel's max-min fairness (LAS): ``max_min_fairness_perf`` and the agnostic ``max_min_fairness``.

Heterogeneity-aware (Gavel ``MaxMinFairnessPolicyWithPerf``), with ``thr`` the whole-job
throughputs, ``k`` the scale factors, ``w`` the priority weights and ``cap`` the GPUs per type::

    maximise   min_j  Σ_t  thr[j, t] · k[j] / (w[j] · prop[j]) · x[j, t]
    subject to x ≥ 0,  Σ_t x[j, t] ≤ 1,  Σ_j k[j] · x[j, t] ≤ cap[t]

``prop[j] = Σ_t thr[j, t] · cap[t] / Σ_u cap[u]`` is the throughput of job ``j`` under Gavel's
"proportional" allocation (every job gets the same share ``cap[t] / Σ cap`` of every type; it
ignores scale factors), so each job's throughput is measured against what an equal split would
give it. The factor ``k[j]`` makes the objective count GPU-time: a 1-GPU job gets ``k`` times the
time fraction of an otherwise equal ``k``-GPU job. An LP (epigraph variable ``s``). By default the
policy returns the analytic center of its optimal face, the optimum Gavel's interior-point solver
(ECOS) returns, by path-following (:mod:`.center`); ``central=False`` solves the LP with HiGHS
and returns its vertex.

The agnostic variant (Gavel ``MaxMinFairnessPolicy``) runs the same LP with every throughput
replaced by 1 (so ``prop = 1``): it equalises weighted GPU-time and ignores which type is faster.

Worked examples (derived by hand; the unit tests check them):

- Types A, B with one GPU each; 1-GPU jobs with ``thr`` = (3, 1) and (1, 3). ``prop`` = 2 for both,
  coefficients (1.5, 0.5) and (0.5, 1.5). Each job alone on its fast type gives ``s* = 1.5``
  (1.5× the equal split), and that is optimal: the agnostic variant gets ``s* = 1``.
- One type with 2 GPUs; jobs of 1, 1 and 2 GPUs, any throughputs (``prop = thr``): coefficients
  are the scale factors, ``k[j] x[j] ≥ s`` and ``Σ k[j] x[j] ≤ 2`` give ``s* = 2/3``, i.e.
  ``x = (2/3, 2/3, 1/3)``: every job gets 2/3 of a GPU's time.

Gavel clips the solver's ``x`` to ``[0, 1]``; so does :func:`.lp.finish`.

Warm start: consecutive solves in a simulation differ by the jobs that finished (Gavel re-solves
when jobs leave). Dropping jobs keeps a point strictly feasible (capacity only frees up, the other
jobs' rows are unchanged) at the same level, so the policy keeps the central point where the
previous path's relative gap bound first fell below :data:`WARM_GAP` and starts the next path
there, restricted to the remaining jobs, when every job of the new call was in the previous one
with the same row (throughputs, scale factor, weight) and capacity is unchanged; otherwise it
starts cold. Both paths end at the same point, the analytic center of the optimal face, to the
path's tolerance (``center.GAP_REL``); the warm one skips the early stages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import center, lp
from walras.allocator.gavel.inputs import FloatArray, GavelInputs, IntArray

WARM_GAP = 0.05
"""Relative gap bound of the central point kept for the next solve's warm start: far enough from
the optimal face that dropping a few jobs (which raises ``s*``) leaves it well inside."""


def proportional_throughputs(throughputs: FloatArray, capacity: FloatArray) -> FloatArray:
    """Gavel's ``ProportionalPolicy.get_throughputs``: ``Σ_t thr[j, t] · cap[t] / Σ cap``."""
    total = float(capacity.sum())
    if total <= 0.0:
        return np.zeros(throughputs.shape[0])
    return np.asarray(throughputs @ (capacity / total), dtype=np.float64)


def coefficients(inputs: GavelInputs, throughputs: FloatArray) -> FloatArray:
    """``thr · k / (w · prop)`` per (job, type): the objective's weight on ``x[j, t]``."""
    prop = proportional_throughputs(throughputs, inputs.capacity)
    if inputs.n_jobs and float(inputs.capacity.sum()) > 0.0 and float(prop.min()) <= 0.0:
        j = int(np.argmin(prop))
        raise InvalidProblem(
            f"job {inputs.job_ids[j]}: throughput is 0 on every type with GPUs, so its share "
            "under an equal split is 0 and Gavel's normalisation divides by it",
            field="throughputs",
            index=j,
        )
    scale = inputs.scale_factors.astype(np.float64) / (
        inputs.weights() * np.where(prop > 0, prop, 1)
    )
    return np.asarray(throughputs * scale[:, None], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """A central point of the previous solve (see the module docstring) and what it solved."""

    job_ids: IntArray
    coef: FloatArray
    scale_factors: IntArray
    capacity: FloatArray
    x: FloatArray
    level: float

    def start_for(self, inputs: GavelInputs, coef: FloatArray) -> tuple[FloatArray, float] | None:
        """``(x, level)`` restricted to ``inputs``' jobs, or None if it does not apply."""
        if not np.array_equal(self.capacity, inputs.capacity):
            return None
        where = {int(j): i for i, j in enumerate(self.job_ids)}
        rows = [where.get(int(j), -1) for j in inputs.job_ids]
        if -1 in rows:  # a job it has not seen: no strictly feasible point at this level
            return None
        idx = np.asarray(rows, dtype=np.int64)
        if not (
            np.array_equal(self.coef[idx], coef)
            and np.array_equal(self.scale_factors[idx], inputs.scale_factors)
        ):
            return None
        return self.x[idx], self.level


class MaxMinFairness:
    """``max_min_fairness_perf`` (``aware=True``) or ``max_min_fairness`` (``aware=False``).

    ``central=True`` returns the analytic center of the optimal face (:mod:`.center`), the
    optimum Gavel's interior-point solver returns; ``False`` returns HiGHS's vertex. ``warm``
    (central only) starts each path from the previous solve's checkpoint when it applies.
    """

    def __init__(self, *, aware: bool, central: bool = True, warm: bool = True) -> None:
        self.aware = aware
        self.central = central
        self.warm = warm
        self.name = "max_min_fairness_perf" if aware else "max_min_fairness"
        self._checkpoint: _Checkpoint | None = None

    def allocate(self, inputs: GavelInputs) -> FloatArray:
        J, T = inputs.n_jobs, inputs.n_types
        if J == 0 or T == 0:
            return np.zeros((J, T))
        thr = inputs.throughputs if self.aware else np.ones((J, T))
        coef = coefficients(inputs, thr)
        if self.central and bool((inputs.capacity > 0.0).any()):
            x = self._central(inputs, coef)
        else:
            x, _ = lp.max_min(lp.base_polytope(inputs.scale_factors, inputs.capacity), coef)
        return lp.finish(x, inputs.scale_factors, inputs.capacity)

    def _central(self, inputs: GavelInputs, coef: FloatArray) -> FloatArray:
        k, cap = inputs.scale_factors, inputs.capacity
        warm = None
        if self.warm and self._checkpoint is not None:
            warm = self._checkpoint.start_for(inputs, coef)
        if warm is None:
            end = center.central_path(
                lp.strictly_inside(k, cap), coef, k, cap, checkpoint_gap=WARM_GAP
            )
        else:
            end = center.central_path(
                warm[0], coef, k, cap, start_level=warm[1], checkpoint_gap=WARM_GAP
            )
        self._checkpoint = None
        if self.warm and end.checkpoint_x is not None and end.checkpoint_level is not None:
            self._checkpoint = _Checkpoint(
                inputs.job_ids.copy(),
                coef,
                k.copy(),
                cap.copy(),
                end.checkpoint_x,
                end.checkpoint_level,
            )
        return end.x

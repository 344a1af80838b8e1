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
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import center, lp
from walras.allocator.gavel.inputs import FloatArray, GavelInputs


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


class MaxMinFairness:
    """``max_min_fairness_perf`` (``aware=True``) or ``max_min_fairness`` (``aware=False``).

    ``central=True`` returns the analytic center of the optimal face (:mod:`.center`), the
    optimum Gavel's interior-point solver returns; ``False`` returns HiGHS's vertex.
    """

    def __init__(self, *, aware: bool, central: bool = True) -> None:
        self.aware = aware
        self.central = central
        self.name = "max_min_fairness_perf" if aware else "max_min_fairness"

    def allocate(self, inputs: GavelInputs) -> FloatArray:
        J, T = inputs.n_jobs, inputs.n_types
        if J == 0 or T == 0:
            return np.zeros((J, T))
        thr = inputs.throughputs if self.aware else np.ones((J, T))
        coef = coefficients(inputs, thr)
        if self.central and bool((inputs.capacity > 0.0).any()):
            start = lp.strictly_inside(inputs.scale_factors, inputs.capacity)
            x, _ = center.central_max_min(start, coef, inputs.scale_factors, inputs.capacity)
        else:
            x, _ = lp.max_min(lp.base_polytope(inputs.scale_factors, inputs.capacity), coef)
        return lp.finish(x, inputs.scale_factors, inputs.capacity)

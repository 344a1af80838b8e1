"""Hadar and HadarE: online primal–dual GPU scheduling and job forking.

Sultana et al. 2024 and docs/algorithms.md#hadar-and-hadare.

Arrays in, an immutable per-round plan out; no Kubernetes and no upper layers. The core's
``hadar``/``hadare`` policies wrap :func:`plan_round`.

Each round, per GPU type ``r`` (capacity pooled over its nodes), one more GPU costs
``k^r(γ) = U_min^r (U_max^r/U_min^r)^(γ/c^r)`` where ``γ`` GPUs of the type are taken. A job's
payoff for an allocation is its utility at the projected completion time minus the prices of its
GPUs; a gang spread over types runs at its slowest member's rate. Hadar keeps running jobs unless
moving gains more than the restart, then admits waiting jobs with positive payoff so that the total
payoff is maximal (exact DP over pooled states, or the paper's greedy online rule); an opt-in
backfill gives GPUs left idle to the other waiting jobs. HadarE then fills free nodes with copies
of forkable jobs and splits their remaining steps across copies.

Use::

    inputs = make_inputs(throughput, replicas, remaining, node_type, node_free,
                         elapsed=..., current=..., forkable=..., total_work=...)
    plan = plan_round(inputs, fork_jobs=False)      # Hadar; fork_jobs=True: HadarE
    for jp in plan.jobs: jp.placement, jp.gangs, jp.rate, jp.kept, jp.moved

Modules: ``inputs`` (:class:`HadarInputs`, :func:`make_inputs`), ``utilities`` (utility shapes),
``prices`` (price function, default bounds, competitive ratio), ``find_alloc`` (best allocation of
one job, node layout), ``admission`` (the queue's choice), ``forking`` (HadarE), ``planner``
(:func:`plan_round`), ``results`` (:class:`HadarPlan`, :class:`JobPlan`, :class:`Gang`).
"""

from __future__ import annotations

from walras.allocator.hadar.admission import DP_MAX_CELLS
from walras.allocator.hadar.horizon import Horizon
from walras.allocator.hadar.inputs import HadarInputs, make_inputs
from walras.allocator.hadar.planner import plan_round
from walras.allocator.hadar.prices import capacity, competitive_ratio, default_bounds, price
from walras.allocator.hadar.results import Gang, HadarPlan, JobPlan
from walras.allocator.hadar.utilities import Hyperbolic, InverseSlowdown, LinearDecay, Utility

__all__ = [
    "DP_MAX_CELLS",
    "Gang",
    "HadarInputs",
    "HadarPlan",
    "Horizon",
    "Hyperbolic",
    "InverseSlowdown",
    "JobPlan",
    "LinearDecay",
    "Utility",
    "capacity",
    "competitive_ratio",
    "default_bounds",
    "make_inputs",
    "plan_round",
    "price",
]

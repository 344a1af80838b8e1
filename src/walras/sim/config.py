"""Options of one simulation run: what ``walras simulate`` passes to :func:`.engine.run`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from walras.allocator import gavel

SEMANTICS = ("gavel", "walras")
"""Round mechanics: ``gavel`` (Gavel's simulator, rebuilt) and ``walras`` (the operator's own
scheduling core, ``walras.core.cycle.plan``, on a simulated clock and cluster)."""

LP_SOLVERS = gavel.LP_SOLVERS
"""``--lp-solver`` for Gavel's LP policies: ``highs`` (default, :mod:`walras.allocator.gavel`) or
``ecos`` (Gavel's own solver, cvxpy + ECOS, extra ``walras[ecos]``;
:mod:`walras.allocator.gavel.ecos`)."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """``round_s``: round length; ``restart_s``: seconds a (re)started job loses in its round;
    ``min_reset_interval_s``: Gavel's ``minimum_time_between_allocation_resets``; ``window``:
    job ids ``[a, b)`` whose mean JCT is reported separately (Gavel's ``-s a -e b``);
    ``lp_solver``: one of :data:`LP_SOLVERS`, for Gavel's LP policies. The last ten
    fields configure ``--semantics walras`` (see ``docs/policies.md``)."""

    round_s: float = 360.0
    restart_s: float = 0.0
    seed: int = 0
    window: tuple[int, int] | None = None
    semantics: str = "gavel"
    min_reset_interval_s: float = 1920.0
    lp_solver: str = "highs"
    # --semantics walras only (walras.core.cycle.CycleOptions, and the policy's arguments and POP
    # shards as walras.core.policies.PolicyConfig takes them, e.g. {"psdsf": {"mode": "rdm"}}):
    policy_args: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    hold_s: float = 0.0
    history_half_life_s: float = math.inf
    backfill: bool = False
    min_run_s: float = 0.0
    pop_shards: int = 1
    # --semantics walras only: what users declare (walras.sim.declared).
    throughput_noise: float = 0.0
    hide_fraction: float = 0.0
    estimate: bool = True
    # --semantics walras only: Tenant manifests (walras.sim.tenants; checked), and whether the
    # scheduler gets their quotas (--no-quotas: measured, not enforced).
    tenants: tuple[Mapping[str, Any], ...] = ()
    quotas: bool = True

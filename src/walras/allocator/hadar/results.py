"""Hadar's per-round plan (immutable). Built by :func:`walras.allocator.hadar.plan_round`.

A job runs as one or more *gangs*. Under Hadar every job has at most one gang (``replicas`` pods,
possibly spread over nodes and types). Under HadarE a forkable job may also run *copies*: more
gangs, each packed on one node, each working on its own share of the remaining steps; their
progress adds up.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Gang:
    """One gang (a copy, for a forked job).

    Attributes:
        nodes: ``(node, pods)`` pairs sorted by node; pods sum to the job's ``replicas``.
        rate: work units per second of this gang (its slowest member's rate).
        steps: work units assigned to this gang this round. A job that is not forked gets all of
            its remaining work; a forked job's remaining work is split across its gangs so that
            they finish together (:mod:`~walras.allocator.hadar.endgame`).
        kept: the job already has exactly these pods on these nodes (no restart).
    """

    nodes: tuple[tuple[int, int], ...]
    rate: float
    steps: float
    kept: bool


@dataclass(frozen=True, slots=True)
class JobPlan:
    """Where and how fast one job runs this round.

    Attributes:
        job: job index.
        placement: all of the job's pods, ``(node, pods)`` sorted by node (gangs summed).
        gangs: the job's gangs, the first one being the one Hadar admitted (or kept/moved).
        rate: total work per second (sum over gangs).
        utility: ``U_j`` at the projected completion time with these gangs.
        cost: prices paid for the GPUs, each at the price when it was taken.
        payoff: ``utility − cost``.
        kept: the whole placement equals the job's current one (no pod is restarted).
        moved: the job was running and its placement changed.
        forked: the job runs more than one gang (HadarE only).
        last_round: HadarE found the job can finish this round on its fastest gangs; its other
            gangs went to other jobs, or stayed where no other job took their GPUs.
        backfilled: admitted by the opt-in ``backfill`` step at a payoff ≤ 0 (GPUs left idle
            otherwise), not by the primal-dual rule.
    """

    job: int
    placement: tuple[tuple[int, int], ...]
    gangs: tuple[Gang, ...]
    rate: float
    utility: float
    cost: float
    payoff: float
    kept: bool
    moved: bool
    forked: bool
    last_round: bool
    backfilled: bool = False


@dataclass(frozen=True, slots=True)
class HadarPlan:
    """One round's plan.

    Attributes:
        jobs: one entry per placed job, sorted by job index.
        waiting: active jobs (remaining work, some usable type) that are not placed, ascending.
        type_prices: price of one more GPU of each type after the plan (``inf``: no capacity).
        node_prices: each node's price (its type's; prices are pooled per type).
        u_min, u_max: price bounds per type used this round.
        alpha, alpha_eff: the competitive-ratio constants ``α``, ``α'`` of
            :mod:`~walras.allocator.hadar.prices`.
        method: how the queue was chosen, ``"dp"`` or ``"greedy"``.
        total_payoff: sum of the jobs' payoffs.
    """

    jobs: tuple[JobPlan, ...]
    waiting: tuple[int, ...]
    type_prices: tuple[float, ...]
    node_prices: tuple[float, ...]
    u_min: tuple[float, ...]
    u_max: tuple[float, ...]
    alpha: float
    alpha_eff: float
    method: str
    total_payoff: float

    def job(self, j: int) -> JobPlan | None:
        """The plan of job ``j``, or ``None`` if it is not placed."""
        for p in self.jobs:
            if p.job == j:
                return p
        return None

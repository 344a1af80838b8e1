"""Results of the rounds realiser: one round's placements (immutable).

Built by :func:`walras.allocator.rounds.plan_round`; read by the operator (pods to keep, create
and delete) and by :func:`walras.allocator.rounds.advance` (the history).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobPlacement:
    """Where one job runs this round.

    Attributes:
        job: job index (row of ``targets``).
        group: placement group (column of ``targets``) every node below belongs to.
        nodes: ``(node index, replicas on it)`` pairs, sorted by node index; replicas sum to the
            job's gang size.
        kept: the placement is exactly the job's ``current`` one (its pods stay where they are).
    """

    job: int
    group: int
    nodes: tuple[tuple[int, int], ...]
    kept: bool


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One round's placements.

    Attributes:
        placements: one entry per placed job, sorted by job index.
        unplaced: jobs with a positive target somewhere that were not placed, ascending.
    """

    placements: tuple[JobPlacement, ...]
    unplaced: tuple[int, ...]

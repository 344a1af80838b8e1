"""The realiser's history: rounds received per (job, group) and rounds eligible per job.

The operator persists ``received`` in ``FungibleJob.status.received`` and calls :func:`advance`
after each round; the simulator does the same in memory.
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.rounds.results import RoundPlan
from walras.allocator.rounds.validation import FloatArray, IntArray, float_array


def advance(
    received: object, elapsed: object, plan: RoundPlan, eligible_mask: object
) -> tuple[FloatArray, FloatArray]:
    """The history after a round: ``received[j, g] += 1`` per placement, ``elapsed += eligible``.

    A job that ran was eligible by definition, so ``elapsed`` also grows for placed jobs whose
    ``eligible_mask`` entry is false. Inputs are not modified.
    """
    rec = np.asarray(received, dtype=np.float64)
    if rec.ndim != 2:
        raise InvalidProblem(
            f"received must be a (jobs, groups) matrix, got shape {rec.shape}", field="received"
        )
    n_jobs, n_groups = rec.shape
    rec = float_array(rec, "received", (n_jobs, n_groups)).copy()
    ela = float_array(elapsed, "elapsed", (n_jobs,)).copy()
    mask = np.asarray(eligible_mask)
    if mask.shape != (n_jobs,) or mask.dtype.kind != "b":
        raise InvalidProblem(
            f"eligible_mask must be a bool vector of shape {(n_jobs,)}, got {mask.dtype} "
            f"{mask.shape}",
            field="eligible_mask",
        )
    ran = np.zeros(n_jobs, dtype=bool)
    for pl in plan.placements:
        if not (0 <= pl.job < n_jobs and 0 <= pl.group < n_groups):
            raise InvalidProblem(
                f"job {pl.job}: placement in group {pl.group} is outside received's shape "
                f"{(n_jobs, n_groups)}",
                field="plan",
                index=pl.job,
            )
        rec[pl.job, pl.group] += 1.0
        ran[pl.job] = True
    ela += (mask | ran).astype(np.float64)
    return rec, ela


def as_current(plan: RoundPlan, n_jobs: int, n_nodes: int) -> IntArray:
    """The ``(J, K)`` replicas-per-node matrix of a plan: next round's ``current``."""
    out = np.zeros((n_jobs, n_nodes), dtype=np.int64)
    for pl in plan.placements:
        for k, n in pl.nodes:
            out[pl.job, k] += n
    return out


def realised_share(received: object, elapsed: object) -> FloatArray:
    """``received / elapsed`` per (job, group); 0 for jobs never eligible."""
    rec = np.asarray(received, dtype=np.float64)
    ela = np.asarray(elapsed, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = rec / ela[:, None]
    return np.where(ela[:, None] > 0, share, 0.0)

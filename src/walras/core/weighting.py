"""Job weights that know how much work is left.

Price discovery's log utility ``w_i log t_i`` ignores how long a job still has to run, so a job one
round from done and a job with days left get the same share. With ``weighting = "remaining"`` each
job's utility weight is scaled by its remaining time raised to an exponent ``β``::

    T_i  = (totalWork_i − workDone_i) / max_t a_{i,t}     remaining seconds at its best type
    w'_i = w_i · T_i^β / mean_k(T_k^β)                     (β < 0: short jobs weigh more)

The mean normalisation keeps the average weight unchanged, so the solver's absolute stopping
tolerance (``eps · n``) means the same at any scale; log utility's allocation is invariant to a
common factor anyway. ``β = −1`` approximates shortest-remaining-time-first within the market,
``β = 0`` is plain price discovery. Jobs without ``totalWork`` (or already done) keep their
weight and do not enter the mean.

Worked example: two jobs with ``w = 1`` and 100 s and 400 s left at β = −0.5: ``T^β`` = 0.1 and
0.05, mean 0.075, so ``w'`` = 1.33 and 0.67: the short job gets twice the weight.

An optional floor ``γ ≥ 0`` blends in equal weights, ``w'_i = w_i · (T_i^β / mean_k(T_k^β) + γ)
/ (1 + γ)``: the mean stays 1 and no job falls below ``γ / (1 + γ)`` of it, so the longest jobs
(which set the makespan) keep a share. In the example with ``γ = 1``: (1.33 + 1) / 2 = 1.17 and
(0.67 + 1) / 2 = 0.83. Default ``γ = 0`` (:data:`DEFAULT_FLOOR`); D5 measurements of β and γ are
in docs/simulate.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from walras.core import model, snapshot

FloatArray = npt.NDArray[np.float64]

WEIGHTINGS = ("none", "remaining")

DEFAULT_FLOOR = 0.0
"""``γ``: the share of equal weights blended into remaining-work weights (module docstring)."""


def remaining_seconds(job: model.JobSpec, snap: snapshot.Snapshot) -> float | None:
    """Seconds of work left at the job's best throughput; None without ``totalWork``."""
    left = snapshot.remaining_work(job, snap)
    best = max(job.throughput.values(), default=0.0)
    if left is None or best <= 0:
        return None
    return left / best


def factors(
    jobs: Sequence[model.JobSpec],
    snap: snapshot.Snapshot,
    *,
    weighting: str = "none",
    exponent: float = -0.5,
    floor: float = DEFAULT_FLOOR,
) -> FloatArray:
    """Per job, the factor ``(T_i^β / mean_k(T_k^β) + γ) / (1 + γ)`` its weight is scaled by
    (1 for "none"; ``γ`` = ``floor``)."""
    factor = np.ones(len(jobs), dtype=np.float64)
    if weighting == "none" or not jobs:
        return factor
    if weighting != "remaining":
        raise ValueError(f"unknown weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
    if not floor >= 0.0:  # also rejects NaN
        raise ValueError(f"weighting floor must be >= 0, got {floor}")
    left = np.array([remaining_seconds(j, snap) or 0.0 for j in jobs], dtype=np.float64)
    known = left > 0
    if known.any():
        scaled = left[known] ** exponent
        factor[known] = (scaled / scaled.mean() + floor) / (1.0 + floor)
    return factor


def weights(
    jobs: Sequence[model.JobSpec],
    snap: snapshot.Snapshot,
    *,
    weighting: str = "none",
    exponent: float = -0.5,
    floor: float = DEFAULT_FLOOR,
) -> FloatArray:
    """The utility weight of each job under ``weighting`` (see the module docstring)."""
    base = np.array([j.utility.weight for j in jobs], dtype=np.float64)
    return base * factors(jobs, snap, weighting=weighting, exponent=exponent, floor=floor)

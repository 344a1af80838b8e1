"""Hadar's resource prices (Sultana et al. 2024 eq. 5–7, with the capacity pooled per GPU type).

Price of one type-``r`` GPU when ``γ`` GPUs of type ``r`` are already allocated this round::

    k^r(γ) = U_min^r · (U_max^r / U_min^r) ** (γ / c^r)

``c^r`` is the pooled capacity of type ``r`` this round (``node_free`` summed over its nodes)
and ``γ`` the pooled allocation. The paper indexes both by node (``c_h^r``, ``γ_h^r``); with one
GPU of a type per node that degenerates to a busy flag (``γ/c ∈ {0, 1}``) and its
competitive-ratio proof, which needs small steps ``γ/c``, no longer applies
(docs/algorithms.md#hadar-and-hadare).
Pooled, every node of a type shows the same price. Worked example: ``U_min = 0.01``,
``U_max = 1``, ``c = 4``: the next GPU costs 0.01, 0.0316, 0.1, 0.316 after 0, 1, 2, 3 are taken,
and 1 = ``U_max`` when the type is full.

Default bounds (the paper's eq. 6–7 restated per GPU; ``U_j`` from
:mod:`~walras.allocator.hadar.utilities`)::

    U_max^r = max_j U_j(e_j + rem_j / X_j^r) / W_j             (best per-GPU value type r can earn)
    U_min^r = min_j U_j(e_j + restart + rem_j / min_r X_j^r) / (2 · Σ_r c^r)

over the jobs that are active and fit in the pooled capacity. At ``γ = c^r`` the price
``U_max^r`` makes every whole gang on type ``r`` worth at most zero, so a full type blocks new
jobs; at ``γ = 0`` any job pays at most half of its worst utility.

Competitive ratio (paper Theorem 2), with its assumptions made explicit:
``α = max(1, max_r ln(U_max^r / U_min^r))`` and the greedy admission (jobs processed once each in
queue order, each admitted iff its best payoff, from an exact FIND_ALLOC, is positive) earns a total
utility ``≥ OPT / (2 α')`` for the one-round problem, where

- ``D_0 = Σ_r U_min^r c^r ≤ OPT / 2``: holds for the default ``U_min`` whenever the optimum runs at
  least one job (some gang fits), since then ``OPT ≥ min_j U_j(worst time)``;
- no job is running at the start of the round (``γ`` starts at 0);
- ``α' = α · (e^x - 1) / x`` with ``x = α · max_j W_j / min_r c^r`` corrects the paper's
  *differential* allocation-cost argument for whole-GPU steps: it tends to ``α`` when gangs are
  small against the pooled capacity of a type, the "many GPUs per node" the proof assumes.
  Pooling makes that true on real clusters even when each node has one GPU of a type.

:func:`competitive_ratio` returns ``(α, α')``; ``tests/unit/test_hadar.py`` checks the bound against
a brute-force optimum where the assumptions hold.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar.inputs import HadarInputs

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def capacity(inputs: HadarInputs) -> FloatArray:
    """Pooled GPUs of each type this round, ``(T,)``."""
    return np.bincount(
        inputs.node_type, weights=inputs.node_free.astype(np.float64), minlength=inputs.n_types
    ).astype(np.float64)


def price(
    gamma: npt.ArrayLike, cap: FloatArray, u_min: FloatArray, u_max: FloatArray
) -> FloatArray:
    """``k^r(γ)`` broadcast over the last axis (types); ``inf`` for a type with no capacity."""
    g = np.asarray(gamma, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.where(cap > 0, g / np.where(cap > 0, cap, 1.0), np.inf)
        out = u_min * (u_max / u_min) ** exponent
    return np.where(cap > 0, out, np.inf)


def job_utility(inputs: HadarInputs, jobs: IntArray | slice, tau: FloatArray) -> FloatArray:
    """``U_j(τ) = weight_j · W_j · shape(τ, ideal_j)`` for ``jobs`` (broadcast against ``τ``)."""
    # The jobs' rows only (the same maxima): FIND_ALLOC's callers ask for one job at a time.
    best = inputs.throughput[jobs].max(axis=-1)
    with np.errstate(divide="ignore"):
        ideal = np.where(best > 0, inputs.total_work[jobs] / np.where(best > 0, best, 1.0), np.inf)
    scale = inputs.weight[jobs] * inputs.replicas[jobs]
    return np.asarray(scale * inputs.utility(tau, ideal), dtype=np.float64)


def default_bounds(inputs: HadarInputs) -> tuple[FloatArray, FloatArray]:
    """``(U_min, U_max)`` per type, as in the module docstring; explicit inputs override them."""
    T = inputs.n_types
    cap = capacity(inputs)
    thr = inputs.throughput
    fits = (inputs.remaining > 0) & (thr.max(axis=1) > 0)
    fits &= inputs.replicas <= np.where(thr > 0, cap[None, :], 0).sum(axis=1)
    jobs = np.flatnonzero(fits)
    u_max = np.ones(T)
    u_min = np.ones(T)
    if jobs.size:
        rem = inputs.remaining[jobs, None]
        with np.errstate(divide="ignore"):
            tau = inputs.elapsed[jobs, None] + np.where(
                thr[jobs] > 0, rem / np.where(thr[jobs] > 0, thr[jobs], 1.0), np.inf
            )
        per_gpu = job_utility(inputs, jobs[:, None], tau) / inputs.replicas[jobs, None]
        u_max = np.where(per_gpu.max(axis=0) > 0, per_gpu.max(axis=0), per_gpu.max())
        slowest = np.where(thr[jobs] > 0, thr[jobs], np.inf).min(axis=1)
        worst_tau = inputs.elapsed[jobs] + inputs.restart_seconds + inputs.remaining[jobs] / slowest
        worst = job_utility(inputs, jobs, worst_tau) / (2.0 * max(cap.sum(), 1.0))
        u_min = np.full(T, float(worst.min()))
    if inputs.u_max is not None:
        u_max = inputs.u_max.copy()
    if inputs.u_min is not None:
        u_min = inputs.u_min.copy()
    if not (np.isfinite(u_max).all() and (u_max > 0).all() and (u_min > 0).all()):
        raise InvalidProblem(
            "utility is zero for every job that fits: pass u_min/u_max explicitly", field="utility"
        )
    u_min = np.minimum(u_min, u_max)
    return u_min, u_max


def competitive_ratio(
    u_min: FloatArray, u_max: FloatArray, cap: FloatArray, max_gang: int
) -> tuple[float, float]:
    """``(α, α')`` of the module docstring (``α'`` is ``inf`` when no type has capacity)."""
    alpha = max(1.0, float(np.log(u_max / u_min).max(initial=0.0)))
    positive = cap[cap > 0]
    if positive.size == 0:
        return alpha, math.inf
    x = alpha * max_gang / float(positive.min())
    return alpha, alpha * math.expm1(x) / x

"""Certificates for PS-DSF: how far an allocation is from Theorem 1 (RDM) / Theorem 2 (TDM).

With ``y_{n,i} = x_{n,i}/γ_{n,i}`` (node time share), ``s_{n,i} = x_n/(φ_n γ_{n,i})`` (VDS) and a
tenant *open* when it is below its cap (``x_n < D_n``; caps are the paper's demand limits):

- **Feasibility** (both modes): ``x ≥ 0``; ``x = 0`` where ``γ = 0``; ``x_n ≤ D_n``; TDM
  ``Σ_n y_{n,i} ≤ 1``; RDM ``Σ_n d_{n,r} x_{n,i} ≤ c_{i,r}``. Reported relative (time share,
  fraction of capacity, fraction of the cap).
- **Theorem 2 (TDM).** Every node with an open eligible tenant is fully used, and
  ``x_{n,i} > 0 ⇒ s_{n,i} ≤ s_{m,i}`` for every open eligible ``m``. Violations:
  ``1 − Σ_n y_{n,i}`` per such node, and ``min(y_{n,i}, (s_{n,i} − min_m s_{m,i}) / s_{n,i})`` per
  served pair — a pair only counts as far as it holds real time, so a rounding-sized
  ``x_{n,i}`` cannot dominate the measure.
- **Theorem 1 (RDM).** Every open tenant ``n`` has a bottleneck on every eligible node ``i``: some
  ``r`` with ``d_{n,r} > 0``, saturated, and ``s_{n,i} ≥ s_{m,i}`` for every ``m`` served on ``i``
  (``y_{m,i} > share_tol``) with ``d_{m,r} > 0``. Violation per pair:
  ``min_r max(unused fraction of r, (S_{i,r} − s_{n,i})⁺ / S_{i,r})`` with ``S_{i,r}`` the
  largest VDS among those ``m``.

:func:`certificate` returns the largest of all of these (0 for an exact PS-DSF allocation).
Called by ``fairness.solver`` for every result, by the distributed simulation as its stop
measure, and by the tests as the oracle.
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.problem import (
    BoolArray,
    FairnessProblem,
    FloatArray,
    monopoly_tasks,
)

# A tenant within this relative distance of its cap counts as capped (the water-fill puts capped
# tenants exactly on the cap; this only absorbs rounding).
CAP_RTOL = 1e-9


def _open(problem: FairnessProblem, totals: FloatArray) -> BoolArray:
    caps = problem.caps
    finite = np.isfinite(caps)
    limit = np.where(finite, caps - CAP_RTOL * np.maximum(np.where(finite, caps, 1.0), 1.0), np.inf)
    return totals < limit


def _vds(problem: FairnessProblem, totals: FloatArray, gamma: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gamma > 0, totals[:, None] / (problem.phi[:, None] * gamma), np.inf)


def _check_shape(problem: FairnessProblem, tasks: FloatArray) -> FloatArray:
    arr = np.asarray(tasks, dtype=np.float64)
    N, K, _ = problem.shape
    if arr.shape != (N, K):
        raise InvalidProblem(f"tasks must have shape ({N}, {K}), got {arr.shape}", field="tasks")
    if not np.isfinite(arr).all():
        raise InvalidProblem("tasks contain NaN or infinity", field="tasks")
    return arr


def _pods(problem: FairnessProblem, x: FloatArray) -> FloatArray:
    """Tasks in pods: with throughput, ``x`` counts work, so each pod is ``x / t`` of them.

    Resources are used per pod, so RDM capacity checks must divide work by throughput first.
    """
    if problem.throughput is None:
        return x
    t = np.asarray(problem.throughput, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 0, x / np.where(t > 0, t, 1.0), x)


def feasibility_violation(
    problem: FairnessProblem, tasks: FloatArray, mode: str, *, gamma: FloatArray | None = None
) -> float:
    """Largest relative feasibility violation of ``tasks`` under ``mode`` (0 if feasible)."""
    x = _check_shape(problem, tasks)
    g = monopoly_tasks(problem) if gamma is None else gamma
    worst = 0.0
    if x.size:
        scale = np.where(g > 0, g, 1.0)
        worst = max(worst, float(np.max(-x / scale)))
        worst = max(worst, float(np.max(np.where(g > 0, 0.0, np.abs(x)))))
    totals = x.sum(axis=1)
    caps = problem.caps
    finite = np.isfinite(caps)
    if finite.any():
        over = (totals[finite] - caps[finite]) / np.maximum(caps[finite], 1.0)
        worst = max(worst, float(np.max(over, initial=0.0)))
    if mode == "tdm":
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(g > 0, x / g, 0.0)
        worst = max(worst, float(np.max(y.sum(axis=0) - 1.0, initial=0.0)))
    else:
        use = _pods(problem, x).T @ problem.demand  # (K, M)
        c = problem.capacity
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(c > 0, (use - c) / np.where(c > 0, c, 1.0), np.where(use > 0, use, 0.0))
        worst = max(worst, float(np.max(rel, initial=0.0)))
    return max(worst, 0.0)


def node_levels(
    problem: FairnessProblem, tasks: FloatArray, *, gamma: FloatArray | None = None
) -> FloatArray:
    """``(K,)`` smallest VDS among each node's open eligible tenants (``inf`` if none)."""
    x = _check_shape(problem, tasks)
    g = monopoly_tasks(problem) if gamma is None else gamma
    totals = x.sum(axis=1)
    s = _vds(problem, totals, g)
    s = np.where(_open(problem, totals)[:, None], s, np.inf)
    levels: FloatArray = np.min(s, axis=0, initial=np.inf)
    return levels


def _state(
    problem: FairnessProblem, tasks: FloatArray, gamma: FloatArray | None
) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray]:
    """What both theorem checks start from: tasks, γ, VDS ``s`` and the open (below-cap) mask."""
    x = _check_shape(problem, tasks)
    g = monopoly_tasks(problem) if gamma is None else gamma
    totals = x.sum(axis=1)
    return x, g, _vds(problem, totals, g), _open(problem, totals)


def theorem2_violation(
    problem: FairnessProblem, tasks: FloatArray, *, gamma: FloatArray | None = None
) -> float:
    """Largest violation of the TDM characterisation (Theorem 2); feasibility not included."""
    x, g, s, open_ = _state(problem, tasks, gamma)
    if x.size == 0:
        return 0.0
    smin = np.min(np.where(open_[:, None], s, np.inf), axis=0, initial=np.inf)  # (K,)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(g > 0, x / g, 0.0)
    wanted = np.isfinite(smin)  # node has an open eligible tenant
    unused = np.where(wanted, 1.0 - y.sum(axis=0), 0.0)
    served = (x > 0) & (g > 0) & wanted[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        excess = np.where(served, (s - smin[None, :]) / s, 0.0)
    pair = np.minimum(y, np.maximum(excess, 0.0))
    return float(max(np.max(unused, initial=0.0), np.max(pair, initial=0.0), 0.0))


def theorem1_violation(
    problem: FairnessProblem,
    tasks: FloatArray,
    *,
    gamma: FloatArray | None = None,
    share_tol: float = 1e-9,
) -> float:
    """Largest violation of the RDM characterisation (Theorem 1); feasibility not included."""
    x, g, s, open_ = _state(problem, tasks, gamma)
    if x.size == 0:
        return 0.0
    c = problem.capacity
    use = _pods(problem, x).T @ problem.demand  # (K, M)
    with np.errstate(divide="ignore", invalid="ignore"):
        unused = np.where(c > 0, np.maximum(c - use, 0.0) / np.where(c > 0, c, 1.0), 1.0)
        y = np.where(g > 0, x / g, 0.0)
    served = y > share_tol
    need = open_[:, None] & (g > 0)  # (N, K) pairs that need a bottleneck
    worst = np.full(x.shape, np.inf)
    for r in range(c.shape[1]):
        dr = problem.demand[:, r] > 0
        top = np.max(np.where(served & dr[:, None], s, 0.0), axis=0, initial=0.0)  # S_{i,r}
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(top[None, :] > 0, np.maximum(top[None, :] - s, 0.0) / top[None, :], 0.0)
        cand = np.maximum(unused[None, :, r], rel)
        worst = np.where(dr[:, None], np.minimum(worst, cand), worst)
    worst = np.where(need, worst, 0.0)
    return float(np.max(worst, initial=0.0))


def certificate(
    problem: FairnessProblem, tasks: FloatArray, mode: str, *, gamma: FloatArray | None = None
) -> float:
    """Largest Theorem 1 (``"rdm"``) / Theorem 2 (``"tdm"``) or feasibility violation.

    ``gamma``: the problem's :func:`monopoly_tasks` if the caller already has it.
    """
    if mode not in ("tdm", "rdm"):
        raise InvalidProblem(f"mode must be 'tdm' or 'rdm', got {mode!r}", field="mode")
    if gamma is None:
        gamma = monopoly_tasks(problem)
    feas = feasibility_violation(problem, tasks, mode, gamma=gamma)
    if mode == "tdm":
        return max(feas, theorem2_violation(problem, tasks, gamma=gamma))
    return max(feas, theorem1_violation(problem, tasks, gamma=gamma))

"""Baseline multi-resource allocators the PS-DSF paper compares with (docs/algorithms.md#ps-dsf).

- **DRF** on one node: equalise ``x_n · max_r d_{n,r}/c_r / φ_n`` by progressive filling.
- **C-DRFH**: DRF's global dominant share computed as if all nodes were one pooled server,
  ``G_n = x_n · max_r d_{n,r} / Σ_i c_{i,r}``; max-min fair in ``G_n / φ_n`` subject to the real
  per-node feasibility and placement constraints.
- **TSF** (task share fairness): ``x_n / (φ_n g_n)`` max-min fair, with ``g_n`` the tasks tenant
  ``n`` would get monopolising *all* nodes *ignoring* placement constraints,
  ``g_n = Σ_i min_r c_{i,r}/d_{n,r}`` (× throughput with the GPU extension).

C-DRFH and TSF are lexicographic max-min problems, solved exactly by progressive filling with
linear programs (scipy's HiGHS): raise a common level ``t`` for the unfrozen tenants, then freeze
every tenant that cannot exceed it. Meant for comparisons on small and medium instances
(``N·K`` up to a few thousand pairs), not for the operator's hot path.

Called by the tests (paper table), ``walras fairshare`` comparisons and the benchmarks.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize as opt
import scipy.sparse as sp

from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.problem import FairnessProblem, FloatArray, fit_counts
from walras.allocator.fairness.waterfill import rdm_fill


def drf(capacity: FloatArray, demand: FloatArray, weight: FloatArray | None = None) -> FloatArray:
    """Weighted DRF on a single node: ``(N,)`` tasks (divisible)."""
    c = np.asarray(capacity, dtype=np.float64)
    d = np.asarray(demand, dtype=np.float64)
    N = d.shape[0]
    phi = np.ones(N) if weight is None else np.asarray(weight, dtype=np.float64)
    gamma = fit_counts(c[None, :], d)[:, 0]
    live = (gamma > 0) & np.isfinite(gamma)
    x = np.zeros(N)
    if live.any():
        x[live], _ = rdm_fill(
            gamma[live],
            phi[live],
            np.zeros(int(live.sum())),
            np.full(int(live.sum()), np.inf),
            d[live],
            c,
        )
    return x


def _max_min(problem: FairnessProblem, scale: FloatArray, mode: str) -> FloatArray:
    """Lexicographic max-min fair ``x_n / scale_n`` over the feasible set of ``mode``."""
    N, K, M = problem.shape
    fit = fit_counts(problem.capacity, problem.demand)
    if problem.throughput is not None:
        fit = fit * problem.throughput
    pairs = problem.delta & (fit > 0) & np.isfinite(fit)
    live = (scale > 0) & pairs.any(axis=1) & (problem.caps > 0)
    pairs &= live[:, None]
    n_of, i_of = np.nonzero(pairs)
    P = len(n_of)
    tasks = np.zeros((N, K))
    if P == 0:
        return tasks
    # Variables: x_p for each eligible pair, then t. Rows: capacity, then one per tenant.
    if mode == "tdm":
        cap_rows = sp.csr_matrix((1.0 / fit[n_of, i_of], (i_of, np.arange(P))), shape=(K, P))
        cap_rhs = np.ones(K)
    else:
        # Demands are per task; with throughput x counts work, so a task is x / throughput.
        per = np.ones(P) if problem.throughput is None else 1.0 / problem.throughput[n_of, i_of]
        rr, cc, vv = [], [], []
        for r in range(M):
            rr.append(i_of * M + r)
            cc.append(np.arange(P))
            vv.append(problem.demand[n_of, r] * per)
        cap_rows = sp.csr_matrix(
            (np.concatenate(vv), (np.concatenate(rr), np.concatenate(cc))), shape=(K * M, P)
        )
        cap_rhs = problem.capacity.reshape(-1)
    owner = sp.csr_matrix((np.ones(P), (n_of, np.arange(P))), shape=(N, P))  # Σ_i x_{n,i}
    finite_cap = np.isfinite(problem.caps)
    frozen_level = np.full(N, np.nan)
    frozen_level[~live] = 0.0
    x = np.zeros(P)

    def lp(objective: FloatArray, t_fixed: float | None) -> opt.OptimizeResult:
        active = np.isnan(frozen_level)
        # -Σ x_{n,·} + t·scale_n <= 0 (active) ;  -Σ x_{n,·} <= -level·scale_n (frozen)
        lvl = sp.hstack([-owner, sp.csr_matrix(scale[:, None] * active[:, None])]).tocsr()
        rhs_lvl = np.where(active, 0.0, -np.nan_to_num(frozen_level) * scale)
        rows = [sp.hstack([cap_rows, sp.csr_matrix((cap_rows.shape[0], 1))]), lvl[live]]
        rhs = [cap_rhs, rhs_lvl[live]]
        if finite_cap.any():
            rows.append(sp.hstack([owner[finite_cap], sp.csr_matrix((int(finite_cap.sum()), 1))]))
            rhs.append(problem.caps[finite_cap])
        bounds = [(0.0, None)] * P + [(t_fixed, t_fixed) if t_fixed is not None else (0.0, None)]
        return opt.linprog(
            objective,
            A_ub=sp.vstack(rows).tocsc(),
            b_ub=np.concatenate(rhs),
            bounds=bounds,
            method="highs",
        )

    for _ in range(N + 1):
        active = np.isnan(frozen_level)
        if not active.any():
            break
        c = np.zeros(P + 1)
        c[-1] = -1.0
        res = lp(c, None)
        if res.status != 0:
            raise InvalidProblem(f"baseline LP failed: {res.message}", field="problem")
        t_star = float(res.x[-1])
        x = res.x[:P]
        progressed = False
        for n in np.flatnonzero(active):
            c = np.zeros(P + 1)
            c[:P] = -(n_of == n).astype(np.float64)
            res_n = lp(c, t_star * (1.0 - 1e-9))
            best = -float(res_n.fun) if res_n.status == 0 else t_star * scale[n]
            if best <= t_star * scale[n] * (1.0 + 1e-7) + 1e-12:
                frozen_level[n] = t_star
                progressed = True
        if not progressed:
            # Numerical stall: freeze everyone at the common level rather than loop forever.
            frozen_level[active] = t_star
    # Final allocation: all levels fixed, maximise total tasks (keeps the result efficient).
    c = np.zeros(P + 1)
    c[:P] = -1.0
    res = lp(c, 0.0)
    if res.status == 0:
        x = res.x[:P]
    tasks[n_of, i_of] = np.maximum(x, 0.0)
    return tasks


def tsf(problem: FairnessProblem, *, mode: str = "rdm") -> FloatArray:
    """Task share fairness allocation ``(N, K)`` (placement-free monopoly counts ``g_n``)."""
    fit = fit_counts(problem.capacity, problem.demand)
    if problem.throughput is not None:
        fit = fit * problem.throughput
    g = np.where(np.isfinite(fit), fit, 0.0).sum(axis=1)
    return _max_min(problem, problem.phi * g, mode)


def c_drfh(problem: FairnessProblem, *, mode: str = "rdm") -> FloatArray:
    """C-DRFH allocation ``(N, K)``: pooled-capacity dominant shares, max-min fair."""
    pooled = problem.capacity.sum(axis=0)
    with np.errstate(divide="ignore"):
        share = np.where(problem.demand > 0, problem.demand / pooled[None, :], 0.0)
    dom = share.max(axis=1)
    with np.errstate(divide="ignore"):
        g = np.where((dom > 0) & np.isfinite(dom), 1.0 / dom, 0.0)
    return _max_min(problem, problem.phi * g, mode)

"""Exact finish for TDM: solve the PS-DSF conditions on a guessed support (a "crossover").

Gauss–Seidel sweeps find *which* tenants a node serves long before the numbers settle (block
coordinate ascent converges only linearly). Once the support ``E = {(n, i): x_{n,i} > 0}`` is
right, the TDM conditions of Theorem 2 are **linear** in the levels ``ℓ_i``, totals ``x_n`` and
time shares ``y_{n,i}``:

- every edge of an open tenant: ``x_n = φ_n γ_{n,i} ℓ_i`` (its VDS equals the node's level);
- a capped tenant: ``x_n = D_n`` and ``γ_{n,i} ℓ_i`` equal over its edges (the Eisenberg–Gale
  KKT condition for a tenant whose cap multiplier is positive);
- every node: ``Σ_n y_{n,i} = 1``; every tenant: ``Σ_i γ_{n,i} y_{n,i} = x_n``.

On a spanning forest of the support the system is square (one equation per edge, node and
tenant), so one sparse LU solve gives the exact allocation. The guess is never trusted: the
caller keeps it only if Theorem 2's certificate confirms it, and otherwise sweeps on.

Called by ``fairness.solver`` under TDM.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from walras.allocator.fairness.problem import BoolArray, FairnessProblem, FloatArray


def _forest(n_idx: np.ndarray, i_idx: np.ndarray, N: int) -> np.ndarray:
    """Keep edges (in the given order) that join two different trees (Kruskal, union–find)."""
    parent = list(range(N + int(i_idx.max(initial=-1)) + 1))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    keep = np.zeros(len(n_idx), dtype=bool)
    for e, (n, i) in enumerate(zip(n_idx.tolist(), i_idx.tolist(), strict=True)):
        a, b = find(n), find(N + i)
        if a != b:
            parent[a] = b
            keep[e] = True
    return keep


def _tree_path(
    n_idx: np.ndarray, i_idx: np.ndarray, N: int, n_from: int, i_to: int
) -> np.ndarray | None:
    """Edge positions on the forest path from tenant ``n_from`` to node ``i_to`` (None if none)."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for e, (n, i) in enumerate(zip(n_idx.tolist(), i_idx.tolist(), strict=True)):
        adj.setdefault(n, []).append((N + i, e))
        adj.setdefault(N + i, []).append((n, e))
    target = N + i_to
    back: dict[int, tuple[int, int]] = {n_from: (-1, -1)}
    frontier = [n_from]
    while frontier and target not in back:
        nxt = []
        for v in frontier:
            for w, e in adj.get(v, []):
                if w not in back:
                    back[w] = (v, e)
                    nxt.append(w)
        frontier = nxt
    if target not in back:
        return None
    edges = []
    v = target
    while v != n_from:
        v, e = back[v]
        edges.append(e)
    return np.array(edges[::-1], dtype=np.int64)


def _solve_support(
    problem: FairnessProblem,
    gamma: FloatArray,
    active: BoolArray,
    capped: BoolArray,
    n_idx: np.ndarray,
    i_idx: np.ndarray,
) -> FloatArray | None:
    """Solve the linear TDM conditions on the forest ``(n_idx, i_idx)``; returns ``y`` per edge."""
    N, K, _ = problem.shape
    caps = problem.caps
    E = len(n_idx)
    nodes = np.unique(i_idx)
    tenants = np.unique(n_idx)
    # A node on the support must be fully used, which needs an open eligible tenant.
    open_eligible = ((gamma[:, nodes] > 0) & (active & ~capped)[:, None]).any(axis=0)
    if not open_eligible.all():
        return None
    node_col = np.full(K, -1)
    node_col[nodes] = np.arange(len(nodes))
    ten_col = np.full(N, -1)
    ten_col[tenants] = len(nodes) + np.arange(len(tenants))
    y_col = len(nodes) + len(tenants) + np.arange(E)
    size = len(nodes) + len(tenants) + E

    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs = np.zeros(size)
    row = 0
    g_e = gamma[n_idx, i_idx]

    # Edges of open tenants: x_n − φ_n γ_{n,i} ℓ_i = 0.
    op = ~capped[n_idx]
    m = int(op.sum())
    r = row + np.arange(m)
    rows += [r, r]
    cols += [ten_col[n_idx[op]], node_col[i_idx[op]]]
    vals += [np.ones(m), -problem.phi[n_idx[op]] * g_e[op]]
    row += m

    # Capped tenants: x_n = D_n, and γ ℓ equal along their edges.
    for n in np.unique(n_idx[~op]).tolist():
        rows.append(np.array([row]))
        cols.append(np.array([ten_col[n]]))
        vals.append(np.ones(1))
        rhs[row] = caps[n]
        row += 1
        edges = np.flatnonzero(n_idx == n)
        first = edges[0]
        for e in edges[1:].tolist():
            rows.append(np.array([row, row]))
            cols.append(np.array([node_col[i_idx[first]], node_col[i_idx[e]]]))
            vals.append(np.array([g_e[first], -g_e[e]]))
            row += 1

    # Nodes: Σ_n y_{n,i} = 1.
    rows.append(row + node_col[i_idx])
    cols.append(y_col)
    vals.append(np.ones(E))
    rhs[row : row + len(nodes)] = 1.0
    row += len(nodes)

    # Tenants: Σ_i γ y − x_n = 0.
    rows += [row + (ten_col[n_idx] - len(nodes)), row + np.arange(len(tenants))]
    cols += [y_col, ten_col[tenants]]
    vals += [g_e, -np.ones(len(tenants))]
    row += len(tenants)
    if row != size:
        return None

    A = sp.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size)
    )
    with warnings.catch_warnings():
        # A singular guess is an expected outcome here, not an error: the caller sweeps on.
        warnings.simplefilter("ignore", spla.MatrixRankWarning)
        try:
            sol = spla.spsolve(A, rhs)
        except RuntimeError:
            return None
    if not np.isfinite(sol).all() or (sol[: len(nodes)] <= 0).any():
        return None
    ys: FloatArray = sol[y_col]
    return ys


def tdm_crossover(
    problem: FairnessProblem,
    gamma: FloatArray,
    active: BoolArray,
    tasks: FloatArray,
    *,
    share_floor: float = 1e-7,
    cap_rtol: float = 1e-7,
    max_pivots: int = 60,
    max_cycle: int = 8,
) -> FloatArray | None:
    """Exact TDM allocation near ``tasks``; ``None`` if no consistent support was found.

    Starts from the support of ``tasks`` (a maximum-weight spanning forest of it, heaviest time
    shares first), then pivots: an edge whose solved time share is negative leaves; otherwise a
    pair whose VDS is below its node's level (the tenant wants in) enters. Each pivot is one
    sparse solve; the caller verifies the final answer with the certificate.
    """
    N, K, _ = problem.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(gamma > 0, tasks / gamma, 0.0)
    y[~active] = 0.0
    totals = tasks.sum(axis=1)
    caps = problem.caps
    capped = np.isfinite(caps) & (totals >= caps * (1.0 - cap_rtol)) & active
    eligible = (gamma > 0) & active[:, None]

    n_idx, i_idx = np.nonzero(y > share_floor)
    if len(n_idx) == 0:
        return None
    order = np.argsort(-y[n_idx, i_idx], kind="stable")
    n_idx, i_idx = n_idx[order], i_idx[order]
    keep = _forest(n_idx, i_idx, N)
    n_idx, i_idx = n_idx[keep], i_idx[keep]
    y0 = y[n_idx, i_idx]  # current iterate on the support (all >= 0)
    for _ in range(max_pivots):
        y1 = _solve_support(problem, gamma, active, capped, n_idx, i_idx)
        if y1 is None:
            return None
        if (y1 < -1e-12).any():
            # Ratio test (as in Lawson–Hanson): walk from y0 towards y1 until the first time
            # share reaches 0, and let that edge leave.
            neg = y1 < -1e-12
            t = np.full(len(y1), np.inf)
            t[neg] = y0[neg] / (y0[neg] - y1[neg])
            out_e = int(np.argmin(t))
            y0 = np.maximum(y0 + t[out_e] * (y1 - y0), 0.0)
            keep = np.ones(len(n_idx), dtype=bool)
            keep[out_e] = False
            n_idx, i_idx, y0 = n_idx[keep], i_idx[keep], y0[keep]
            continue
        y0 = np.maximum(y1, 0.0)
        out = np.zeros((N, K))
        out[n_idx, i_idx] = y0 * gamma[n_idx, i_idx]
        # Entering pair: an open tenant whose VDS on an eligible node is below that node's level.
        x = out.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(eligible, x[:, None] / (problem.phi[:, None] * gamma), np.inf)
        open_ = active & ~(np.isfinite(caps) & (x >= caps * (1.0 - cap_rtol)))
        served = out > 0
        level = np.min(np.where(served & open_[:, None], s, np.inf), axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = np.where(eligible & open_[:, None] & ~served, 1.0 - s / level[None, :], 0.0)
        gap = np.nan_to_num(gap, nan=0.0, posinf=0.0, neginf=0.0)
        n_in, i_in = np.unravel_index(int(np.argmax(gap)), gap.shape)
        if gap[n_in, i_in] <= 1e-12:
            return out
        # The entering edge joins the forest. If it closes a cycle, one cycle edge must leave:
        # try each (shortest cycles first is the common case) and keep the first choice whose
        # solve stays non-negative, else the one with the mildest negative share.
        path = _tree_path(n_idx, i_idx, N, int(n_in), int(i_in))
        n_idx = np.concatenate([[n_in], n_idx])
        i_idx = np.concatenate([[i_in], i_idx])
        y0 = np.concatenate([[0.0], y0])
        if path is None:
            continue
        best: tuple[float, int] | None = None
        for e in (path[:max_cycle] + 1).tolist():
            keep = np.ones(len(n_idx), dtype=bool)
            keep[e] = False
            trial = _solve_support(problem, gamma, active, capped, n_idx[keep], i_idx[keep])
            if trial is None:
                continue
            worst = float(trial.min())
            if best is None or worst > best[0]:
                best = (worst, e)
            if worst >= -1e-12:
                break
        if best is None:
            return None
        keep = np.ones(len(n_idx), dtype=bool)
        keep[best[1]] = False
        n_idx, i_idx, y0 = n_idx[keep], i_idx[keep], y0[keep]
    return None
    weight = y[n_idx, i_idx]
    for _ in range(max_pivots):
        order = np.argsort(-weight, kind="stable")
        n_idx, i_idx, weight = n_idx[order], i_idx[order], weight[order]
        keep = _forest(n_idx, i_idx, N)
        n_idx, i_idx, weight = n_idx[keep], i_idx[keep], weight[keep]
        ys = _solve_support(problem, gamma, active, capped, n_idx, i_idx)
        if ys is None:
            return None
        if (ys < -1e-12).any():
            drop = int(np.argmin(ys))
            keep = np.ones(len(n_idx), dtype=bool)
            keep[drop] = False
            n_idx, i_idx, weight = n_idx[keep], i_idx[keep], np.maximum(ys[keep], 0.0)
            continue
        out = np.zeros((N, K))
        out[n_idx, i_idx] = np.maximum(ys, 0.0) * gamma[n_idx, i_idx]
        # Entering pair: an open tenant whose VDS on an eligible node is below that node's level.
        x = out.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(eligible, x[:, None] / (problem.phi[:, None] * gamma), np.inf)
        open_ = active & ~(np.isfinite(caps) & (x >= caps * (1.0 - cap_rtol)))
        served = out > 0
        level = np.min(np.where(served & open_[:, None], s, np.inf), axis=0)
        if not np.isfinite(level[served.any(axis=0)]).all():
            return out
        gap = np.where(eligible & open_[:, None] & ~served, 1.0 - s / level[None, :], 0.0)
        gap = np.nan_to_num(gap, nan=0.0, posinf=0.0, neginf=0.0)
        n_in, i_in = np.unravel_index(int(np.argmax(gap)), gap.shape)
        if gap[n_in, i_in] <= 1e-12:
            return out
        # The entering edge goes first so the forest keeps it; the cycle it closes loses its
        # lightest edge.
        n_idx = np.concatenate([[n_in], n_idx])
        i_idx = np.concatenate([[i_in], i_idx])
        weight = np.concatenate([[np.inf], np.maximum(ys, 0.0)])
    return None

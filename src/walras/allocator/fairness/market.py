"""Fast exact TDM: PS-DSF as a linear Fisher market, solved through its prices.

Under TDM (no binding caps) PS-DSF is the Eisenberg–Gale program (docs/algorithms.md#ps-dsf)

    max Σ_n φ_n log x_n   s.t.  x_n = Σ_i γ_{n,i} y_{n,i},  Σ_n y_{n,i} ≤ 1,  y ≥ 0,

a linear Fisher market: tenants are buyers with budgets ``φ_n``, nodes are goods with supply 1,
``γ_{n,i}`` the values. Its equilibrium prices ``λ_i`` are unique and the node's VDS level is
``1/λ_i``. They minimise the convex dual (``α_n`` = best bang per buck of tenant ``n``)

    f(λ) = Σ_i λ_i + Σ_n φ_n log max_i γ_{n,i}/λ_i .

Steps (each checked, never trusted):

1. **Smoothed dual, Newton.** With ``p = log λ`` and the max replaced by a log-sum-exp at
   temperature ``μ``: ``f_μ(p) = Σ e^{p_i} + Σ_n φ_n μ log Σ_i exp((log γ_{n,i} − p_i)/μ)``.
   Its gradient is ``e^{p_i} − Σ_n φ_n σ_{n,i}`` (``σ_n`` the softmax: tenant ``n`` spreads its
   budget over its best nodes), its Hessian ``diag(e^p) + (1/μ)(diag(Σ_n φ_n σ_n) − Σ_n φ_n
   σ_n σ_nᵀ)`` (``K × K``, dense, one BLAS product). Damped Newton steps, annealing ``μ`` down
   by a constant factor per stage, give prices within ``O(μ)`` (relative) of equilibrium.
2. **Support and exact prices.** Edges within ``τ = TIGHT_MUS·μ`` of a tenant's best bang per
   buck are candidates. On a tight edge ``log λ_i + log α_n = log γ_{n,i}`` exactly; a minimum
   spanning forest of the candidates (weighted by their slack, so that a near tie which is not
   a tie is the edge left out of a cycle) fixes every log price up to one shift per tree, and
   money conservation ``Σ_{i∈T} λ_i = Σ_{n∈T} φ_n`` (all goods sold, all budgets spent inside
   the tree) fixes the shift. The guess is rejected (``μ`` shrinks, step 1 goes on) if any edge
   then beats its tenant's best tight edge by more than ``CYCLE_TOL``.
3. **Spending (who gets which node).** Find spending ``e ≥ 0`` on the exactly tight edges with
   row sums ``φ_n`` and column sums ``λ_i``: a transport problem, solved by Sinkhorn matrix
   scaling from uniform weights. That is the maximum-entropy split, unique and symmetric:
   tenants tied on several nodes spread over them in proportion (for the paper's table exactly
   the paper's rows). Ending each round on the node side makes every node exactly full. If a
   tight edge must carry nothing in every transport (the paper's user 4 on class C), Sinkhorn
   converges only sublinearly; then one feasible flow (HiGHS LP) and the strong components of
   its residual graph name the edges that can carry flow, and Sinkhorn runs on those. If the
   transport is infeasible the prices were wrong and ``μ`` shrinks.
   Finally ``y_{n,i} = e_{n,i}/λ_i`` and ``x_{n,i} = γ_{n,i} y_{n,i}``.

Cost: each Newton step is one pass over the eligible pairs plus a ``K × K`` Cholesky; the
Hessian's ``Σ φ σσᵀ`` is a dense symmetric rank-N update while the softmax is spread out and a
sparse product once it concentrates. Typical solves need 20–30 Newton steps in total. Dense
LAPACK with a threaded BLAS on an oversubscribed machine spins; single-threaded BLAS
(``OPENBLAS_NUM_THREADS=1``) measured 10–30× faster on the shared 2-core box.

The caller (``fairness.solver``) checks the answer with Theorem 2 (``fairness.certificates``)
and falls back to Gauss–Seidel sweeps (warm-started from it) when it fails. **Caps** are not
modelled in the dual: the uncapped market is solved, and if any tenant's total exceeds its cap
``D_n`` this module returns ``None`` and the sweeps (which handle caps exactly) run instead.

Called by ``fairness.solver.solve`` under TDM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.linalg.blas as blas
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.optimize import linprog
from scipy.sparse.csgraph import (
    breadth_first_order,
    connected_components,
    minimum_spanning_tree,
)

from walras.allocator.fairness.problem import BoolArray, FairnessProblem, FloatArray

# Annealing: start temperature (log units), factor per stage, lowest temperature tried.
MU_START = 1.0
MU_FACTOR = 0.1
MU_MIN = 1e-10
# Tight edge: within this many temperatures of the tenant's best bang per buck (log units).
TIGHT_MUS = 10.0
# A cycle of tight edges closes if its log-price residual is below this (exact ties close to
# rounding; a near tie that is not a tie fails it and the temperature goes down).
CYCLE_TOL = 1e-9
# Relative gradient at which an early (warm) stage hands over to the next temperature.
STAGE_GTOL = 0.2
# Try the exact prices once the temperature is below this (cheap: one graph walk).
TRY_EXACT_BELOW = 2e-2
# Sparse product cost per multiply-add relative to a dense BLAS one (measured, roughly).
SPARSE_COST = 100.0
# Softmax weights below this are left out of the Hessian (never out of the gradient).
SIGMA_FLOOR = 1e-12
# Above this many nodes Newton steps use CG instead of a dense Cholesky.
DENSE_MAX_K = 300
CG_RTOL = 1e-3
CG_MAXITER = 300
# Newton at temperature μ ignores edges more than PRUNE_MUS·μ/MU_FACTOR below the tenant's best
# at the start of the stage (the previous temperature's answer).
PRUNE_MUS = 10.0
SINKHORN_MAX = 3000
# Rounds before deciding the scaling is slow (an edge forced to zero) and pruning edges.
SINKHORN_QUICK = 300
# Flow below this fraction of the largest margin counts as zero in the residual graph.
FLOW_FLOOR = 1e-9
# The flow LP is a repair for a few forced-zero edges; on a large support (usually wrong prices)
# it is skipped or cut short, and the temperature goes down instead.
FLOW_MAX_EDGES = 50_000
FLOW_TIME_LIMIT_S = 1.0
# Largest relative budget mismatch accepted from Sinkhorn (Theorem 2 is checked after).
SINKHORN_ACCEPT = 1e-10
SINKHORN_TOL = 1e-12


@dataclass(frozen=True)
class MarketResult:
    """Allocation found through the market; ``iterations`` counts Newton steps."""

    tasks: FloatArray
    prices: FloatArray
    iterations: int
    sinkhorn: int


@dataclass(frozen=True)
class _Edges:
    """Eligible (tenant, node) pairs, tenant-major, with ``log γ``: the smoothed dual's data."""

    rows: npt.NDArray[np.int64]
    cols: npt.NDArray[np.int64]
    logg: FloatArray
    starts: npt.NDArray[np.int64]  # first entry of each tenant (every tenant has one)
    shape: tuple[int, int]
    # Entries ordered by node, and each node's first one (full edge set only; empty if pruned).
    by_col: npt.NDArray[np.int64]
    col_starts: npt.NDArray[np.int64]


def _value(
    p: FloatArray, edges: _Edges, phi: FloatArray, mu: float
) -> tuple[float, FloatArray, FloatArray]:
    """``f_μ(p)``, with the per-edge exponentials and per-tenant sums :func:`_softmax` needs."""
    z = (edges.logg - p[edges.cols]) / mu
    zmax = np.maximum.reduceat(z, edges.starts)
    ez = np.exp(z - zmax[edges.rows])
    s = np.add.reduceat(ez, edges.starts)
    with np.errstate(over="ignore"):
        # A wild trial step may overflow; its value is then +inf and the line search backs off.
        value = float(np.exp(p).sum() + np.dot(phi, mu * (zmax + np.log(s))))
    return value, ez, s


def _softmax(
    ez: FloatArray, s: FloatArray, edges: _Edges, phi: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The softmax ``σ`` per edge and the spending per node ``Σ_n φ_n σ_{n,i}``."""
    sigma = ez / s[edges.rows]
    spend = np.bincount(edges.cols, weights=phi[edges.rows] * sigma, minlength=edges.shape[1])
    return sigma, spend.astype(np.float64, copy=False)


def _smoothed(
    p: FloatArray, edges: _Edges, phi: FloatArray, mu: float
) -> tuple[float, FloatArray, FloatArray]:
    """``f_μ(p)``, the softmax ``σ`` per edge, and the spending per node ``Σ_n φ_n σ_{n,i}``."""
    value, ez, s = _value(p, edges, phi, mu)
    sigma, spend = _softmax(ez, s, edges, phi)
    return value, sigma, spend


def _hessian(
    sigma: FloatArray, edges: _Edges, phi: FloatArray, lam: FloatArray, spend: FloatArray, mu: float
) -> FloatArray:
    """``diag(λ) + (1/μ)(diag(spend) − Σ_n φ_n σ_n σ_nᵀ)`` as a dense ``K × K`` matrix."""
    N, K = edges.shape
    w = sigma * np.sqrt(phi)[edges.rows]
    # σ concentrates on few nodes per tenant once μ is small, and then the outer products are
    # cheaper sparse (entries below SIGMA_FLOOR barely change the step, and the line search
    # guards it); while σ is spread out one dense BLAS product is faster.
    keep = sigma > SIGMA_FLOOR
    per_row = np.bincount(edges.rows[keep], minlength=N).astype(np.float64)
    if float(np.dot(per_row, per_row)) * SPARSE_COST < N * K * K:
        Ws = sp.csr_matrix((w[keep], (edges.rows[keep], edges.cols[keep])), shape=(N, K))
        H = (Ws.T @ Ws).toarray()
    else:
        Wd = np.zeros((N, K), order="F")
        Wd[edges.rows, edges.cols] = w
        # Symmetric rank-N update (half the flops of a full product); fills the upper triangle.
        H = blas.dsyrk(1.0, Wd, trans=1)
        H = np.triu(H) + np.triu(H, 1).T
    out: FloatArray = np.asarray(H, dtype=np.float64) * (-1.0 / mu)
    # The diagonal directly as λ_i + (1/μ) Σ_n φ_n σ(1 − σ): spend/μ − Σ φσ²/μ cancels badly
    # when μ is small and a tenant sits on one node (σ = 1).
    out[np.diag_indices_from(out)] = _diagonal(sigma, edges, phi, lam, mu)
    return out


def _diagonal(
    sigma: FloatArray, edges: _Edges, phi: FloatArray, lam: FloatArray, mu: float
) -> FloatArray:
    """Hessian diagonal ``λ_i + (1/μ) Σ_n φ_n σ_{n,i}(1 − σ_{n,i})`` without cancellation."""
    lap = np.bincount(
        edges.cols, weights=phi[edges.rows] * sigma * (1.0 - sigma), minlength=edges.shape[1]
    )
    out: FloatArray = lam + lap / mu
    return out


def _relevant(edges: _Edges, p: FloatArray, slack_max: float) -> _Edges:
    """Edges within ``slack_max`` (log units) of their tenant's best bang per buck at ``p``.

    An edge further than ``PRUNE_MUS`` temperatures below its tenant's best gets a softmax
    weight below ``e^-PRUNE_MUS``, and prices move by ``O(μ)`` during a stage, so it cannot
    matter; it is reconsidered at every stage, from all edges.
    """
    bpb = edges.logg - p[edges.cols]
    best = np.maximum.reduceat(bpb, edges.starts)
    slack = best[edges.rows] - bpb
    keep = slack <= slack_max
    # Every node keeps its least-slack edges, so that no price loses all its buyers.
    node_min = np.minimum.reduceat(slack[edges.by_col], edges.col_starts)
    keep |= slack <= node_min[edges.cols]
    if keep.all():
        return edges
    rows = edges.rows[keep]
    starts = np.searchsorted(rows, np.arange(edges.shape[0]))
    none = np.zeros(0, dtype=np.int64)
    return _Edges(rows, edges.cols[keep], edges.logg[keep], starts, edges.shape, none, none)


def _cg_step(
    sigma: FloatArray,
    edges: _Edges,
    phi: FloatArray,
    lam: FloatArray,
    spend: FloatArray,
    mu: float,
    grad: FloatArray,
) -> FloatArray:
    """Inexact Newton step by Jacobi-preconditioned CG with Hessian-vector products.

    For many nodes a dense ``K × K`` factorisation costs more than the whole rest; CG started
    at 0 returns a descent direction after any number of iterations, and the line search
    takes care of the inexactness.
    """
    N, K = edges.shape
    keep = sigma > SIGMA_FLOOR
    rows, cols, sig = edges.rows[keep], edges.cols[keep], sigma[keep]
    S = sp.csr_matrix((sig, (rows, cols)), shape=(N, K))
    weight = phi[rows] * sig
    # Jacobi preconditioner: the diagonal of H.
    hdiag = _diagonal(sigma, edges, phi, lam, mu)

    St = S.T.tocsr()
    phi_r = phi
    spend_k = np.bincount(cols, weights=weight, minlength=K)

    def hv(v: FloatArray) -> FloatArray:
        # Σ_n φ_n (σ_n ∘ v − σ_n σ_nᵀ v); its rounding error is ~eps·spend/μ·|v|, harmless
        # in a product (unlike in a factorised diagonal).
        out: FloatArray = lam * v + (spend_k * v - St @ (phi_r * (S @ v))) / mu
        return out

    H = spla.LinearOperator((K, K), matvec=hv, dtype=np.float64)
    M = spla.LinearOperator((K, K), matvec=lambda v: v / hdiag, dtype=np.float64)
    step, _ = spla.cg(H, -grad, rtol=CG_RTOL, maxiter=CG_MAXITER, M=M)
    out: FloatArray = np.asarray(step, dtype=np.float64)
    return out


def _newton_stage(
    p: FloatArray, edges: _Edges, phi: FloatArray, mu: float, gtol: float, max_steps: int = 30
) -> tuple[FloatArray, int]:
    """Minimise ``f_μ`` from ``p`` to a small relative gradient; returns ``(p, steps)``."""
    value, sigma, spend = _smoothed(p, edges, phi, mu)
    steps = 0
    for _ in range(max_steps):
        lam = np.exp(p)
        grad = lam - spend
        if np.max(np.abs(grad) / lam) < gtol:
            break
        if edges.shape[1] > DENSE_MAX_K:
            step = _cg_step(sigma, edges, phi, lam, spend, mu, grad)
        else:
            H = _hessian(sigma, edges, phi, lam, spend, mu)
            try:
                step = -sla.cho_solve(
                    sla.cho_factor(H, check_finite=False), grad, check_finite=False
                )
            except (sla.LinAlgError, ValueError):
                step = -grad / np.maximum(np.diag(H), lam)
        t = 1.0
        dec = float(grad @ step)
        while t > 1e-8:
            cand = p + t * step
            v2, ez, sums = _value(cand, edges, phi, mu)  # softmax only once accepted
            if v2 <= value + 1e-4 * t * dec:
                p, value = cand, v2
                sigma, spend = _softmax(ez, sums, edges, phi)
                break
            t *= 0.5
        else:
            break
        steps += 1
    return p, steps


def _exact_prices(
    p: FloatArray, edges: _Edges, L: FloatArray, phi: FloatArray, tau: float
) -> tuple[FloatArray, sp.csr_matrix] | None:
    """Exact prices from the near-tight edges at ``p``, and the exactly tight edges.

    A minimum spanning forest of the edges within ``tau`` of their tenant's best (weighted by
    that slack, so near ties that are not ties are the ones left out of cycles) fixes every
    log price up to one shift per tree; money conservation fixes the shift. ``None`` if some
    edge then beats its tenant's best tight edge (the guess was wrong).
    """
    N, K = edges.shape
    bpb = edges.logg - p[edges.cols]
    best = np.maximum.reduceat(bpb, edges.starts)
    slack = best[edges.rows] - bpb
    near = slack <= tau
    n_idx, i_idx = edges.rows[near], edges.cols[near]
    # Bipartite graph: vertices 0..K-1 nodes, K..K+N-1 tenants, K+N a virtual root that joins
    # one vertex of every tree (so one breadth-first walk reaches all of them).
    G = sp.coo_matrix((1.0 + slack[near], (i_idx, K + n_idx)), shape=(K + N, K + N)).tocsr()
    forest = minimum_spanning_tree(G).tocoo()  # undirected: one triangle suffices
    fr, fc = forest.row, forest.col
    ncomp, label = connected_components(forest, directed=False)
    reps = np.unique(label, return_index=True)[1]
    root = K + N
    T = sp.coo_matrix(
        (
            np.ones(len(fr) + ncomp),
            (np.concatenate([fr, np.full(ncomp, root)]), np.concatenate([fc, reps])),
        ),
        shape=(root + 1, root + 1),
    ).tocsr()
    order, pred = breadth_first_order(T, root, directed=False, return_predecessors=True)
    value = np.zeros(root + 1)  # node: log λ_i; tenant: log α_n = log γ_{n,i} − log λ_i
    ref = np.concatenate([p, best])
    for v in order[1:].tolist():
        u = int(pred[v])
        if u == root:
            value[v] = ref[v]
        else:
            edge = L[v - K, u] if v >= K else L[u - K, v]
            value[v] = edge - value[u]
    logp = value[:K]
    loga = value[K : K + N]
    # Scale each tree so that its goods cost exactly its budgets.
    comp_n = label[K:]
    comp_i = label[:K]
    budget = np.bincount(comp_n, weights=phi, minlength=ncomp)
    top = np.full(ncomp, -np.inf)
    np.maximum.at(top, comp_i, logp)  # reference for stable exponentials
    cost = np.bincount(comp_i, weights=np.exp(logp - top[comp_i]), minlength=ncomp)
    if not (budget > 0).all() or not (cost > 0).all():
        return None
    shift = np.log(budget) - np.log(cost) - top
    logp = logp + shift[comp_i]
    loga = loga - shift[comp_n]
    # Exactly tight edges at these prices; none may beat its tenant's best.
    gap = edges.logg - logp[edges.cols] - loga[edges.rows]
    if float(gap.max()) > CYCLE_TOL:
        return None
    on = gap >= -CYCLE_TOL
    W = sp.csr_matrix((np.ones(int(on.sum())), (edges.rows[on], edges.cols[on])), shape=(N, K))
    return logp, W


def _flow_edges(W: sp.csr_matrix, row: FloatArray, col: FloatArray) -> sp.csr_matrix | None:
    """Edges of ``W`` that carry flow in some transport with these margins; ``None`` if none.

    One feasible flow ``f`` (HiGHS) and its residual graph (tenant → node on every edge, node →
    tenant where ``f > 0``) decide it: an edge can carry flow iff its ends are strongly
    connected. Sinkhorn converges only sublinearly when an edge is forced to zero, and
    linearly once such edges are gone.
    """
    N, K = W.shape
    Wc = W.tocoo()
    rows, cols = Wc.row, Wc.col
    E = len(rows)
    A = sp.vstack(
        [
            sp.csr_matrix((np.ones(E), (rows, np.arange(E))), shape=(N, E)),
            sp.csr_matrix((np.ones(E), (cols, np.arange(E))), shape=(K, E)),
        ]
    ).tocsr()
    res = linprog(
        np.zeros(E),
        A_eq=A,
        b_eq=np.concatenate([row, col]),
        bounds=(0, None),
        method="highs",
        options={"time_limit": FLOW_TIME_LIMIT_S},
    )
    if res.status != 0:
        return None
    flow = res.x > FLOW_FLOOR * float(max(row.max(), col.max()))
    src = np.concatenate([K + rows, cols[flow]])
    dst = np.concatenate([cols, K + rows[flow]])
    R = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(K + N, K + N))
    _, label = connected_components(R, directed=True, connection="strong")
    keep = label[K + rows] == label[cols]
    return sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=(N, K))


def _sinkhorn(
    W: sp.csr_matrix, row: FloatArray, col: FloatArray, limit: int
) -> tuple[sp.csr_matrix, int, float]:
    """Scale ``W`` to row sums ``row`` and column sums ``col``; returns (E, rounds, row error)."""
    Wt = W.T.tocsr()
    u = np.ones(W.shape[0])
    v = np.ones(W.shape[1])
    err = np.inf
    rounds = 0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        # An infeasible support drives some scalings to 0 or inf: that is a "no", not an error.
        while rounds < limit and err >= SINKHORN_TOL:
            rounds += 1
            u = row / (W @ v)
            v = col / (Wt @ u)  # ends on the node side: every node exactly full
            err = float(np.max(np.abs(u * (W @ v) - row) / row))
            if not np.isfinite(err):
                err = np.inf
                break
    if not np.isfinite(err):
        return sp.csr_matrix(W.shape), rounds, err
    E = sp.diags(u) @ W @ sp.diags(v)
    return sp.csr_matrix(E), rounds, err


def tdm_market(
    problem: FairnessProblem, gamma: FloatArray, active: BoolArray
) -> MarketResult | None:
    """TDM PS-DSF through equilibrium prices; ``None`` if a cap binds or no support was found."""
    N, K, _ = problem.shape
    tasks = np.zeros((N, K))
    elig = (gamma > 0) & active[:, None]
    ten = np.flatnonzero(elig.any(axis=1))
    nodes = np.flatnonzero(elig.any(axis=0))
    if len(ten) == 0:
        return MarketResult(tasks, np.zeros(K), 0, 0)
    g = gamma[np.ix_(ten, nodes)]
    e = elig[np.ix_(ten, nodes)]
    phi = problem.phi[ten]
    with np.errstate(divide="ignore"):
        L = np.where(e, np.log(np.where(e, g, 1.0)), -np.inf)
    rows, cols = np.nonzero(e)
    starts = np.searchsorted(rows, np.arange(len(ten)))
    by_col = np.argsort(cols, kind="stable")
    col_starts = np.searchsorted(cols[by_col], np.arange(len(nodes)))
    edges = _Edges(
        rows, cols, np.log(g[rows, cols]), starts, (len(ten), len(nodes)), by_col, col_starts
    )
    # Start: every tenant spreads its budget evenly over its eligible nodes.
    spread = (e / e.sum(axis=1, keepdims=True)) * phi[:, None]
    p = np.log(spread.sum(axis=0))
    mu = MU_START
    iterations = 0
    found = None
    while mu >= MU_MIN:
        # Newton works on the edges that can still matter at this temperature; the exact-price
        # check below always looks at every eligible edge.
        p, steps = _newton_stage(
            p, _relevant(edges, p, PRUNE_MUS * mu / MU_FACTOR), phi, mu, STAGE_GTOL
        )
        iterations += steps
        if mu <= TRY_EXACT_BELOW:
            found = _exact_prices(p, edges, L, phi, TIGHT_MUS * mu)
            if found is not None:
                logp, W = found
                lam = np.exp(logp)
                E, rounds, err = _sinkhorn(W, phi, lam, SINKHORN_QUICK)
                if err > SINKHORN_ACCEPT:
                    # Slow scaling means some tight edge must carry nothing (or the prices are
                    # off): keep only the edges that can carry flow, then scale again.
                    W2 = _flow_edges(W, phi, lam) if W.nnz <= FLOW_MAX_EDGES else None
                    if W2 is not None:
                        E, more, err = _sinkhorn(W2, phi, lam, SINKHORN_MAX)
                        rounds += more
                if err <= SINKHORN_ACCEPT:
                    break
                found = None  # spending does not fit the support: prices not yet right
        mu *= MU_FACTOR
    if found is None:
        return None
    E = E.tocoo()
    y = E.data / lam[E.col]
    sub = np.zeros((len(ten), len(nodes)))
    sub[E.row, E.col] = y * g[E.row, E.col]
    tasks[np.ix_(ten, nodes)] = sub
    caps = problem.caps
    if (tasks.sum(axis=1) > caps).any():
        return None
    prices = np.zeros(K)
    prices[nodes] = lam
    return MarketResult(tasks, prices, iterations, rounds)

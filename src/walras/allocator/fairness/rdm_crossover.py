"""Exact finish for RDM: fix the bottleneck structure the sweeps found, solve what is left.

Gauss–Seidel sweeps find each node's bottleneck structure (which resources saturate, which
tenants each freezes) long before the numbers settle: at K = N = 1,000 they crawl (certificate
5.8e-3 after 22 sweeps) because many nodes are alike, so most tenants are tied on many nodes and
the sweeps keep trading time between them. Once the structure is known, Theorem 1 is linear.

With ``L_{i,r}`` the level at which resource ``r`` saturates on node ``i`` and
``ℓ_{n,i} = min_{r saturated, d_{n,r} > 0} L_{i,r}`` (reached by resource ``r(n,i)``), an
uncapped allocation is RDM PS-DSF if

- every eligible pair has ``s_{n,i} = x_n/(φ_n γ_{n,i}) ≥ ℓ_{n,i}``, with equality where
  ``x_{n,i} > 0`` (then ``r(n,i)`` is a bottleneck: no tenant served on ``i`` that demands it
  has a larger VDS, since each has VDS ``ℓ_{m,i} ≤ L_{i,r}``);
- every level ``L_{i,r}`` that is some pair's ``r(n,i)`` belongs to a saturated resource.

Steps:

1. **Structure.** Run the progressive fill (``waterfill.rdm_fill_levels``) on every node against
   the current tasks elsewhere: it gives ``L̃_{i,r}`` and ``r(n,i)``. A pair is *tight* (may be
   served) when its VDS is at most ``tight`` (relative) above ``ℓ̃_{n,i}``; a pair below its
   level must be tight.
2. **Levels.** On a tight pair ``log x_n − log L_{i,r(n,i)} = log(φ_n γ_{n,i})``. A minimum
   spanning forest of the tight pairs (weighted by their gap, so a near tie that is not a tie is
   the edge left out) fixes every ``log x_n`` and ``log L`` up to one shift per tree. A tight
   pair off the forest whose VDS then comes out *above* its level is not tight after all (it
   stays empty); one *below* its level must be tight, so it joins the forest first and the
   forest is rebuilt (``REPAIR_ROUNDS`` times at most, then ``None``).
3. **Split.** Each tree's shift is a scale ``κ_T`` (``x_n = κ_T x̂_n``, ``L = κ_T L̂``). Find
   ``x_{n,i} ≥ 0`` on the tight pairs with ``Σ_i x_{n,i} = κ_T x̂_n``, every bottleneck resource
   exactly full and every other resource within capacity:

   - one bottleneck resource per node (the usual case): matrix scaling of the sweeps' own
     split (``_scale``; positive throughout, a few to a hundred cheap rounds);
   - otherwise, or when scaling fails on a small instance: a weighted least-norm correction
     (``_project``, dense Cholesky of an ``(N + bottlenecks)``-square matrix; a pair pushed
     below 0 leaves, a resource pushed over capacity is held at it), then as a last resort an
     LP (HiGHS, zero objective, ``LP_MAX_PAIRS`` at most) that also carries, between trees,
     ``s ≥ ℓ`` on untight pairs and ``L_{i,r(n,i)} ≤ L_{i,r'}`` for the other saturated
     resources a tight pair demands (inside a tree these are numbers, checked before).

The guess is never trusted: the caller keeps it only if Theorem 1's certificate confirms it,
and otherwise sweeps on. **Caps:** a tenant at its cap needs no bottleneck (Theorem 1 asks it
of open tenants only); it keeps its total ``D_n`` and the nodes the sweeps put it on, the fill
of step 1 treats its use as fixed, and only the scaling split handles it (a node with two
bottleneck resources and a capped tenant returns ``None``).

Worked example: two identical nodes ``c = (4,)``, two tenants ``d = (1,), (2,)``, ``φ = 1``:
``γ = (4, 2)`` on both. All four pairs are tight at one level ``L`` (``x = (4L, 2L)``), one
tree; both nodes full gives ``4L + 2·2L = 8``, so ``L = 1`` and ``x = (4, 2)``, split so that
each node holds 4 units of the resource.

Called by ``fairness.solver`` under RDM.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.optimize import linprog
from scipy.sparse.csgraph import breadth_first_order, connected_components, minimum_spanning_tree

from walras.allocator.fairness.problem import BoolArray, FairnessProblem, FloatArray
from walras.allocator.fairness.waterfill import rdm_fill_levels

# A pair whose VDS is at most this (relative) above its level may be served.
TIGHT_RTOL = 1e-3
# Tight pairs off the spanning forest must satisfy their level equation to this (log units).
CYCLE_RTOL = 1e-9
# HiGHS feasibility tolerance (the certificate then checks the answer).
LP_TOL = 1e-10
# A tenant within this relative distance of its cap counts as capped.
CAP_RTOL = 1e-7
# Rebuilds of the spanning forest with pairs found below their level forced in.
REPAIR_ROUNDS = 6
# Matrix scaling (step 3's first try): rounds and the relative tenant mismatch accepted.
SCALE_MAX = 500
SCALE_TOL = 1e-13
# Start of an empty tight pair, relative to its node's mean pair.
SCALE_SEED = 1e-6
# Times a node's bottleneck may move to a resource the scaled split overflows.
SCALE_SWITCHES = 3
# Least-norm corrections tried before giving up (each may add a full resource or drop a pair).
PROJECT_ROUNDS = 6
# The projection's dense matrix has a row per tenant and bottleneck; above this it is skipped
# when matrix scaling applies.
PROJECT_MAX_ROWS = 1200
# The LP (step 3's fallback when the projection fails) only up to this many tight pairs.
LP_MAX_PAIRS = 20_000


def _pods(problem: FairnessProblem, x: FloatArray) -> FloatArray:
    """Pods of work ``x`` (``x / throughput`` with the GPU extension, else ``x``)."""
    if problem.throughput is None:
        return x
    t = np.asarray(problem.throughput)
    return np.where(t > 0, x / np.where(t > 0, t, 1.0), 0.0)


def _structure(
    problem: FairnessProblem, gamma: FloatArray, active: BoolArray, tasks: FloatArray
) -> tuple[FloatArray, FloatArray, np.ndarray]:
    """``(L̃ (K, M), ℓ̃ (N, K), r (N, K))`` from one progressive fill per node at ``tasks``.

    ``active`` here means open (below cap); the tasks of the other tenants are held where they
    are, so each node fills what they leave.
    """
    N, K, M = problem.shape
    totals = tasks.sum(axis=1)
    fixed = _pods(problem, np.where(active[:, None], 0.0, tasks)).T @ problem.demand  # (K, M)
    levels = np.full((K, M), np.inf)
    ell = np.full((N, K), np.inf)
    rsel = np.full((N, K), -1, dtype=np.int64)
    tput = problem.throughput
    for i in range(K):
        idx = np.flatnonzero((gamma[:, i] > 0) & active)
        if len(idx) == 0:
            continue
        demand = problem.demand[idx]
        if tput is not None:
            demand = demand / tput[idx, i][:, None]
        b = np.maximum(totals[idx] - tasks[idx, i], 0.0)
        room = np.maximum(problem.capacity[i] - fixed[i], 0.0)
        _, lv, frozen = rdm_fill_levels(gamma[idx, i], problem.phi[idx], b, demand, room)
        levels[i] = lv
        # ℓ: the lowest saturated level among the resources each tenant demands.
        per = np.where(demand > 0, lv[None, :], np.inf)
        r = np.argmin(per, axis=1)
        ell[idx, i] = per[np.arange(len(idx)), r]
        rsel[idx, i] = np.where(frozen >= 0, r, -1)
    return levels, ell, rsel


def _potentials(
    n_t: np.ndarray,
    lvl_t: np.ndarray,
    rhs_t: FloatArray,
    w: FloatArray,
    V: int,
    anchor: FloatArray,
) -> tuple[FloatArray, np.ndarray, int]:
    """``log x̂`` / ``log L̂`` on a minimum spanning forest of the pairs (weights ``w > 0``).

    Each tree's root keeps its ``anchor`` value (the sweeps' own), so each tree's scale starts
    near 1. Returns ``(values (V,), component of each vertex, number of components)``.
    """
    G = sp.coo_matrix((w, (n_t, lvl_t)), shape=(V, V)).tocsr()
    forest = minimum_spanning_tree(G + G.T).tocsr()
    n_comp, comp = connected_components(forest, directed=False)
    fsym = (forest + forest.T).tocsr()
    # The forest's edges as (tenant, level) pairs, and their log(φγ) looked up by key.
    on_tree = forest.tocoo()
    ten = np.minimum(on_tree.row, on_tree.col)
    lvl = np.maximum(on_tree.row, on_tree.col)
    keys = n_t.astype(np.int64) * V + lvl_t
    order_k = np.argsort(keys)
    at = order_k[np.searchsorted(keys[order_k], ten.astype(np.int64) * V + lvl)]
    rhs_of = dict(
        zip(zip(ten.tolist(), lvl.tolist(), strict=True), rhs_t[at].tolist(), strict=True)
    )
    val = np.full(V, np.nan)
    for root in np.unique(np.concatenate([n_t, lvl_t])).tolist():
        if not np.isnan(val[root]):
            continue
        order, pred = breadth_first_order(fsym, root, directed=False)
        val[root] = anchor[root]
        for v in order[1:].tolist():
            u = int(pred[v])
            # Tenant–level edge (tenant first in rhs_of): log x_n − log L = log(φγ).
            val[v] = val[u] + rhs_of[v, u] if (v, u) in rhs_of else val[u] - rhs_of[u, v]
    return val, comp, int(n_comp)


def rdm_crossover(
    problem: FairnessProblem,
    gamma: FloatArray,
    active: BoolArray,
    tasks: FloatArray,
    *,
    tight: float = TIGHT_RTOL,
) -> FloatArray | None:
    """Exact RDM allocation near ``tasks``; ``None`` if the structure guess does not hold."""
    N, K, M = problem.shape
    totals = tasks.sum(axis=1)
    caps = problem.caps
    # A tenant at its cap needs no bottleneck; it keeps its total and the nodes it is on, and
    # only its VDS there must stay at most the level (the certificate checks that).
    capped = np.isfinite(caps) & (totals >= caps * (1.0 - CAP_RTOL)) & active
    active = active & ~capped
    levels, ell, rsel = _structure(problem, gamma, active, tasks)
    eligible = (gamma > 0) & active[:, None]
    if (eligible & (rsel < 0)).any() or not (totals[active] > 0).all():
        return None  # some pair has no saturated resource to be frozen by
    with np.errstate(divide="ignore", invalid="ignore"):
        vds = np.where(eligible, totals[:, None] / (problem.phi[:, None] * gamma), np.inf)
        gap = np.where(eligible, vds / ell - 1.0, np.inf)
    tight_pairs = gap <= tight
    # Every open tenant is served somewhere: its closest pair is tight even if the sweeps still
    # give it too much.
    open_rows = np.flatnonzero(active)
    tight_pairs[open_rows, np.argmin(gap[open_rows], axis=1)] = True
    n_t, i_t = np.nonzero(tight_pairs & eligible)
    r_t = rsel[n_t, i_t]
    # Graph: tenants 0..N-1, levels N + i·M + r. The forest prefers the pairs with the smallest
    # gap; a pair the forest's levels put below its level must be tight after all, so it joins
    # the forest first next time (evicting the pair of its cycle with the largest gap).
    V = N + K * M
    lvl_t = N + i_t * M + r_t
    rhs_t = np.log(problem.phi[n_t] * gamma[n_t, i_t])
    w = np.abs(gap[n_t, i_t]) + 1e-300
    with np.errstate(divide="ignore"):  # a level of 0 (a node its capped tenants fill) is -inf
        anchor = np.concatenate([np.log(np.maximum(totals, 1e-300)), np.log(levels.ravel())])
    for _ in range(REPAIR_ROUNDS):
        val, comp, n_comp = _potentials(n_t, lvl_t, rhs_t, w, V, anchor)
        resid = val[n_t] - val[lvl_t] - rhs_t
        below = resid < -CYCLE_RTOL
        if not below.any():
            break
        w = np.where(below, 1e-300, w)
    else:
        return None  # tight pairs' VDS below their level: the structure is wrong
    used = np.zeros(V, dtype=bool)
    used[n_t] = True
    used[lvl_t] = True
    keep = resid <= CYCLE_RTOL
    n_t, i_t, r_t, lvl_t = n_t[keep], i_t[keep], r_t[keep], lvl_t[keep]
    if not np.isin(np.flatnonzero(active), n_t).all():
        return None  # an open tenant with no pair it can be served on
    xhat = np.exp(val[:N])
    Lhat = np.exp(val[N:]).reshape(K, M)
    # Every pair's chosen level must be a variable (someone's tight edge) to be checked.
    n_e, i_e = np.nonzero(eligible)
    lvl_e = N + i_e * M + rsel[n_e, i_e]
    if not used[lvl_e].all():
        return None
    ce_n, ce_l = comp[n_e], comp[lvl_e]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero level compares as inf/NaN
        ratio = problem.phi[n_e] * gamma[n_e, i_e] * Lhat.ravel()[lvl_e - N] / xhat[n_e]
    same = ce_n == ce_l
    if (ratio[same] > 1.0 + CYCLE_RTOL).any():
        return None  # an untight pair below its level inside one tree
    # Between trees: κ_A ≥ ratio · κ_B, keep the largest ratio per (A, B).
    pairs = [(ce_n[~same], ce_l[~same], ratio[~same])]
    # Order of levels on a node: L_{i,r(n,i)} ≤ L_{i,r'} for the tight pairs' other resources.
    for r2 in range(M):
        dem = problem.demand[n_t, r2] > 0
        lvl2 = N + i_t * M + r2
        ok = dem & (r_t != r2) & used[lvl2]
        a, b2 = lvl_t[ok], lvl2[ok]
        with np.errstate(divide="ignore", invalid="ignore"):
            lhs = Lhat.ravel()[a - N] / Lhat.ravel()[b2 - N]  # κ_B ≥ lhs · κ_A
        inside = comp[a] == comp[b2]
        if (lhs[inside] > 1.0 + CYCLE_RTOL).any():
            return None
        pairs.append((comp[b2[~inside]], comp[a[~inside]], lhs[~inside]))
    x0 = tasks[n_t, i_t]
    bott = np.unique(i_t * M + r_t)
    n_c, i_c = np.nonzero(capped[:, None] & (tasks > 0))
    if len(n_c):
        if len(np.unique(bott // M)) != len(bott):
            return None  # caps are handled by the scaling only
        return _scale(problem, n_t, i_t, r_t, comp, xhat, x0, (n_c, i_c, tasks[n_c, i_c]))
    if len(np.unique(bott // M)) == len(bott):
        # One bottleneck resource per node: matrix scaling. When it fails on a large instance
        # the support is most likely wrong and the sweeps go on (the projection's dense
        # factorisation would cost several sweeps); small ones try the projection too.
        out = _scale(problem, n_t, i_t, r_t, comp, xhat, x0)
        if out is not None or N + len(bott) > PROJECT_MAX_ROWS:
            return out
    out = _project(problem, n_t, i_t, r_t, comp, n_comp, xhat, used, x0)
    if out is None and len(n_t) <= LP_MAX_PAIRS:
        out = _split(problem, n_t, i_t, r_t, comp, n_comp, xhat, used, pairs)
    return out


def _scale(
    problem: FairnessProblem,
    n_t: np.ndarray,
    i_t: np.ndarray,
    r_t: np.ndarray,
    comp: np.ndarray,
    xhat: FloatArray,
    x0: FloatArray,
    capped: tuple[np.ndarray, np.ndarray, FloatArray] | None = None,
) -> FloatArray | None:
    """Step 3 by matrix scaling when every node has one bottleneck resource (the usual case).

    ``x_{n,i} = x⁰_{n,i} u_n v_i`` keeps the sweeps' support and stays positive: alternately
    fill each node's bottleneck exactly (``v``) and bring each tenant to ``κ_T x̂_n`` (``u``),
    with each tree's ``κ_T`` the ratio of its tenants' current to their ``x̂`` sums. A node whose
    other resource then overflows moves its bottleneck there (``SCALE_SWITCHES`` times at most).
    ``None`` if it does not settle to ``SCALE_TOL`` within ``SCALE_MAX`` rounds.
    ``capped``: ``(tenants, nodes, tasks)`` of capped tenants' pairs, scaled back to their cap.
    """
    N, K, M = problem.shape
    bott = np.unique(i_t * M + r_t)
    # Tight pairs the sweeps left empty start at a trace of their node's mean, so that scaling can
    # grow them where the bottleneck needs them (a zero would stay zero).
    held0 = np.bincount(i_t, weights=x0, minlength=K)
    count0 = np.bincount(i_t, weights=(x0 > 0).astype(np.float64), minlength=K)
    seed = SCALE_SEED * held0 / np.maximum(count0, 1.0)
    x0 = np.where(x0 > 0, x0, seed[i_t])
    pos = x0 > 0
    n_p, i_p = n_t[pos], i_t[pos]
    x = x0[pos].copy()
    at_cap = np.zeros(N, dtype=bool)
    if capped is not None:
        at_cap[capped[0]] = True
        n_p = np.concatenate([n_p, capped[0]])
        i_p = np.concatenate([i_p, capped[1]])
        x = np.concatenate([x, capped[2]])
    node_r = np.full(K, -1)
    node_r[bott // M] = bott % M
    has_bott = node_r >= 0
    per_pod = np.ones(len(n_p))
    if problem.throughput is not None:
        per_pod = 1.0 / np.asarray(problem.throughput)[n_p, i_p]
    for _ in range(SCALE_SWITCHES + 1):
        scaled = _scale_rounds(problem, n_p, i_p, x, node_r, per_pod, at_cap, comp[:N], xhat)
        if scaled is None:
            return None
        x = scaled
        out = np.zeros((N, K))
        out[n_p, i_p] = x
        use = _pods(problem, out).T @ problem.demand
        over = (use > problem.capacity * (1.0 + 1e-12)).any(axis=1)
        if not over.any():
            return out
        # A node whose other resource overflows saturates that one first: when every open pair
        # there demands it, the same level belongs to it instead (the levels do not change).
        nodes = np.flatnonzero(over & has_bott)
        if len(nodes) < over.sum():
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            fill = np.where(problem.capacity > 0, use / problem.capacity, np.inf)
        new_r = np.argmax(fill[nodes], axis=1)
        on = np.isin(i_p, nodes) & ~at_cap[n_p]
        node_r[nodes] = new_r
        if not (problem.demand[n_p[on], node_r[i_p[on]]] > 0).all():
            return None
    return None


def _scale_rounds(
    problem: FairnessProblem,
    n_p: np.ndarray,
    i_p: np.ndarray,
    x: FloatArray,
    node_r: np.ndarray,
    per_pod: FloatArray,
    at_cap: BoolArray,
    ten_comp: np.ndarray,
    xhat: FloatArray,
) -> FloatArray | None:
    """The scaling rounds of :func:`_scale` with each node's bottleneck ``node_r`` (-1: none)."""
    N, K, _ = problem.shape
    has_bott = node_r >= 0
    r_of = np.maximum(node_r, 0)
    a = np.where(has_bott[i_p], problem.demand[n_p, r_of[i_p]], 0.0) * per_pod
    cap = np.where(has_bott, problem.capacity[np.arange(K), r_of], 0.0)
    x = x.copy()
    for _ in range(SCALE_MAX):
        held = np.bincount(i_p, weights=a * x, minlength=K)
        if not (held[has_bott] > 0).all():
            return None
        x *= np.where(has_bott, cap / np.where(held > 0, held, 1.0), 1.0)[i_p]
        t = np.bincount(n_p, weights=x, minlength=N)
        has = np.bincount(n_p, minlength=N) > 0
        free = has & ~at_cap
        spent = np.bincount(
            ten_comp[free], weights=t[free], minlength=int(ten_comp.max(initial=0)) + 1
        ).astype(np.float64)
        kappa = spent / np.maximum(
            np.bincount(ten_comp[free], weights=xhat[free], minlength=len(spent)), 1e-300
        )
        with np.errstate(invalid="ignore"):  # capped tenants have no x̂ (NaN), never selected
            target = np.where(at_cap, problem.caps, kappa[ten_comp] * xhat)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(has, target / t, 1.0)
        if float(np.max(np.abs(ratio[has] - 1.0), initial=0.0)) <= SCALE_TOL:
            return x
        x *= ratio[n_p]
    return None


def _project(
    problem: FairnessProblem,
    n_t: np.ndarray,
    i_t: np.ndarray,
    r_t: np.ndarray,
    comp: np.ndarray,
    n_comp: int,
    xhat: FloatArray,
    used: BoolArray,
    x0: FloatArray,
) -> FloatArray | None:
    """Step 3 without the LP: the closest split to the sweeps' (relative change, ``Σ (Δx)²/x₀``).

    The equalities (tenant totals ``κ_T x̂_n``, bottleneck resources full) are met by one
    weighted least-norm correction ``z = z₀ + D Aᵀ (A D Aᵀ)⁻¹ (b − A z₀)`` (dense Cholesky of an
    ``(N + bottlenecks)``-square matrix, two refinement steps); a pair pushed below 0 leaves and
    the correction is redone. Inequalities are left to the caller's certificate.
    """
    N, K, M = problem.shape
    E = len(n_t)
    tenants = np.flatnonzero(used[:N])
    row_of = np.full(N, -1)
    row_of[tenants] = np.arange(len(tenants))
    per_pod = np.ones(E)
    if problem.throughput is not None:
        per_pod = 1.0 / np.asarray(problem.throughput)[n_t, i_t]
    nv = E + n_comp
    full = np.unique(i_t * M + r_t)  # resources held exactly at capacity
    z = np.concatenate([x0, np.ones(n_comp)])
    scale = np.bincount(n_t, weights=x0, minlength=N)[n_t] / np.maximum(
        np.bincount(n_t, minlength=N)[n_t], 1
    )
    D = np.concatenate([x0 + 1e-6 * scale, np.full(n_comp, 1e3)])
    use_all = sp.csr_matrix(
        (
            (problem.demand[n_t] * per_pod[:, None]).ravel(),
            ((i_t[:, None] * M + np.arange(M)).ravel(), np.repeat(np.arange(E), M)),
        ),
        shape=(K * M, nv),
    )
    cap = problem.capacity.ravel()
    ten = sp.csr_matrix(
        (
            np.concatenate([np.ones(E), -xhat[tenants]]),
            (
                np.concatenate([row_of[n_t], np.arange(len(tenants))]),
                np.concatenate([np.arange(E), E + comp[tenants]]),
            ),
        ),
        shape=(len(tenants), nv),
    )
    for _ in range(PROJECT_ROUNDS):
        A = sp.vstack([ten, use_all[full]]).tocsr()
        b = np.concatenate([np.zeros(len(tenants)), cap[full]])
        S = (A @ sp.diags(D) @ A.T).toarray()
        try:
            factor = sla.cho_factor(S)
        except np.linalg.LinAlgError:
            return None
        for _ in range(3):
            z = z + D * (A.T @ sla.cho_solve(factor, b - A @ z))
        neg = z[:E] < 0
        over = np.flatnonzero(use_all @ z > cap * (1.0 + 1e-12))
        if not neg.any() and not np.isin(over, full, invert=True).any():
            break
        # A pair pushed below 0 leaves; a resource pushed over capacity is held at it.
        z[:E][neg] = 0.0
        D[:E][neg] = 0.0
        full = np.union1d(full, over)
    else:
        return None
    if np.abs(b - A @ z).max() > 1e-9 * max(1.0, np.abs(b).max()):
        return None
    out = np.zeros((N, K))
    out[n_t, i_t] = np.maximum(z[:E], 0.0)
    return out


def _split(
    problem: FairnessProblem,
    n_t: np.ndarray,
    i_t: np.ndarray,
    r_t: np.ndarray,
    comp: np.ndarray,
    n_comp: int,
    xhat: FloatArray,
    used: BoolArray,
    pairs: list[tuple[np.ndarray, np.ndarray, FloatArray]],
) -> FloatArray | None:
    """The LP of step 3: tasks on the tight pairs and one scale per tree."""
    N, K, M = problem.shape
    E = len(n_t)
    nv = E + n_comp
    tenants = np.flatnonzero(used[:N])
    # Tenant rows: Σ_i x_{n,i} − κ_T x̂_n = 0.
    row_of = np.full(N, -1)
    row_of[tenants] = np.arange(len(tenants))
    A_ten = sp.csr_matrix(
        (
            np.concatenate([np.ones(E), -xhat[tenants]]),
            (
                np.concatenate([row_of[n_t], np.arange(len(tenants))]),
                np.concatenate([np.arange(E), E + comp[tenants]]),
            ),
        ),
        shape=(len(tenants), nv),
    )
    # Resource rows: Σ_n d_{n,r} x_{n,i} / t_{n,i} against c_{i,r}.
    per_pod = np.ones(E)
    if problem.throughput is not None:
        per_pod = 1.0 / np.asarray(problem.throughput)[n_t, i_t]
    dem = problem.demand[n_t] * per_pod[:, None]  # (E, M)
    A_res = sp.csr_matrix(
        (dem.ravel(), ((i_t[:, None] * M + np.arange(M)).ravel(), np.repeat(np.arange(E), M))),
        shape=(K * M, nv),
    )
    cap = problem.capacity.ravel()
    bottleneck = np.zeros(K * M, dtype=bool)
    bottleneck[i_t * M + r_t] = True
    touched = np.asarray(abs(A_res).sum(axis=1)).ravel() > 0
    ub_rows = touched & ~bottleneck
    A_ub = [A_res[ub_rows]]
    b_ub = [cap[ub_rows]]
    ca, cb, rt = (np.concatenate(p) for p in zip(*pairs, strict=True))
    if len(ca):
        # κ_B·ratio − κ_A ≤ 0, the largest ratio per (A, B).
        key = ca * n_comp + cb
        order = np.lexsort((-rt, key))
        first = np.ones(len(order), dtype=bool)
        first[1:] = key[order][1:] != key[order][:-1]
        sel = order[first]
        m = len(sel)
        A_ub.append(
            sp.csr_matrix(
                (
                    np.concatenate([rt[sel], -np.ones(m)]),
                    (
                        np.concatenate([np.arange(m)] * 2),
                        np.concatenate([E + cb[sel], E + ca[sel]]),
                    ),
                ),
                shape=(m, nv),
            )
        )
        b_ub.append(np.zeros(m))
    res = linprog(
        np.zeros(nv),
        A_ub=sp.vstack(A_ub).tocsr(),
        b_ub=np.concatenate(b_ub),
        A_eq=sp.vstack([A_ten, A_res[bottleneck]]).tocsr(),
        b_eq=np.concatenate([np.zeros(len(tenants)), cap[bottleneck]]),
        bounds=(0, None),
        method="highs",
        options={"primal_feasibility_tolerance": LP_TOL, "presolve": True},
    )
    if res.status != 0 or res.x is None:
        return None
    out = np.zeros((N, K))
    out[n_t, i_t] = np.maximum(res.x[:E], 0.0)
    return out

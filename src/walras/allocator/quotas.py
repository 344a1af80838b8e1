"""Tenant quotas as columns: guarantees and maximums for any policy that shares GPU types.

A policy over GPU types (price discovery, Gavel's baselines) solves some problem over
``x_{ig}`` (job ``i``'s share of type ``g``), coupled only by the capacity rows
``Σ_i d_ig x_ig ≤ R_g``. Per tenant ``t`` and type ``g`` an admin may set a guarantee ``G_tg``
and a maximum ``M_tg`` (GPUs). With ``h_tg = Σ_{i ∈ t} d_ig x_ig`` the GPUs ``t`` holds, the
quota-constrained problem is the policy's own problem plus

    h_tg ≤ M_tg                                   (maximum)
    Σ_t max(h_tg − c_tg, 0) ≤ R_g − Σ_t c_tg      (guarantee: t's first c_tg GPUs are its own)

with the carve-out ``c_tg = min(G_tg, f_tg)``, ``f_tg = Σ d_ig`` over t's jobs that can use
``g`` and whose gang fits in ``G_tg`` (a gang larger than its tenant's guarantee cannot run
inside it and competes in the shared pool). The guarantee row says: what t holds beyond its
carve-out comes out of the unguaranteed capacity. Without demand, a carve-out binds nothing.

**One mechanism, the policy's own data.** Both rows are expressed through the columns the policy
already takes (throughput, demand and capacity per column), so the policy's solver runs
unchanged:

- a *carve-out* column ``g@t`` of capacity ``c_tg`` that only t's jobs may use (same throughput
  and gang size as ``g``), the shared column ``g`` keeping ``R_g − Σ_t c_tg``. A job's share of
  ``g`` is the sum over its columns. Splitting ``x = y + z`` (carve-out, shared) is feasible iff
  the guarantee row holds (take ``y_t = min(h_t, c_t)``), so the column problem *is* the
  guaranteed problem;
- a tenant whose maximum binds is *barred* from the shared column of ``g`` and gets a private
  column of capacity ``M_tg`` instead (an active-set step): if it uses all of it, the column
  problem equals the capped one (the tenant holds exactly ``M_tg`` in both, and the others share
  the rest).

:func:`enforce` alternates solve and repair, at most ``max_passes`` times:

1. :func:`fill_private` after every solve: an owner's time on the shared column of a type moves
   into its carve-out, and a carve-out still idle goes to its owner's jobs with time left. Then a
   carve-out is full or every job of its owner that could use it is saturated, whatever the
   solver did (a utility maximiser already fills it; an LP at a degenerate optimum may not);
2. a pair holding more than its maximum is barred, the outermost first (a descendant over its
   own maximum is decided in the next pass, once its ancestor's confinement caps it); its
   confinement comes from the columns on its way up, which stays inside their subtrees, so it
   lowers what those columns are restored to (below);
3. a private column its owner leaves idle (its jobs are saturated or want other types) is
   shrunk to what it uses, so unused guaranteed GPUs are lent (to its parent's column: its
   siblings first; from a root, to everyone; only where some job that may not use the column
   could use them there, since a loan nobody can take only takes them from the owner); a lent
   carve-out whose owner fills it while a job that may use it (none confined below it) still
   wants more is restored to ``c_tg`` less what confinements below took from it, a barred
   pair's to its confinement (once per pair, so passes cannot cycle between lending and
   reclaiming).

A gang larger than a maximum on its tenant's way up may use no column of that type (the solver
would plan time there that the layer then drops).

When no pair changes, the allocation is the policy's optimum of the problem above with the
final carve-outs (``Outcome.carve``, at most ``c_tg``, smaller only where t did not use them):
exact for a policy that maximises over its columns (price discovery; checked against a cvxpy
model of the rows above in the tests, and in a tenant tree never below a cvxpy model with every
subtree's maximum and the nested guarantee rows), a heuristic for the others (Gavel's LPs and
FIFO), for which the invariants (every maximum; every guarantee that demand allows) still hold
by steps 1 and 2. Should the pass limit be reached with a pair still over its maximum, its
tenant's shares of the type are scaled down to the maximum (a last resort; the maximum holds in
every case).

Prices: column ``g@t`` has its own price. Where a job of t buys both ``g@t`` and ``g``, the
two prices per GPU are equal; where it buys only ``g@t`` the optimality conditions give
``p_{g@t} ≤ p_g``: the carve-out price is a per-tenant discount on the market price, and
``p_g − p_{g@t}`` is the multiplier of t's guarantee row. A barred tenant asked for more than
``M_tg`` at the market price, so the price that clears its private column is at least the
market's: ``p_{g@t} − p_g`` is the multiplier of its maximum, a per-tenant surcharge.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

SHARED = -1
# GPUs: a holding above its maximum by more than this is a violation (above float round-off; the
# solvers keep capacity rows exactly, so a barred pair never exceeds it).
SLACK = 1e-6
# GPUs: a private column left unused by more than this is shrunk (lent). Below what the realiser
# can give anyone (it places whole pods), above an approximate solver's idle remainder, so an
# approximate solve does not spend passes lending crumbs.
LEND_SLACK = 1e-2


@dataclass(frozen=True, slots=True)
class Quotas:
    """Per tenant and type: ``guaranteed`` (0: none) and ``maximum`` (``inf``: none), shape
    ``(T, m)``; ``owner[i]``: the tenant index of job ``i``; ``parent[t]``: the tenant's parent
    index, ``-1`` for a root (``None``: all are roots). A tenant's quotas cover its subtree."""

    owner: IntArray
    guaranteed: FloatArray
    maximum: FloatArray
    parent: IntArray | None = None

    @property
    def any(self) -> bool:
        return bool((self.guaranteed > 0).any() or np.isfinite(self.maximum).any())

    def ancestry(self) -> BoolArray:
        """``(T, T)``: ``[u, v]`` iff ``u`` is ``v`` or one of its ancestors."""
        T = self.guaranteed.shape[0]
        anc = np.eye(T, dtype=bool)
        if self.parent is None:
            return anc
        for v in range(T):
            u, seen = int(self.parent[v]), 0
            while u >= 0 and seen < T:  # ``seen``: a cycle (validated away) cannot loop
                anc[u, v] = True
                u, seen = int(self.parent[u]), seen + 1
        return anc

    def parents(self) -> IntArray:
        T = self.guaranteed.shape[0]
        if self.parent is None:
            return np.full(T, -1, dtype=np.int64)
        return np.asarray(self.parent, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Columns:
    """The columns the policy solves over.

    Attributes:
        base: ``(c,)`` the GPU type of each column.
        tenant: ``(c,)`` its owner, or ``SHARED``.
        capacity: ``(c,)`` GPUs (every one > 0).
        gang: ``(c,)`` the GPUs of the column's type: a column is an account of a share of
            its type, not a set of GPUs, so a gang fits a column when it fits the type.
        allowed: ``(n, c)`` job ``i`` may use column ``k`` (the owner's jobs; the shared column
            for everyone not barred from it).
    """

    base: IntArray
    tenant: IntArray
    capacity: FloatArray
    gang: FloatArray
    allowed: BoolArray

    def expand(self, matrix: FloatArray) -> FloatArray:
        """A ``(n, m)`` per-type matrix (throughput) as ``(n, c)``, 0 where not allowed."""
        return np.where(self.allowed, matrix[:, self.base], 0.0)

    def live(self, throughput: FloatArray, demand: FloatArray) -> IntArray:
        """The jobs with a column they may use whose type holds their gang (a job its maximum
        keeps off every type, e.g. a maximum of 0, has none and is not solved)."""
        ok = (self.expand(throughput) > 0) & (self.spread(demand) <= self.gang[None, :])
        return np.flatnonzero(ok.any(axis=1)).astype(np.int64)

    def spread(self, matrix: FloatArray) -> FloatArray:
        """A ``(n, m)`` per-type matrix (gang sizes) as ``(n, c)``, unmasked."""
        return np.ascontiguousarray(matrix[:, self.base])

    def collapse(self, x: FloatArray, m: int) -> FloatArray:
        """``(n, c)`` shares of columns as ``(n, m)`` shares of types."""
        out = np.zeros((x.shape[0], m))
        np.add.at(out.T, self.base, x.T)
        return out


@dataclass(frozen=True, slots=True)
class Outcome:
    """The repaired allocation and how it was reached.

    Attributes:
        allocation: ``(n, m)`` shares per type.
        held: ``(T, m)`` GPUs each tenant's subtree holds.
        carve: ``(T, m)`` each pair's own column at the end (0 where none; for a barred pair
            its confined column).
        barred: ``(T, m)`` pairs confined to a private column by their maximum.
        columns: the last pass's columns; ``column_allocation`` its ``(n, c)`` shares.
        passes: solves run; ``clipped``: the last resort scaled some pair down.
    """

    allocation: FloatArray
    held: FloatArray
    carve: FloatArray
    barred: BoolArray
    columns: Columns
    column_allocation: FloatArray
    passes: int
    clipped: bool


def held(x: FloatArray, demand: FloatArray, owner: IntArray, tenants: int) -> FloatArray:
    """``Σ_{i of t} d_ig x_ig`` of each tenant's own jobs, shape ``(T, m)``."""
    out = np.zeros((tenants, x.shape[1]))
    np.add.at(out, owner, demand * x)
    return out


def subtree_held(quotas: Quotas, x: FloatArray, demand: FloatArray) -> FloatArray:
    """``h_tg``: what the jobs of ``t`` and of its descendants hold, shape ``(T, m)``."""
    anc = quotas.ancestry()
    own = held(x, demand, quotas.owner, anc.shape[0])
    return np.asarray(anc.astype(np.float64) @ own, dtype=np.float64)


def carve_outs(
    quotas: Quotas, throughput: FloatArray, demand: FloatArray, capacity: FloatArray
) -> FloatArray:
    """``c_tg = min(G_tg, f_tg)`` (module docstring; ``f_tg`` over t's subtree), scaled down per
    type where the guarantees exceed the capacity present (a node gone: nobody can be given what
    is absent; every level by the same factor, so children stay inside their parents)."""
    anc = quotas.ancestry()
    member = anc[:, quotas.owner].T  # (n, T): job i is in t's subtree
    c = np.zeros_like(quotas.guaranteed)
    for g in range(c.shape[1]):
        fits = member & (throughput[:, g] > 0)[:, None]
        fits &= demand[:, g][:, None] <= quotas.guaranteed[:, g][None, :]
        c[:, g] = np.minimum(quotas.guaranteed[:, g], demand[:, g] @ fits)
    roots = quotas.parents() < 0
    total = c[roots].sum(axis=0)
    over = total > capacity
    if over.any():
        c[:, over] *= capacity[over] / total[over]
    return np.asarray(c, dtype=np.float64)


def own_part(quotas: Quotas, carve: FloatArray) -> FloatArray:
    """What of each tenant's carve-out its children's carve-outs leave: its own column."""
    out = carve.copy()
    for v, p in enumerate(quotas.parents().tolist()):
        if p >= 0:
            out[p] -= carve[v]
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)


def columns(
    quotas: Quotas, capacity: FloatArray, private: FloatArray, barred: BoolArray
) -> Columns:
    """Shared columns (what no private column takes) then one private column per pair with
    capacity. A job may use the columns of its tenant and of its tenant's ancestors, up to the
    first barred one on the way (its maximum confines the subtree below it), and the shared
    column when no tenant on its way up is barred."""
    T, m = private.shape
    anc = quotas.ancestry()
    base: list[int] = []
    tenant: list[int] = []
    cap: list[float] = []
    shared = capacity - private.sum(axis=0)
    for g in range(m):
        if shared[g] > SLACK:
            base.append(g)
            tenant.append(SHARED)
            cap.append(float(shared[g]))
    for t in range(T):
        for g in range(m):
            if private[t, g] > SLACK:
                base.append(g)
                tenant.append(t)
                cap.append(float(private[t, g]))
    b = np.array(base, dtype=np.int64)
    col_tenant = np.array(tenant, dtype=np.int64)
    up = anc[:, quotas.owner].T  # (n, T): tenant u is the job's tenant or an ancestor
    strict = anc & ~np.eye(T, dtype=bool)
    allowed = np.zeros((len(quotas.owner), len(b)), dtype=bool)
    for g in range(m):
        may, may_shared = _may_use(up, strict, barred[:, g])
        for k in np.flatnonzero(b == g).tolist():
            u = int(col_tenant[k])
            allowed[:, k] = may_shared if u == SHARED else may[:, u]
    return Columns(
        base=b,
        tenant=col_tenant,
        capacity=np.array(cap, dtype=np.float64),
        gang=np.asarray(capacity, dtype=np.float64)[b],
        allowed=allowed,
    )


def enforce(
    solve: Callable[[Columns, IntArray], FloatArray],
    quotas: Quotas,
    throughput: FloatArray,
    demand: FloatArray,
    capacity: FloatArray,
    *,
    max_passes: int = 8,
    lend_slack: float = LEND_SLACK,
) -> Outcome:
    """Run ``solve`` over quota columns until no pair changes (module docstring).

    ``solve(columns, rows)`` returns the policy's shares of the jobs ``rows`` over ``columns``
    (``(len(rows), c)``; the other jobs get none: no column they may use holds them);
    ``throughput``, ``demand`` are ``(n, m)`` per type, ``capacity`` ``(m,)``.
    """
    T, m = quotas.guaranteed.shape
    anc = quotas.ancestry()
    # A gang larger than a maximum on its tenant's way up can never run on that type.
    ceiling = np.where(anc[:, quotas.owner].T[:, :, None], quotas.maximum[None, :, :], np.inf)
    fits = demand <= ceiling.min(axis=1)
    throughput = np.where(fits, throughput, 0.0)
    carve = carve_outs(quotas, throughput, demand, capacity)
    first = own_part(quotas, carve)  # each tenant's own column before any loan
    below = anc & ~np.eye(T, dtype=bool)  # [u, v]: v strictly below u
    parent = quotas.parents()
    barred = np.zeros((T, m), dtype=bool)
    private = first.copy()
    # What each pair's own column is restored to when its owner wants it back: its carve-out, or,
    # once barred, its confinement (a confined column lent while idle must come back too, or the
    # pair would stay confined to nothing).
    entitled = first.copy()
    frozen = np.zeros((T, m), dtype=bool)
    passes = 0
    while True:
        cols = columns(quotas, capacity, private, barred)
        # Nor may such a gang use a column of that type: the solver, which reads its own data
        # through ``cols``, would plan time there that is then dropped (and not spent elsewhere).
        cols = replace(cols, allowed=cols.allowed & fits[:, cols.base])
        rows = cols.live(throughput, demand)
        xc = np.zeros((len(quotas.owner), len(cols.base)))
        if len(rows) and len(cols.base):
            # A job holds nothing of a column it may not use or makes no progress on (an LP at a
            # degenerate optimum may put time there; it would count against the column).
            xc[rows] = np.where(
                cols.expand(throughput)[rows] > 0,
                np.asarray(solve(cols, rows), dtype=np.float64),
                0.0,
            )
        xc = fill_private(xc, cols, throughput, demand)
        passes += 1
        x = cols.collapse(xc, m)
        h = subtree_held(quotas, x, demand)
        # What each pair uses of its private column.
        per_column = (cols.spread(demand) * xc).sum(axis=0)
        mine = cols.tenant != SHARED
        used = np.zeros((T, m))
        np.add.at(used, (cols.tenant[mine], cols.base[mine]), per_column[mine])
        over = (h > quotas.maximum + SLACK) & ~barred
        keep = np.where(used > SLACK, used, 0.0)
        idle = (private > 0) & (keep < private - lend_slack) & ~frozen
        # Lent only where a job that may not use the column could use the GPUs where they go: a
        # loan nobody can take only takes them from the owner (an approximate solve may leave a
        # remainder idle that the exact optimum would fill).
        idle &= _borrowers(quotas, barred, throughput > 0)
        # A lent carve-out whose owner wants it back (full, with a job that could use more of it
        # short of time): restored, once (so passes cannot cycle between lending and reclaiming).
        short = (
            ~frozen
            & (private < entitled - lend_slack)
            & (used >= private - lend_slack)
            & _wanting(
                x, throughput, demand, quotas, np.maximum(carve, entitled), barred, lend_slack
            )
        )
        if not over.any() and not idle.any() and not short.any():
            break
        if passes >= max_passes:
            x, clipped = _clip(x, demand, quotas, h)
            h = subtree_held(quotas, x, demand)
            return Outcome(x, h, private, barred, cols, xc, passes, clipped)
        # Lend what a private column's owner left unused: to its parent's column (its siblings
        # first), or to everyone from a root.
        for t, g in zip(*np.nonzero(idle), strict=True):
            freed = private[t, g] - keep[t, g]
            private[t, g] = keep[t, g]
            if parent[t] >= 0:
                private[parent[t], g] += freed
        # Reclaim: from the columns on the way up (the parent's first, where a loan went), up to
        # the nearest confined ancestor (its subtree may reach nothing else, or its maximum would
        # be exceeded), else also from the shared pool.
        for t, g in zip(*np.nonzero(short), strict=True):
            need = entitled[t, g] - private[t, g]
            if barred[t, g]:
                # A confined pair: never past what its maximum leaves beyond the columns below
                # it now (a child's confinement may have taken from it since).
                room = quotas.maximum[t, g] - private[below[t], g].sum() - private[t, g]
                need = min(need, max(float(room), 0.0))
            a = int(parent[t])
            while need > 0 and a >= 0:
                back = _take(private, entitled, a, g, need)
                private[t, g] += back
                need -= back
                if barred[a, g]:
                    break
                a = int(parent[a])
            if need > 0 and a < 0:
                left = capacity[g] - private[:, g].sum()
                private[t, g] += min(need, max(left, 0.0))
        frozen |= short
        # Confine a subtree over its maximum: its own column holds what its maximum leaves
        # beyond the columns below it. Ancestors first: the GPUs come from the columns on its
        # way up to its nearest confined ancestor (that subtree may reach nothing else), or
        # from those and the shared pool when none is confined.
        # Only the outermost pairs over their maximum this pass: an ancestor's confinement caps
        # its whole subtree, so a descendant over its own in the same solve may not be over it
        # once the ancestor is confined (confining both at once would hand the descendant its
        # ancestor's whole confinement, leaving its siblings nothing); the next pass decides.
        outer = over & ~((below.T.astype(np.int64) @ over.astype(np.int64)) > 0)
        depth = anc.sum(axis=0)
        for t, g in sorted(zip(*np.nonzero(outer), strict=True), key=lambda p: depth[p[0]]):
            barred[t, g] = True
            goal = max(float(quotas.maximum[t, g] - private[below[t], g].sum()), 0.0)
            entitled[t, g] = goal
            if goal <= private[t, g]:
                # The rest is lent as an idle column's would be: to the parent's column (it is
                # part of the parent's guarantee), from a root to everyone.
                if parent[t] >= 0:
                    private[parent[t], g] += private[t, g] - goal
                private[t, g] = goal
                continue
            a = int(parent[t])
            while private[t, g] < goal and a >= 0:
                private[t, g] += _take(private, entitled, a, g, goal - private[t, g])
                if barred[a, g]:
                    break
                a = int(parent[a])
            if a < 0:
                left = max(float(capacity[g] - private[:, g].sum()), 0.0)
                private[t, g] += min(goal - private[t, g], left)
    # Round-off of the solver's own rows (a holding 1e-7 over its maximum) is scaled away too.
    x, _ = _clip(x, demand, quotas, h)
    h = subtree_held(quotas, x, demand)
    return Outcome(x, h, private, barred, cols, xc, passes, False)


def fill_private(
    xc: FloatArray, cols: Columns, throughput: FloatArray, demand: FloatArray
) -> FloatArray:
    """Make each private column hold as much of its owner's use as it can.

    For each private column, in order: its owner's jobs that can use it (throughput > 0, gang
    fits) first move their time on the shared column of the same type into it (their shares of
    the type are unchanged; the shared GPUs they free stay with the shared column); then those
    with time left (row sum < 1) get ``min(1 − row sum, idle / d)`` more, in row order, until the
    column is full. After this a private column is full, or every job that could use it is
    saturated and holds all its use of the type there, whatever the policy's solver did (an LP at
    a degenerate optimum may leave it idle or put its owner on the shared column): the guarantee
    holds by construction. Nobody else loses anything (the column is the owner's), and a
    utility-maximising solver has filled it already.
    """
    out = xc.copy()
    a = cols.expand(throughput)
    d = cols.spread(demand)
    shared_of = {
        int(b): k
        for k, (b, t) in enumerate(zip(cols.base, cols.tenant, strict=True))
        if t == SHARED
    }
    for k in np.flatnonzero(cols.tenant != SHARED):
        users = np.flatnonzero((a[:, k] > 0) & (d[:, k] <= cols.gang[k]))
        idle = float(cols.capacity[k] - d[:, k] @ out[:, k])
        s = shared_of.get(int(cols.base[k]))
        for give_more in (False, True):
            for i in users:
                if idle <= SLACK:
                    break
                room = idle / float(d[i, k])
                if give_more:
                    move = min(1.0 - float(out[i].sum()), room)
                elif s is not None and cols.allowed[i, s]:
                    move = min(float(out[i, s]), room)
                    out[i, s] -= move
                else:
                    continue
                if move > 0:
                    out[i, k] += move
                    idle -= move * float(d[i, k])
    return out


def _take(private: FloatArray, entitled: FloatArray, a: int, g: int, amount: float) -> float:
    """Move up to ``amount`` GPUs out of ancestor ``a``'s column of type ``g`` (to a column
    below it: the caller adds them there); returns what was taken.

    What ``a``'s column holds beyond its entitlement (loans from below) goes first; what is taken
    beyond that lowers the entitlement too: those GPUs stay in ``a``'s subtree, in a descendant's
    column, so they still count towards ``a``'s guarantee, and restoring ``a``'s column to its
    old entitlement later would carve them out twice (from the shared pool, where other tenants'
    jobs need them)."""
    took = min(amount, float(private[a, g]))
    surplus = max(float(private[a, g] - entitled[a, g]), 0.0)
    private[a, g] -= took
    entitled[a, g] = max(float(entitled[a, g]) - max(took - surplus, 0.0), 0.0)
    return took


def _may_use(up: BoolArray, strict: BoolArray, barred_g: BoolArray) -> tuple[BoolArray, BoolArray]:
    """The rules of :func:`columns` for one GPU type: ``[i, u]`` whether job ``i`` may use
    tenant ``u``'s column (``u`` on its way up, ``up (n, T)``, and no tenant barred on the type
    strictly below ``u`` on that way, ``strict[u, v]``: ``v`` strictly below ``u``), and ``(n,)``
    whether it may use the shared column (no tenant on its way up barred)."""
    on_way = up & barred_g[None, :]  # barred tenants on each job's way up
    blocked = (on_way.astype(np.int64) @ strict.T.astype(np.int64)) > 0
    return up & ~blocked, np.logical_not(on_way.any(axis=1))


def _borrowers(quotas: Quotas, barred: BoolArray, runs: BoolArray) -> BoolArray:
    """Per pair: some job that runs on the type (``runs``, ``(n, m)``) and may not use the
    tenant's own column may use the column a loan goes to (its parent's; from a root, the
    shared one), by the rules of :func:`columns`."""
    T, m = quotas.guaranteed.shape
    anc = quotas.ancestry()
    up = anc[:, quotas.owner].T  # (n, T)
    strict = anc & ~np.eye(T, dtype=bool)
    parent = quotas.parents()
    out = np.zeros((T, m), dtype=bool)
    for g in range(m):
        may, shared = _may_use(up, strict, barred[:, g])
        for t in range(T):
            dest = may[:, parent[t]] if parent[t] >= 0 else shared
            out[t, g] = bool((runs[:, g] & dest & ~may[:, t]).any())
    return out


def _wanting(
    x: FloatArray,
    throughput: FloatArray,
    demand: FloatArray,
    quotas: Quotas,
    carve: FloatArray,
    barred: BoolArray,
    slack: float,
) -> BoolArray:
    """Per pair: some job that may use the tenant's own column (of its subtree, with no barred
    tenant strictly below the pair on its way up: a confined subtree's jobs cannot use the
    columns above their confinement), fits its carve-out and can use the type could hold more
    than ``slack`` GPUs more of it (time left × gang > ``slack``: the same measure as lending,
    so an approximate solver's row sums of 0.9999 do not reclaim a loan)."""
    T, m = carve.shape
    anc = quotas.ancestry()
    up = anc[:, quotas.owner].T  # (n, T)
    strict = (anc & ~np.eye(T, dtype=bool)).astype(np.int64)
    left = 1.0 - x.sum(axis=1)
    out = np.zeros((T, m), dtype=bool)
    for g in range(m):
        # [i, t]: a barred tenant strictly below t lies on job i's way up.
        confined = ((up & barred[:, g][None, :]).astype(np.int64) @ strict.T) > 0
        short = (left * demand[:, g] > slack) & (throughput[:, g] > 0)
        fits = up & ~confined & short[:, None]
        fits &= demand[:, g][:, None] <= carve[:, g][None, :]
        out[:, g] = fits.any(axis=0)
    return out


def _clip(
    x: FloatArray, demand: FloatArray, quotas: Quotas, h: FloatArray
) -> tuple[FloatArray, bool]:
    """Scale each pair above its maximum down to it (each job by the smallest ratio on its way
    up, so every subtree is within its maximum); ``True`` if one was above by more than
    round-off (the last resort, not the solver's tolerance)."""
    ratio = np.where(h > quotas.maximum, quotas.maximum / np.maximum(h, 1e-300), 1.0)
    if (ratio >= 1.0).all():
        return x, False
    up = quotas.ancestry()[:, quotas.owner].T  # (n, T)
    factor = np.where(up[:, :, None], ratio[None, :, :], 1.0).min(axis=1)
    return x * factor, bool((h > quotas.maximum + SLACK).any())

"""FIND_ALLOC: a job's best allocation at the current prices (Hadar's Algorithm 2, lines 24–36).

A candidate allocation gives job ``j`` its whole gang of ``W_j`` GPUs, ``w_r`` of type ``r``. Its
rate is the slowest member's (eq. 1b): ``rate = min_{r: w_r > 0} X_j^r`` with ``X_j^r =
throughput[j, r]``, and its payoff is::

    payoff(w) = U_j(τ(rate)) - Σ_r k^r · w_r,     τ(rate) = e_j + restart + rem_j / rate

Prices are pooled per type (:mod:`~walras.allocator.hadar.prices`) and Walras charges no
communication cost (as Gavel's and the paper's simulators), so the payoff depends only on the type
counts ``w``, not on which nodes hold them. The search is therefore over *bottleneck types*: for
each ``b`` (fastest first), allow the types at least as fast as ``b`` and fill the gang cheapest
type first (ties: faster type, then lower index).

Exactness: let ``w*`` be a best allocation and ``b`` its slowest type. The fill for ``b`` is
feasible, costs at most ``Σ k w*`` (a cheapest-first fill minimises a linear cost under a count
constraint) and runs at least at ``X_j^b``; utilities are non-increasing in ``τ``, so its payoff is
at least ``payoff(w*)``. ``tests/unit/test_hadar.py`` checks this against enumerating every
node-level allocation.

Layout (:func:`layout`, "packed vs spread"): the chosen counts become pods on nodes. A type's share
goes *packed* on one node when one can hold it (best fit: the node left with the fewest free GPUs,
ties lower index), else *spread* over the fewest nodes (largest free first, remainder best fit).
Preferred nodes (a job's current ones) are used first so that a job that keeps its types keeps
its pods.

Vectorised over ``S`` states (rows of ``free`` and ``prices``) because the queue DP of
:mod:`~walras.allocator.hadar.admission` evaluates every job at every pooled state; the per-state
price order is shared by all jobs (:class:`States`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Best:
    """Best allocations: ``payoff`` (``-inf`` where no gang fits), ``rate`` (work/s),
    ``utility``, ``cost`` and ``after`` (index of the state left behind, see :class:`States`),
    each of shape ``(S,)`` for one job or ``(n, S)`` for several; ``counts`` adds a trailing
    axis of GPUs per type (``T``), and is empty (trailing axis 0) unless asked for."""

    payoff: FloatArray
    counts: IntArray
    rate: FloatArray
    utility: FloatArray
    cost: FloatArray
    after: IntArray


class States:
    """Pooled states shared by every job of a round: free GPUs ``(S, T)`` and their prices.

    Sorting each state's allowed types by price is the same work for every job with the same
    allowed set, so it is cached per allowed set (at most ``T! · T`` of them). ``strides (T,)``
    numbers the states (``index = free @ strides``) for the queue DP; leave it zero otherwise.
    Views are stored type-major, ``(n, S)``, so that sums over the few types are fast.
    """

    def __init__(self, free: IntArray, prices: FloatArray, strides: IntArray | None = None) -> None:
        self.free = free
        self.prices = prices
        self.strides = np.zeros(free.shape[1], dtype=np.int64) if strides is None else strides
        self._views: dict[tuple[int, ...], tuple[IntArray, IntArray, FloatArray, IntArray]] = {}

    def view(self, allowed: tuple[int, ...]) -> tuple[IntArray, IntArray, FloatArray, IntArray]:
        """For types ``allowed`` (fastest first), per state in the fill order (cheapest first,
        ties faster): ``(types, free, prices, free before this position)``, each ``(n, S)``.
        Prices of types with no free GPU are 0 here (they are never taken)."""
        cached = self._views.get(allowed)
        if cached is None:
            cols = np.array(allowed, dtype=np.int64)
            pa = self.prices[:, cols]
            o = np.argsort(pa, axis=1, kind="stable")
            types = cols[o]
            fo = np.take_along_axis(self.free[:, cols], o, axis=1)
            po = np.where(fo > 0, np.take_along_axis(pa, o, axis=1), 0.0)
            before = np.cumsum(fo, axis=1) - fo
            cached = (
                np.ascontiguousarray(types.T),
                np.ascontiguousarray(fo.T),
                np.ascontiguousarray(po.T),
                np.ascontiguousarray(before.T),
            )
            self._views[allowed] = cached
        return cached


def find_alloc(
    speed: FloatArray,
    gang: int,
    free: IntArray,
    prices: FloatArray,
    value: Callable[[FloatArray], FloatArray],
) -> Best:
    """Best allocation of a ``gang``-GPU job with per-type rates ``speed (T,)``, with counts.

    Args:
        speed: ``throughput[j]``; 0 marks a type the job cannot use.
        gang: ``W_j``.
        free: ``(S, T)`` pooled free GPUs per type in each state.
        prices: ``(S, T)`` price of one GPU per type in each state.
        value: utility of running at rates ``(n,)`` (restart and elapsed time included).
    """
    usable = speed > 0
    utils = np.zeros(speed.shape[0])
    utils[usable] = value(speed[usable])
    many = best_many(
        States(free, prices), speed[None, :], np.array([gang]), utils[None, :], counts=True
    )
    return Best(
        many.payoff[0], many.counts[0], many.rate[0], many.utility[0], many.cost[0], many.after[0]
    )


def best_many(
    states: States,
    speeds: FloatArray,
    gangs: IntArray,
    utils: FloatArray,
    *,
    counts: bool = False,
    details: bool = True,
    chunk_cells: int = 1_000_000,
) -> Best:
    """FIND_ALLOC for ``n`` jobs at every state at once; fields are ``(n, S)``.

    Args:
        states: the pooled states and their prices.
        speeds: ``(n, T)`` per-type rates (0: unusable).
        gangs: ``(n,)`` gang sizes.
        utils: ``(n, T)`` each job's utility when it runs at ``speeds[i, t]`` (the rate is
            always one of the job's own speeds, so this is all of the utility FIND_ALLOC needs).
        counts: also return GPUs per type, ``(n, S, T)``.
        details: also return rate, utility and cost (else they are empty, ``(n, 0)``: the queue
            DP needs only payoff and ``after``, and this halves its memory).
        chunk_cells: jobs are processed in chunks of about this many ``(job, type, state)``
            cells, to bound memory.
    """
    n, T = speeds.shape
    S = states.free.shape[0]
    best_pay = np.full((n, S), -np.inf)
    best_rate = np.zeros((n, S if details else 0))
    best_util = np.zeros((n, S if details else 0))
    best_cost = np.zeros((n, S if details else 0))
    best_after = np.zeros((n, S), dtype=np.int64)
    best_counts = np.zeros((n, S, T if counts else 0), dtype=np.int64)
    # Each job's bottlenecks, fastest first; types tied in speed form one bottleneck.
    orders = np.argsort(-speeds, axis=1, kind="stable")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in range(n):
        sp, order = speeds[i], orders[i]
        n_positive = int((sp > 0).sum())
        for n_allowed in range(1, n_positive + 1):
            if n_allowed < n_positive and sp[order[n_allowed]] == sp[order[n_allowed - 1]]:
                continue
            groups.setdefault(tuple(int(t) for t in order[:n_allowed]), []).append(i)
    columns = np.arange(S)
    # Shorter prefixes first, so that each job meets its bottlenecks fastest first and keeps
    # the faster one on a tie (strict ``>`` below).
    for allowed in sorted(groups, key=len):
        types, fo, po, before = states.view(allowed)
        members = np.array(groups[allowed], dtype=np.int64)
        if not details and not counts:
            _payoff_by_gang(
                allowed,
                members,
                (types, fo, po, before),
                speeds,
                gangs,
                utils,
                states.strides,
                best_pay,
                best_after,
            )
            continue
        step = max(1, chunk_cells // (len(allowed) * S))
        for lo in range(0, members.size, step):
            idx = members[lo : lo + step]
            g = gangs[idx]
            take = np.minimum(np.maximum(g[:, None, None] - before[None], 0), fo[None])
            feasible = (before[-1] + fo[-1])[None, :] >= g[:, None]
            cost = (take * po[None]).sum(axis=1)
            slowest = np.where(take > 0, speeds[idx][:, types], np.inf).argmin(axis=1)
            slow_type = types[slowest, columns[None, :]]
            util = utils[idx[:, None], slow_type]
            pay = np.where(feasible, util - cost, -np.inf)
            better = pay > best_pay[idx]
            if not better.any():
                continue
            best_pay[idx] = np.where(better, pay, best_pay[idx])
            if details:
                rate = speeds[idx[:, None], slow_type]
                best_rate[idx] = np.where(better, rate, best_rate[idx])
                best_util[idx] = np.where(better, util, best_util[idx])
                best_cost[idx] = np.where(better, cost, best_cost[idx])
            after = (take * states.strides[types][None]).sum(axis=1)
            best_after[idx] = np.where(better, after, best_after[idx])
            if counts:
                c = np.zeros((idx.size, T, S), dtype=np.int64)
                c[np.arange(idx.size)[:, None, None], types[None], columns[None, None, :]] = take
                best_counts[idx] = np.where(
                    better[:, :, None], c.transpose(0, 2, 1), best_counts[idx]
                )
    if details:
        best_rate = np.where(np.isfinite(best_pay), best_rate, 0.0)
    return Best(best_pay, best_counts, best_rate, best_util, best_cost, best_after)


def _payoff_by_gang(
    allowed: tuple[int, ...],
    members: IntArray,
    view: tuple[IntArray, IntArray, FloatArray, IntArray],
    speeds: FloatArray,
    gangs: IntArray,
    utils: FloatArray,
    strides: IntArray,
    best_pay: FloatArray,
    best_after: IntArray,
) -> None:
    """:func:`best_many`'s step for one bottleneck ``allowed``, payoff and ``after`` only (the
    queue DP's case), updating ``best_pay`` and ``best_after`` in place.

    The fill (``take``), its cost, feasibility and the state left behind depend on the job only
    through its gang size, so they are computed once per gang size, not once per job: the same
    operations on the same numbers (a sum over the few types, in fill order), so the same floats.
    The slowest taken type is the job's own: where the job's speeds over ``allowed`` strictly
    fall (fastest first), it is the taken type ranked last in ``allowed``, the same for every
    such job; a job with tied speeds there takes ``best_many``'s own argmin (its first slowest
    taken type in fill order).
    """
    types, fo, po, before = view
    S = types.shape[1]
    columns = np.arange(S)
    rank_of = np.full(speeds.shape[1], -1, dtype=np.int64)
    rank_of[list(allowed)] = np.arange(len(allowed))
    rank = rank_of[types]  # (A, S): each fill position's rank in ``allowed``
    in_order = speeds[members][:, list(allowed)]
    strict = (np.diff(in_order, axis=1) < 0).all(axis=1)
    total = before[-1] + fo[-1]
    stride = strides[types]
    member_gangs = gangs[members]
    for g in np.unique(member_gangs):
        take = np.minimum(np.maximum(g - before, 0), fo)
        feasible = total >= g
        cost = (take * po).sum(axis=0)
        after = (take * stride).sum(axis=0)
        taken = take > 0
        of_gang = member_gangs == g
        for idx, fast in ((members[of_gang & strict], True), (members[of_gang & ~strict], False)):
            if idx.size == 0:
                continue
            if fast:
                slowest = np.where(taken, rank, -1).argmax(axis=0)
                util = utils[idx][:, types[slowest, columns]]
            else:
                sp = np.where(taken[None], speeds[idx][:, types], np.inf)
                util = utils[idx[:, None], types[sp.argmin(axis=1), columns[None, :]]]
            pay = np.where(feasible[None, :], util - cost[None, :], -np.inf)
            better = pay > best_pay[idx]
            best_pay[idx] = np.where(better, pay, best_pay[idx])
            best_after[idx] = np.where(better, after[None, :], best_after[idx])


def best_one(
    speed: FloatArray, gang: int, free: IntArray, prices: FloatArray, utils: FloatArray
) -> tuple[float, IntArray, float, float, float]:
    """FIND_ALLOC for one job at one state: ``(payoff, counts (T,), rate, utility, cost)``,
    what :func:`best_many` returns at ``S = 1`` (``payoff = -inf`` and the rest 0 when no gang
    fits), computed on Python floats in the same order of operations, so the numbers are the
    same to the last bit.

    Why a second form: the queue's forward pass evaluates one job at one state at a time, tens
    of thousands of times a run, where ``best_many``'s array set-up costs more than its work on
    a handful of types.
    """
    sp: list[float] = speed.tolist()
    fr: list[int] = free.tolist()
    pr: list[float] = prices.tolist()
    ut: list[float] = utils.tolist()
    n_types = len(sp)
    # Bottlenecks fastest first, ties in speed one bottleneck (as best_many's groups).
    order = sorted(range(n_types), key=lambda t: -sp[t])
    n_positive = sum(1 for x in sp if x > 0)
    best_pay, best_rate, best_util, best_cost = -math.inf, 0.0, 0.0, 0.0
    best_counts = [0] * n_types
    for n_allowed in range(1, n_positive + 1):
        if n_allowed < n_positive and sp[order[n_allowed]] == sp[order[n_allowed - 1]]:
            continue
        allowed = order[:n_allowed]
        # Cheapest first, ties in the allowed (fastest-first) order: a stable sort, as argsort.
        types = sorted(allowed, key=lambda t: pr[t])
        before, cost, slow, total = 0, 0.0, -1, 0
        counts = [0] * n_types
        for i, t in enumerate(types):
            f = fr[t]
            take = min(max(gang - before, 0), f)
            po = pr[t] if f > 0 else 0.0
            cost = take * po if i == 0 else cost + take * po
            if take > 0 and (slow < 0 or sp[t] < sp[slow]):
                slow = t  # first of the slowest taken types (argmin)
            counts[t] = take
            before += f
            total += f
        if slow < 0:
            slow = types[0]  # nothing taken: argmin over all-inf picks the first
        pay = ut[slow] - cost if total >= gang else -math.inf
        if pay > best_pay:
            best_pay, best_rate, best_util, best_cost = pay, sp[slow], ut[slow], cost
            best_counts = counts
    if not math.isfinite(best_pay):
        best_rate = 0.0
    return best_pay, np.array(best_counts, dtype=np.int64), best_rate, best_util, best_cost


def layout(
    counts: IntArray,
    free: IntArray,
    node_type: IntArray,
    prefer: IntArray | None = None,
) -> tuple[tuple[int, int], ...]:
    """Pods per node for ``counts (T,)`` GPUs per type; takes them from ``free (K,)`` in place.

    ``prefer (K,)``: pods the job has on each node now; those nodes are filled first, up to that
    many pods each. Raises ``ValueError`` if ``free`` cannot hold ``counts`` (a caller bug: counts
    come from the pooled free GPUs).
    """
    taken: dict[int, int] = {}
    for r in np.flatnonzero(counts):
        need = int(counts[r])
        nodes = np.flatnonzero(node_type == r)
        if prefer is not None:
            for n in sorted(nodes, key=lambda m: (-int(prefer[m]), int(m))):
                use = min(need, int(prefer[n]), int(free[n]))
                if use > 0:
                    taken[int(n)] = taken.get(int(n), 0) + use
                    free[n] -= use
                    need -= use
        while need > 0:
            avail = free[nodes]
            if int(avail.sum()) < need:
                raise ValueError(f"type {r}: {need} GPUs wanted, {int(avail.sum())} free")
            fit = np.flatnonzero(avail >= need)
            if fit.size:
                k = int(nodes[fit[np.argmin(avail[fit])]])  # best fit; argmin: lowest index
                use = need
            else:
                k = int(nodes[np.argmax(avail)])  # largest first: fewest nodes
                use = int(free[k])
            taken[k] = taken.get(k, 0) + use
            free[k] -= use
            need -= use
    return tuple(sorted(taken.items()))

"""FIND_ALLOC: a job's best allocation at the current prices (paper 003 Algorithm 2, lines 24–36).

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
:mod:`~walras.allocator.hadar.admission` evaluates every job at every pooled state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Best:
    """Best allocation per state: ``payoff (S,)`` (``-inf`` if no gang fits), ``counts (S, T)``
    GPUs per type, ``rate (S,)`` work/s, ``utility (S,)`` and ``cost (S,)``."""

    payoff: FloatArray
    counts: IntArray
    rate: FloatArray
    utility: FloatArray
    cost: FloatArray


def find_alloc(
    speed: FloatArray,
    gang: int,
    free: IntArray,
    prices: FloatArray,
    value: Callable[[FloatArray], FloatArray],
) -> Best:
    """Best allocation of a ``gang``-GPU job with per-type rates ``speed (T,)``.

    Args:
        speed: ``throughput[j]``; 0 marks a type the job cannot use.
        gang: ``W_j``.
        free: ``(S, T)`` pooled free GPUs per type in each state.
        prices: ``(S, T)`` price of one GPU per type in each state.
        value: utility of running at rates ``(S,)`` (restart and elapsed time included).
    """
    S, T = free.shape
    order = np.argsort(-speed, kind="stable")
    xs = speed[order]
    fs = free[:, order]
    ps = prices[:, order]
    best_pay = np.full(S, -np.inf)
    best_counts = np.zeros((S, T), dtype=np.int64)
    best_rate = np.zeros(S)
    best_util = np.zeros(S)
    best_cost = np.zeros(S)
    n_positive = int((xs > 0).sum())
    for n_allowed in range(1, n_positive + 1):
        # Types tied in speed form one bottleneck: allow all of them together.
        if n_allowed < n_positive and xs[n_allowed] == xs[n_allowed - 1]:
            continue
        pa = ps[:, :n_allowed]
        fa = fs[:, :n_allowed]
        o = np.argsort(pa, axis=1, kind="stable")  # columns are by speed: ties go to faster
        fo = np.take_along_axis(fa, o, axis=1)
        before = np.cumsum(fo, axis=1) - fo
        take = np.clip(gang - before, 0, fo)
        feasible = take.sum(axis=1) == gang
        counts = np.zeros((S, n_allowed), dtype=np.int64)
        np.put_along_axis(counts, o, take, axis=1)
        cost = np.where(counts > 0, counts * np.where(np.isfinite(pa), pa, 0.0), 0.0).sum(axis=1)
        rate = np.where(counts > 0, xs[:n_allowed], np.inf).min(axis=1)
        rate = np.where(feasible, rate, 0.0)
        util = value(np.where(feasible, rate, 1.0))
        pay = np.where(feasible, util - cost, -np.inf)
        better = pay > best_pay  # strict: on a tie the faster bottleneck (found first) stays
        if better.any():
            best_pay = np.where(better, pay, best_pay)
            best_rate = np.where(better, rate, best_rate)
            best_util = np.where(better, util, best_util)
            best_cost = np.where(better, cost, best_cost)
            best_counts[better, :n_allowed] = counts[better]
            best_counts[better, n_allowed:] = 0
    out = np.zeros_like(best_counts)
    out[:, order] = best_counts
    return Best(best_pay, out, best_rate, best_util, best_cost)


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

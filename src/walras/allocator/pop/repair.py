"""Price-spread repair for price discovery under POP (Walras's own step, docs/algorithms.md#pop).

Plain POP gives shard s the capacity ``R_s = R/k`` and solves it alone; its prices ``p_s`` are
the marginal utility of one more GPU of each type *in that shard*. If shard prices of a type
differ, moving capacity of that type from a low-price to a high-price shard raises total utility
(to first order by ``(p_hi − p_lo)·δ``): this is one step of primal decomposition (price discovery
§7, POP §5.2). The repair:

1. spread per type ``σ_j = max_s p_sj / min_s p_sj − 1`` over shards with jobs; stop when
   ``max_j σ_j ≤ tol`` (or the round budget is spent);
2. common prices ``p̄_j = Σ_s R_sj p_sj / R_j`` (capacity-weighted mean);
3. each shard's demand at the common prices, ``D_sj = Σ_{i∈s} d_ij x̃_ij(p̄)`` (one best-response
   pass): at the exact equilibrium prices every shard would demand exactly its capacity;
4. for every type with ``σ_j > tol``: ``R_sj ← (1−η) R_sj + η R_j D_sj / Σ_s D_sj`` (floored at
   ``1e-3·R_j/k`` and at the largest job demand of the type in the shard, so a shard never
   loses a type and no job loses the last type it fits on; rescaled to sum to ``R_j``), which
   moves capacity from shards whose demand at p̄ is below their capacity (low price) to those
   above it (high price);
5. re-solve only the shards whose capacity moved, warm-started at ``p̄``;
6. keep the best merged configuration seen (total utility never decreases); if a round made the
   total worse, go back to the best one and halve ``η`` (start ``η = 1``).

Example: one type, R = 4, log utility, throughput 1; shard 0 has 6 jobs, shard 1 has 4. Plain
POP: R_s = 2, p_0 = 6/2 = 3, p_1 = 4/2 = 2, σ = 0.5. p̄ = 2.5; at p̄ every job wants
t = 1/2.5 = 0.4, so the demands are 2.4 and 1.6 and R_s becomes (2.4, 1.6); re-solved prices are
(2.5, 2.5), σ = 0, and the utility rises from 6 log(1/3) + 4 log(1/2) ≈ −9.36 to
10 log(0.4) ≈ −9.16, the exact optimum.

Called by ``pop.pricing_pop.solve_pricing``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from walras.allocator.pop.split import FloatArray, fit_sum

FLOOR = 1e-3


@dataclass(frozen=True)
class Config:
    """One capacity split with the shards' answers: capacities, prices, utilities, results."""

    caps: FloatArray  # (k, m)
    prices: FloatArray  # (k, m); rows of empty shards are ignored
    utility: FloatArray  # (k,)
    results: tuple[Any, ...]  # the shard solver's results (None for an empty shard)

    @property
    def total(self) -> float:
        """Merged utility Σ_s U_s."""
        return math.fsum(self.utility.tolist())


def spread(prices: FloatArray, active: Sequence[bool]) -> FloatArray:
    """``(m,)`` relative price spread ``max_s p_sj / min_s p_sj − 1`` over active shards."""
    p = prices[np.asarray(active, dtype=bool)]
    if len(p) <= 1:
        return np.zeros(prices.shape[1])
    hi, lo = p.max(axis=0), p.min(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(hi <= 0, 0.0, np.where(lo > 0, hi / lo - 1.0, np.inf))
    return np.asarray(out, dtype=np.float64)


def mean_prices(prices: FloatArray, caps: FloatArray, active: Sequence[bool]) -> FloatArray:
    """Capacity-weighted mean of the active shards' prices, per type."""
    a = np.asarray(active, dtype=bool)
    w = caps[a]
    tot = w.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        avg = np.where(tot > 0, (w * prices[a]).sum(axis=0) / tot, prices[a].mean(axis=0))
    return np.asarray(np.maximum(avg, 0.0), dtype=np.float64)


def move_capacity(
    caps: FloatArray,
    demand: FloatArray,
    capacity: FloatArray,
    types: Sequence[int],
    active: Sequence[bool],
    eta: float,
    floor: FloatArray | None = None,
) -> FloatArray:
    """Step 4 of the module docstring for the given types; other types keep their split.

    ``floor`` (k, m): no shard's capacity of a type goes below ``min(current, floor)`` (the
    largest job demand there, so no job loses the last type it fits on); the rest of the
    move is taken from the shards above their floor, in proportion to what they have above it.
    """
    new = caps.copy()
    a = np.asarray(active, dtype=bool)
    k_active = int(a.sum())
    for j in types:
        total_d = float(demand[a, j].sum())
        if total_d <= 0 or k_active <= 1:
            continue
        target = np.where(a, capacity[j] * demand[:, j] / total_d, 0.0)
        col = (1.0 - eta) * caps[:, j] + eta * target
        low = np.full(len(col), FLOOR * capacity[j] / k_active)
        if floor is not None:
            low = np.maximum(low, floor[:, j])
        low = np.where(a, np.minimum(low, caps[:, j]), 0.0)
        col = np.where(a, np.maximum(col, low), 0.0)
        excess = float(col.sum()) - float(capacity[j])
        room = col - low
        if excess > 0 and room.sum() > 0:
            col = col - excess * room / room.sum()
        elif excess < 0:
            col = col - excess * col / col.sum()
        new[:, j] = fit_sum(np.maximum(col, low), float(capacity[j]))
    return new


@dataclass(frozen=True)
class Outcome:
    """The repair's answer: the best configuration and the book-keeping for its report."""

    best: Config
    rounds: int
    resolves: int
    solves: FloatArray  # (k,) solves per shard during the repair


def run(
    plain: Config,
    capacity: FloatArray,
    active: Sequence[bool],
    demand_at: Callable[[FloatArray, FloatArray], FloatArray],
    resolve: Callable[[Config, Sequence[int], FloatArray, FloatArray], Config],
    *,
    tol: float,
    rounds: int,
    floor: FloatArray | None = None,
) -> Outcome:
    """The repair loop (module docstring).

    Args:
        demand_at: ``(caps, p̄) → (k, m)`` each shard's demand at common prices.
        resolve: ``(base, changed shards, caps, p̄) → Config`` re-solving only ``changed``;
            the other shards keep their answers from ``base`` (their capacity did not move).
    """
    k = plain.caps.shape[0]
    best = current = plain
    eta = 1.0
    done = resolves = 0
    solves = np.zeros(k)
    while done < rounds:
        sigma = spread(current.prices, active)
        types = [j for j in range(len(capacity)) if sigma[j] > tol]
        if not types:
            break
        done += 1
        p_bar = mean_prices(current.prices, current.caps, active)
        demand = demand_at(current.caps, p_bar)
        caps = move_capacity(current.caps, demand, capacity, types, active, eta, floor)
        moved = np.abs(caps - current.caps).max(axis=1) > 1e-12 * max(float(capacity.max()), 1)
        changed = [s for s in range(k) if moved[s] and active[s]]
        if not changed:
            break
        nxt = resolve(current, changed, caps, p_bar)
        resolves += len(changed)
        solves[changed] += 1
        if nxt.total > best.total:
            best = current = nxt
        else:
            # Worse (or no better): step back to the best split and move less next time.
            current = best
            eta /= 2.0
    return Outcome(best, done, resolves, solves)

"""The queue's choice: which waiting jobs run this round (Hadar's Algorithm 2, payoff fixed).

Jobs are taken in queue order (longest waiting first, ties lower index). Admitting job ``j`` at
pooled state ``s`` (free GPUs per type) gives it its FIND_ALLOC allocation ``w_j(s)`` at the prices
``k(γ = c - s)`` and earns ``payoff_j(s) = U_j - Σ k w_j(s)``; prices then rise for the jobs after
it. The paper's DP keeps the cheaper of "take j" and "skip j", comparing *cost* only, which prefers
running nothing. Walras maximises total *payoff* instead::

    V_i(s) = max( V_{i+1}(s),  payoff_i(s) + V_{i+1}(s - w_i(s))  if payoff_i(s) > 0 )

``dp`` solves this recursion exactly, bottom-up over every pooled state ``s ≤ s_0`` at once
(``Π_r (s_0^r + 1)`` states, vectorised), then walks forward from ``s_0``. Guarantee: among all
subsets of the queue, admitted in queue order with each job at its FIND_ALLOC allocation and every
admitted payoff positive, it returns one of maximum total payoff (ties: admit). It is exact for the
pooled model, where any type counts within the pooled free GPUs can be laid out on nodes.

**Running jobs (restart-aware re-planning).** A job that runs now may come with a *stay* option
(``QueueJob.stay``: its GPUs per type now, ``stay_utility``: its utility if it keeps them, no
restart). Its payoff at state ``s`` is then the better of staying and its FIND_ALLOC allocation,
whose utilities include the restart::

    payoff_j(s) = max( U_j(e_j + rem_j / rate_now) − Σ_r k^r(s) · now_r   if now ≤ s,
                       U_j(e_j + restart + rem_j / rate(w)) − Σ_r k^r(s) · w_r )

so a running job is moved only when the move's payoff beats staying by more than what the restart
costs it, and it loses its GPUs to waiting jobs only when their payoff exceeds its own with the
restart seconds it saves credited. Ties go to staying. The DP stays exact with this option (it is
one more candidate per state), and keeps its guarantee with "best response" meaning the better of
the two.

``greedy`` is the paper's online primal-dual rule: admit each job in turn iff its payoff is
positive. It is one of the subsets the DP considers, so the DP's total payoff is never lower; the
greedy rule is the one with the competitive ratio of :mod:`~walras.allocator.hadar.prices`. The
DP is used when ``queue length × states ≤ dp_max_cells`` (``auto``), the greedy rule otherwise:
20 V100 + 20 P100 + 20 K80 give 9,261 states, so 480 queued jobs are 4.4 M cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from walras.allocator.hadar.find_alloc import States, best_many, best_one
from walras.allocator.hadar.prices import price

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Method = Literal["auto", "dp", "greedy"]

DP_MAX_CELLS = 5_000_000
"""Default bound on ``queue length × pooled states`` for the exact DP. The DP keeps a payoff and
a next state per cell (16 bytes: 80 MB at the bound); 480 jobs × 9,261 states take about 1 s of
CPU."""


@dataclass(frozen=True, slots=True)
class QueueJob:
    """What the queue choice needs of one job: its per-type rates, gang size and its utility at
    each of those rates (0 where the rate is 0), restart paid; for a running job, optionally its
    GPUs per type now (``stay``) and its utility if it keeps them (``stay_utility``, no restart)."""

    job: int
    speed: FloatArray
    gang: int
    utils: FloatArray
    stay: IntArray | None = None
    stay_utility: float = 0.0
    stay_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class Admitted:
    """One admitted job: GPUs per type, rate, and the utility, cost, payoff it was admitted at."""

    job: int
    counts: IntArray
    rate: float
    utility: float
    cost: float
    payoff: float


@dataclass(frozen=True, slots=True)
class Market:
    """Pooled capacity ``cap (T,)`` and price bounds of this round."""

    cap: FloatArray
    u_min: FloatArray
    u_max: FloatArray

    def prices(self, free: IntArray) -> FloatArray:
        """Prices at pooled free GPUs ``free (..., T)`` (allocated = capacity - free)."""
        return price(self.cap - free, self.cap, self.u_min, self.u_max)


def choose(
    queue: Sequence[QueueJob],
    free0: IntArray,
    market: Market,
    method: Method = "auto",
    dp_max_cells: int = DP_MAX_CELLS,
) -> tuple[list[Admitted], Literal["dp", "greedy"]]:
    """Admitted jobs in queue order, and the method used."""
    n_states = int(np.prod(free0.astype(np.float64) + 1.0))
    use_dp = method == "dp" or (method == "auto" and len(queue) * n_states <= dp_max_cells)
    if use_dp and queue:
        return _forward(queue, free0, market, _dp_table(queue, free0, market)), "dp"
    return _forward(queue, free0, market, None), "greedy"


def admit_all(queue: Sequence[QueueJob], free0: IntArray, market: Market) -> list[Admitted]:
    """Every job in queue order that still fits, at its FIND_ALLOC allocation, whatever its
    payoff (the planner's opt-in backfill)."""
    return _forward(queue, free0, market, None, require_positive=False)


def _dp_table(queue: Sequence[QueueJob], free0: IntArray, market: Market) -> npt.NDArray[np.bool_]:
    """``admit[i, s]``: take queue job ``i`` at state index ``s`` (C order over ``free0 + 1``)."""
    dims = tuple(int(d) + 1 for d in free0)
    grid = np.indices(dims).reshape(len(dims), -1).T.astype(np.int64)
    states = States(grid, market.prices(grid), _strides(free0))
    admit = np.zeros((len(queue), grid.shape[0]), dtype=bool)
    # A job that fits in no state (all are within free0) is never admitted: skip it.
    room = free0.astype(np.int64)
    fits = [i for i, q in enumerate(queue) if int(room[q.speed > 0].sum()) >= q.gang]
    if not fits:
        return admit
    # FIND_ALLOC does not depend on the DP's values: evaluate every job at every state at once.
    best = best_many(
        states,
        np.array([queue[i].speed for i in fits]),
        np.array([queue[i].gang for i in fits], dtype=np.int64),
        np.array([queue[i].utils for i in fits]),
        details=False,
    )
    value = np.zeros(grid.shape[0])
    index = np.arange(grid.shape[0])
    for row in range(len(fits) - 1, -1, -1):
        pay, after = best.payoff[row], best.after[row]
        stay = queue[fits[row]].stay
        if stay is not None:
            stay_pay = _stay_payoff(stay, queue[fits[row]].stay_utility, grid, states.prices)
            better = stay_pay >= pay  # ties: stay (no restart)
            pay = np.where(better, stay_pay, pay)
            after = np.where(better, int(stay @ states.strides), after)
        take = pay + value[index - after]
        do = (pay > 0) & (take >= value)
        admit[fits[row]] = do
        value = np.where(do, take, value)
    return admit


def _strides(free0: IntArray) -> IntArray:
    dims = [int(d) + 1 for d in free0]
    return np.array([int(np.prod(dims[r + 1 :])) for r in range(len(dims))], dtype=np.int64)


def _forward(
    queue: Sequence[QueueJob],
    free0: IntArray,
    market: Market,
    table: npt.NDArray[np.bool_] | None,
    *,
    require_positive: bool = True,
) -> list[Admitted]:
    strides = _strides(free0)
    state = free0.astype(np.int64).copy()
    out: list[Admitted] = []
    if not queue:
        return out
    # What changes only when a job is admitted (the state): its prices, its index in the DP's
    # table, and the GPUs each job could use in it (``usable @ state``: integer sums, so the
    # numbers of the per-job ``state[speed > 0].sum()`` they replace).
    usable = np.array([q.speed > 0 for q in queue], dtype=np.int64)
    prices = market.prices(state)
    index = int(state @ strides)
    room: list[int] = (usable @ state).tolist()
    for i, q in enumerate(queue):
        if table is not None and not table[i, index]:
            continue
        if room[i] < q.gang and (q.stay is None or not bool((state >= q.stay).all())):
            # Neither a fresh gang nor staying fits: FIND_ALLOC's payoff is -inf and the job is
            # never admitted, so skip its evaluation (most of the queue once the GPUs are taken).
            continue
        # FIND_ALLOC at this one state (best_many's numbers, without its array set-up).
        payoff, counts, rate, utility, cost = best_one(q.speed, q.gang, state, prices, q.utils)
        pick = Admitted(q.job, counts, rate, utility, cost, payoff)
        if q.stay is not None:
            stay_pay = float(
                _stay_payoff(q.stay, q.stay_utility, state[None, :], prices[None, :])[0]
            )
            if stay_pay >= pick.payoff:  # ties: stay (no restart), as in the DP
                cost = q.stay_utility - stay_pay
                pick = Admitted(q.job, q.stay.copy(), q.stay_rate, q.stay_utility, cost, stay_pay)
        if table is None and not pick.payoff > (0 if require_positive else -np.inf):
            continue
        out.append(pick)
        state -= pick.counts
        prices = market.prices(state)
        index = int(state @ strides)
        room = (usable @ state).tolist()
    return out


def _stay_payoff(stay: IntArray, utility: float, free: IntArray, prices: FloatArray) -> FloatArray:
    """``(S,)``: payoff of a running job keeping its GPUs ``stay (T,)`` at each state (``-inf``
    where the state does not hold them), at the state's prices (before it keeps them)."""
    fits = (free >= stay[None, :]).all(axis=1)
    cost = (np.where(stay[None, :] > 0, prices, 0.0) * stay[None, :]).sum(axis=1)
    return np.where(fits, utility - cost, -np.inf)

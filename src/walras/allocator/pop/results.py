"""Immutable results of POP solves: the merged allocation plus what each shard certified.

Every result says whether it is exact or sharded (``run.sharded``, ``run.k``) and carries the
same certificates as the exact solver, per shard and merged:

- price discovery: each shard's duality gap ``g_s(p_s) − U_s`` (``ShardReport.certificate``);
  merged, the gap ``g(p̄) − U(X_POP)`` of the *full* problem at the shards' capacity-weighted
  mean prices ``p̄`` — an upper bound on how far POP is from the exact optimum;
- PS-DSF: each shard's Theorem 1/2 violation on its own sub-problem (0 for an exact PS-DSF
  allocation of that shard) and the merged allocation's violation on the full problem (not 0
  in general: POP is PS-DSF per shard, not globally);
- any other policy (``pop.generic``): whatever certificate the caller's shard solver returns.

With ``k = 1`` (and no client splitting) the result wraps the exact solver's own answer
unchanged, in ``exact``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from walras.allocator.pop.plan import Plan

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def frozen(x: Any) -> FloatArray:
    """``x`` as a read-only float64 array (results never change after they are returned)."""
    arr = np.array(x, dtype=np.float64)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class ShardReport:
    """One shard's solve.

    Attributes:
        index: shard number ``0..k-1``.
        rows: clients (jobs, tenants, virtual clients) in the shard.
        capacity: the shard's capacity (same shape as the problem's).
        wall_s, cpu_s: time of all the shard's solves (and, with the repair, its demand
            passes), measured where they ran.
        certificate: the shard solver's own certificate (pricing: duality gap; PS-DSF: Theorem
            1/2 violation; generic: what the caller's solver returns, ``nan`` if none).
        prices: the shard's prices (price discovery only).
        converged: the shard solver reported convergence.
        solves: how many times the shard was solved (> 1 after the price-spread repair).
        objective: the shard's own objective value (pricing: its utility ``U_s``; ``nan``
            where the solver has none).
    """

    index: int
    rows: int
    capacity: FloatArray
    wall_s: float
    cpu_s: float
    certificate: float
    prices: FloatArray | None = None
    converged: bool = True
    solves: int = 1
    objective: float = float("nan")


@dataclass(frozen=True)
class PopRun:
    """How a POP solve ran (common to every result).

    Attributes:
        sharded: ``False`` for the exact solver's answer (``k = 1``), ``True`` otherwise.
        k: number of shards.
        workers: worker processes used (1: in-process).
        splits: client splits made before partitioning (Narayanan et al. 2021 Algorithm 2).
        assignment: ``(n,)`` shard of every real client; ``-1`` for a client that was split
            (its halves may sit in several shards).
        shards: one report per shard.
        wall_s, cpu_s: the whole POP call (partition, solves, merge, repair, certificate), in
            the calling process; ``cpu_s`` does not include worker processes (sum
            ``shards[*].cpu_s`` for those).
    """

    sharded: bool
    k: int
    workers: int
    splits: int
    assignment: IntArray
    shards: tuple[ShardReport, ...]
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class RepairReport:
    """The price-spread repair (docs/algorithms.md#pop, Walras's own extra).

    Attributes:
        rounds: repair rounds run (each re-solves only the shards whose capacity moved).
        utility_plain: merged utility of plain POP (before any repair).
        utility: merged utility returned (the best seen; never below ``utility_plain``).
        recovered: ``utility − utility_plain``.
        spread_before, spread_after: largest relative price spread over types,
            ``max_s p_sj / min_s p_sj − 1``, for plain POP and for the returned configuration
            (on the prices the shards returned, each only as exact as its duality gap: a shard
            re-solved from p̄ that meets its ε at once returns p̄ itself).
        within_tolerance: the returned configuration's spread is at most the tolerance.
        resolves: shard solves the repair made.
    """

    rounds: int
    utility_plain: float
    utility: float
    recovered: float
    spread_before: float
    spread_after: float
    within_tolerance: bool
    resolves: int


@dataclass(frozen=True, eq=False)
class PopPricingResult:
    """Price discovery by POP (``pop.solve_pricing``).

    Attributes:
        allocation: ``(n, m)`` merged allocation (feasible by construction).
        throughput: ``(n,)`` ``a_i^T x_i``.
        utility: ``Σ_i u_i(a_i^T x_i)`` of the merged allocation.
        prices: ``(m,)`` capacity-weighted mean of the shards' prices (exact prices for k = 1).
        shard_prices: ``(k, m)`` each shard's prices.
        dual_bound: ``g(prices)`` of the full problem (an upper bound on the exact optimum), or
            ``nan`` when ``certify=False``.
        gap: ``dual_bound − utility`` (merged duality gap; ``nan`` when not certified).
        repair: the price-spread repair's report (``None`` when not run).
        exact: the exact solver's result when ``k = 1``.
    """

    allocation: FloatArray
    throughput: FloatArray
    utility: float
    prices: FloatArray
    shard_prices: FloatArray
    dual_bound: float
    gap: float
    run: PopRun
    repair: RepairReport | None = None
    exact: Any = field(default=None, repr=False)


@dataclass(frozen=True, eq=False)
class PopFairnessResult:
    """PS-DSF by POP (``pop.solve_fairness``).

    Attributes:
        tasks: ``(N, K)`` merged tasks per tenant and node (feasible by construction).
        totals: ``(N,)`` tasks per tenant.
        certificate_violation: Theorem 1 (RDM) / 2 (TDM) violation of the merged allocation on
            the full problem (0 only when the merged allocation happens to be PS-DSF).
        shard_violation: largest per-shard violation (each shard on its own sub-problem).
        mode: ``"tdm"`` or ``"rdm"``.
        converged: every shard's solver converged.
        exact: the exact solver's result when ``k = 1``.
    """

    tasks: FloatArray
    totals: FloatArray
    certificate_violation: float
    shard_violation: float
    mode: str
    converged: bool
    run: PopRun
    exact: Any = field(default=None, repr=False)


@dataclass(frozen=True, eq=False)
class PopAllocation:
    """Any row-wise policy by POP (``pop.solve_rows``): ``(n, T)`` merged allocation."""

    allocation: FloatArray
    run: PopRun


def sharded_run(
    plan: Plan, shards: list[ShardReport], workers: int, wall0: float, cpu0: float
) -> PopRun:
    """The ``PopRun`` of a sharded solve that started at ``wall0``/``cpu0``."""
    return PopRun(
        sharded=plan.k > 1 or plan.clients.splits > 0,
        k=plan.k,
        workers=workers,
        splits=plan.clients.splits,
        assignment=plan.real_assignment,
        shards=tuple(shards),
        wall_s=time.perf_counter() - wall0,
        cpu_s=time.process_time() - cpu0,
    )


def exact_run(n: int, report: ShardReport, wall0: float, cpu0: float) -> PopRun:
    """The ``PopRun`` of an exact (k = 1) solve: one shard holding all ``n`` clients."""
    return PopRun(
        sharded=False,
        k=1,
        workers=1,
        splits=0,
        assignment=np.zeros(n, dtype=np.int64),
        shards=(report,),
        wall_s=time.perf_counter() - wall0,
        cpu_s=time.process_time() - cpu0,
    )

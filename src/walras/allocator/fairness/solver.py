"""Centralised PS-DSF: TDM through market prices, else per-node DRF start and Gauss–Seidel sweeps.

**TDM fast path** (default, ``method="auto"``): ``fairness.market`` solves the linear Fisher
market whose equilibrium is TDM PS-DSF (Newton on the smoothed dual, exact prices on the tight
support, Sinkhorn split). Its answer is kept only when Theorem 2's certificate is at most
``MARKET_ACCEPT``; otherwise — in particular whenever a demand cap binds, which the market does
not model — the sweeps below run, warm-started from the market answer.

Sweeps (the PS-DSF paper's Algorithm I, docs/algorithms.md#ps-dsf; RDM always, TDM as fallback):

1. Start from DRF on every node alone (the water-fill with nothing elsewhere, ``b = 0``) — under
   TDM this is the time-shared DRF, under RDM the classic progressive-filling DRF.
2. Sweep nodes ``i = 0..K-1`` in order; each runs the exact water-fill of ``fairness.waterfill``
   against the tenants' current tasks elsewhere ``b_n = x_n − x_{n,i}`` and writes its column
   back at once (Gauss–Seidel).
3. Stop when no time share ``x_{n,i}/γ_{n,i}`` changed by more than ``tol`` in a sweep, or when
   an exact finish is certified: under TDM ``fairness.crossover`` (the support's linear
   system), under RDM ``fairness.rdm_crossover`` (from ``RDM_CROSSOVER_FIRST`` sweeps on: the
   bottleneck structure's levels on a spanning forest, then the split by matrix scaling). A
   finish is kept only if its certificate is at most ``CROSSOVER_ACCEPT``.
4. Certify the result with Theorem 1 (RDM) / Theorem 2 (TDM) (``fairness.certificates``).

Uniqueness: the tenant totals (and the node levels) are unique under TDM, because the
Eisenberg–Gale objective is strictly concave in the totals. The split of a total across nodes is
not always unique — e.g. two tenants with proportional ``γ`` rows on two nodes can trade time
between them. The market path then returns the maximum-entropy split of the spending (tied
tenants spread over tied nodes in proportion); the sweeps return the one their deterministic
forward order from the DRF start reaches. For the paper's table both are exactly the paper's
rows.

Under TDM each step exactly maximises the Eisenberg–Gale objective ``Σ φ_n log x_n`` over one
node's block, the blocks' constraint sets are independent and each block maximiser is unique, so
the sweeps are block-coordinate ascent and converge to PS-DSF. Under RDM the paper leaves
convergence open (the sweeps alone crawl: 5.8e-3 after 22 sweeps at K = N = 1,000); the exact
finish turns a settled structure into an allocation certified to rounding (10 sweeps there),
and otherwise the certificate reports how close the sweeps got.

Called by the operator's centralised ``psdsf`` policy, ``walras fairshare`` and the benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.certificates import certificate, node_levels
from walras.allocator.fairness.crossover import tdm_crossover
from walras.allocator.fairness.market import tdm_market
from walras.allocator.fairness.problem import (
    BoolArray,
    FairnessProblem,
    FloatArray,
    IntArray,
    dominant_resources,
    monopoly_tasks,
    screen,
)
from walras.allocator.fairness.rdm_crossover import rdm_crossover
from walras.allocator.fairness.waterfill import rdm_fill, tdm_fill

Mode = Literal["tdm", "rdm"]
Method = Literal["auto", "market", "sweeps"]

# A market answer is kept only if Theorem 2 holds to this; otherwise the sweeps run.
MARKET_ACCEPT = 1e-9
# A crossover guess is kept only if Theorem 2 holds to this (it is exact up to rounding).
CROSSOVER_ACCEPT = 1e-9
# Try the exact finish only once sweeps move time shares by less than this (support nearly set).
CROSSOVER_WHEN = 1e-2
# RDM: the first exact finish after this many sweeps, then every so often (a failed try costs
# about three sweeps; at K = N = 1000 the bottleneck structure is right after about 10 sweeps).
RDM_CROSSOVER_FIRST = 10
RDM_CROSSOVER_EVERY = 3
RDM_CROSSOVER_WHEN = 0.1


@dataclass(frozen=True, eq=False)
class FairnessResult:
    """Outcome of :func:`solve` (immutable; arrays are read-only).

    Attributes:
        tasks: ``(N, K)`` tasks ``x_{n,i}`` (work units with throughput).
        totals: ``(N,)`` ``x_n = Σ_i x_{n,i}``.
        vds: ``(N, K)`` virtual dominant shares ``x_n / (φ_n γ_{n,i})``; ``inf`` where ineligible.
        levels: ``(K,)`` VDS level of each node: the smallest VDS among its eligible tenants that
            are below their cap (``1/λ_i``, the inverse Eisenberg–Gale price, under TDM); ``inf``
            if it has none.
        dominant: ``(N, K)`` dominant resource index; ``-1`` where ineligible.
        sweeps: Gauss–Seidel sweeps run after the DRF start.
        certificate_violation: largest Theorem 1 (RDM) / Theorem 2 (TDM) or feasibility violation.
        converged: the last sweep changed no time share by more than ``tol``.
        ineligible: ``(tenant index, reason)`` for tenants given 0 instead of an error.
        mode: ``"tdm"`` or ``"rdm"``.
        method: ``"market"`` (TDM through equilibrium prices, ``fairness.market``; ``sweeps``
            is then 0) or ``"sweeps"`` (Gauss–Seidel, also the fallback).
        iterations: Newton steps of the market solve (0 for sweeps alone).
    """

    tasks: FloatArray
    totals: FloatArray
    vds: FloatArray
    levels: FloatArray
    dominant: IntArray
    sweeps: int
    certificate_violation: float
    converged: bool
    ineligible: tuple[tuple[int, str], ...]
    mode: str = "tdm"
    method: str = "sweeps"
    iterations: int = 0


@dataclass
class _NodeBlocks:
    """Per-node views of the eligible, active tenants (the solver's working layout).

    Columns are kept as one short array per node so that a node step touches only ``U_i``
    entries; a dense ``(N, K)`` matrix is assembled once at the end.
    """

    idx: list[np.ndarray]
    gamma: list[FloatArray]
    phi: list[FloatArray]
    cap: list[FloatArray]
    demand: list[FloatArray]


def _blocks(problem: FairnessProblem, gamma: FloatArray, active: BoolArray) -> _NodeBlocks:
    eligible = (gamma > 0) & active[:, None]
    blocks = _NodeBlocks([], [], [], [], [])
    for i in range(problem.shape[1]):
        idx = np.flatnonzero(eligible[:, i])
        blocks.idx.append(idx)
        blocks.gamma.append(np.ascontiguousarray(gamma[idx, i]))
        blocks.phi.append(problem.phi[idx])
        blocks.cap.append(problem.caps[idx])
        demand = problem.demand[idx]
        if problem.throughput is not None:
            # x counts work units; resources are used per pod, i.e. per x / throughput.
            demand = demand / problem.throughput[idx, i][:, None]
        blocks.demand.append(demand)
    return blocks


def _step(
    problem: FairnessProblem,
    blocks: _NodeBlocks,
    i: int,
    b: FloatArray,
    mode: Mode,
) -> FloatArray:
    upper = np.maximum(blocks.cap[i] - b, 0.0)
    if mode == "tdm":
        x, _ = tdm_fill(blocks.gamma[i], blocks.phi[i], b, upper)
    else:
        x, _ = rdm_fill(
            blocks.gamma[i], blocks.phi[i], b, upper, blocks.demand[i], problem.capacity[i]
        )
    return x


def solve(
    problem: FairnessProblem,
    *,
    mode: Mode = "tdm",
    tol: float = 1e-9,
    max_sweeps: int = 10_000,
    strict: bool = True,
    warm_start: FloatArray | None = None,
    method: Method = "auto",
) -> FairnessResult:
    """PS-DSF allocation of ``problem`` under ``mode`` (``"tdm"`` or ``"rdm"``).

    Args:
        tol: stop when no time share ``x_{n,i}/γ_{n,i}`` moves by more than this in a sweep.
        max_sweeps: give up (``converged=False``) after this many sweeps.
        strict: raise ``InvalidProblem`` for a tenant with no eligible node or a demand on a
            resource no node has; with ``False`` such tenants get 0 and appear in
            ``ineligible``. Tenants with cap 0 are always just ineligible.
        warm_start: ``(N, K)`` allocation to start from instead of per-node DRF (e.g. the
            previous round's answer, which usually needs only a few sweeps after a small
            change). It is made feasible first: negatives and ineligible pairs dropped, each
            node scaled into capacity, each tenant scaled under its cap.
        method: ``"auto"`` (default) and ``"market"`` solve TDM through its equilibrium prices
            (``fairness.market``: Newton on the smoothed Fisher-market dual, exact prices on
            the tight support, Sinkhorn spending) and keep that answer only if its Theorem 2
            certificate is at most ``MARKET_ACCEPT``; otherwise, when a cap binds, and for
            RDM, the sweeps run (warm-started from the market answer when there is one,
            else from ``warm_start``). ``"sweeps"`` skips the market.
    """
    if mode not in ("tdm", "rdm"):
        raise InvalidProblem(f"mode must be 'tdm' or 'rdm', got {mode!r}", field="mode")
    if method not in ("auto", "market", "sweeps"):
        raise InvalidProblem(
            f"method must be 'auto', 'market' or 'sweeps', got {method!r}", field="method"
        )
    if not (tol > 0) or max_sweeps < 0:
        raise InvalidProblem("tol must be > 0 and max_sweeps >= 0", field="tol")
    N, K, _ = problem.shape
    gamma = monopoly_tasks(problem)
    ineligible, active = screen(problem, gamma, strict=strict)
    if warm_start is not None:
        _checked_warm_start(problem, warm_start)
    iterations = 0
    if mode == "tdm" and method != "sweeps":
        market = tdm_market(problem, gamma, active)
        if market is not None:
            iterations = market.iterations
            violation = certificate(problem, market.tasks, "tdm", gamma=gamma)
            if violation <= MARKET_ACCEPT:
                return _result(
                    problem,
                    gamma,
                    market.tasks,
                    mode,
                    0,
                    True,
                    ineligible,
                    method="market",
                    iterations=iterations,
                    violation=violation,
                )
            warm_start = market.tasks
    blocks = _blocks(problem, gamma, active)

    if warm_start is None:
        # DRF on each node alone: nothing elsewhere.
        cols = [_step(problem, blocks, i, np.zeros(len(blocks.idx[i])), mode) for i in range(K)]
    else:
        cols = _warm_columns(problem, gamma, blocks, warm_start, mode)
    flat_idx = np.concatenate(blocks.idx) if K else np.zeros(0, dtype=np.int64)
    totals = np.bincount(flat_idx, weights=np.concatenate(cols) if K else None, minlength=N)

    sweeps = 0
    converged = False
    next_try = 2 if mode == "tdm" else RDM_CROSSOVER_FIRST
    while sweeps < max_sweeps:
        sweeps += 1
        change = 0.0
        for i in range(K):
            idx = blocks.idx[i]
            if len(idx) == 0:
                continue
            old = cols[i]
            b = np.maximum(totals[idx] - old, 0.0)
            new = _step(problem, blocks, i, b, mode)
            totals[idx] = b + new
            cols[i] = new
            change = max(change, float(np.max(np.abs(new - old) / blocks.gamma[i])))
        # Re-add from the columns so rounding in the running totals cannot drift.
        totals = np.bincount(flat_idx, weights=np.concatenate(cols), minlength=N)
        if change <= tol:
            converged = True
            break
        if mode == "rdm" and sweeps >= next_try and change < RDM_CROSSOVER_WHEN:
            next_try = sweeps + max(RDM_CROSSOVER_EVERY, sweeps // 3)
            exact = _try_rdm_crossover(problem, gamma, active, blocks, cols)
            if exact is not None:
                cols = exact
                totals = np.bincount(flat_idx, weights=np.concatenate(cols), minlength=N)
                converged = True
                break
        if mode == "tdm" and sweeps >= next_try and change < CROSSOVER_WHEN:
            # Sweeps converge only linearly; once the support has settled, finish exactly.
            next_try = sweeps + max(5, sweeps // 4)
            exact = _try_crossover(problem, gamma, active, blocks, cols)
            if exact is not None:
                cols = exact
                totals = np.bincount(flat_idx, weights=np.concatenate(cols), minlength=N)
    tasks = _dense(blocks, cols, N, K)
    return _result(
        problem, gamma, tasks, mode, sweeps, converged, ineligible, iterations=iterations
    )


def _checked_warm_start(problem: FairnessProblem, warm_start: FloatArray) -> FloatArray:
    N, K, _ = problem.shape
    x = np.array(warm_start, dtype=np.float64)
    if x.shape != (N, K) or not np.isfinite(x).all():
        raise InvalidProblem(
            f"warm_start must be a finite ({N}, {K}) array, got shape {x.shape}",
            field="warm_start",
        )
    return x


def _warm_columns(
    problem: FairnessProblem,
    gamma: FloatArray,
    blocks: _NodeBlocks,
    warm_start: FloatArray,
    mode: Mode,
) -> list[FloatArray]:
    N, K, _ = problem.shape
    x = _checked_warm_start(problem, warm_start)
    eligible = np.zeros((N, K), dtype=bool)
    for i in range(K):
        eligible[blocks.idx[i], i] = True
    x = np.where(eligible, np.maximum(x, 0.0), 0.0)
    totals = x.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(totals > problem.caps, problem.caps / totals, 1.0)
        x *= over[:, None]
        if mode == "tdm":
            used = np.where(gamma > 0, x / np.where(gamma > 0, gamma, 1.0), 0.0).sum(axis=0)
            scale = np.where(used > 1.0, 1.0 / used, 1.0)
        else:
            use = x.T @ problem.demand
            c = problem.capacity
            ratio = np.where(use > c, c / np.where(use > 0, use, 1.0), 1.0)
            scale = ratio.min(axis=1, initial=1.0)
    x *= scale[None, :]
    return [np.ascontiguousarray(x[blocks.idx[i], i]) for i in range(K)]


def _dense(blocks: _NodeBlocks, cols: list[FloatArray], N: int, K: int) -> FloatArray:
    tasks = np.zeros((N, K))
    for i in range(K):
        tasks[blocks.idx[i], i] = cols[i]
    return tasks


def _try_crossover(
    problem: FairnessProblem,
    gamma: FloatArray,
    active: BoolArray,
    blocks: _NodeBlocks,
    cols: list[FloatArray],
) -> list[FloatArray] | None:
    """Columns of the exact allocation on the current support, if the certificate confirms it."""
    N, K, _ = problem.shape
    tasks = _dense(blocks, cols, N, K)
    exact = tdm_crossover(problem, gamma, active, tasks)
    if exact is None or certificate(problem, exact, "tdm") > CROSSOVER_ACCEPT:
        return None
    return [np.ascontiguousarray(exact[blocks.idx[i], i]) for i in range(K)]


def _try_rdm_crossover(
    problem: FairnessProblem,
    gamma: FloatArray,
    active: BoolArray,
    blocks: _NodeBlocks,
    cols: list[FloatArray],
) -> list[FloatArray] | None:
    """Columns of the exact RDM allocation on the sweeps' bottleneck structure, if certified."""
    N, K, _ = problem.shape
    exact = rdm_crossover(problem, gamma, active, _dense(blocks, cols, N, K))
    if exact is None or certificate(problem, exact, "rdm", gamma=gamma) > CROSSOVER_ACCEPT:
        return None
    return [np.ascontiguousarray(exact[blocks.idx[i], i]) for i in range(K)]


def _result(
    problem: FairnessProblem,
    gamma: FloatArray,
    tasks: FloatArray,
    mode: Mode,
    sweeps: int,
    converged: bool,
    ineligible: tuple[tuple[int, str], ...],
    *,
    method: str = "sweeps",
    iterations: int = 0,
    violation: float | None = None,
) -> FairnessResult:
    totals = tasks.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        vds = np.where(gamma > 0, totals[:, None] / (problem.phi[:, None] * gamma), np.inf)
    levels = node_levels(problem, tasks, gamma=gamma)
    if violation is None:
        violation = certificate(problem, tasks, mode, gamma=gamma)
    dominant = dominant_resources(problem, gamma=gamma)
    for arr in (tasks, totals, vds, levels, dominant):
        arr.setflags(write=False)
    return FairnessResult(
        tasks=tasks,
        totals=totals,
        vds=vds,
        levels=levels,
        dominant=dominant,
        sweeps=sweeps,
        certificate_violation=violation,
        converged=converged,
        ineligible=ineligible,
        mode=mode,
        method=method,
        iterations=iterations,
    )

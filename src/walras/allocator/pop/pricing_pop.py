"""Price discovery by POP: k shards of jobs, each with a share of every GPU type (POP).

    shard s:  maximize Σ_{i∈s} u_i(a_i^T x_i)  s.t.  x_i ≥ 0, 1^T x_i ≤ 1, Σ_{i∈s} d_i x_i ≤ R_s
    merged:   X = rows of the shards' X_s;  Σ_s R_s = R  ⇒  Σ_i d_i x_i ≤ R (feasible).

Each shard is solved by ``pricing.solve`` unchanged. The merged utility is at most the exact
optimum (the merged X is feasible for the full problem); the merged certificate is the full
problem's dual value at the shards' capacity-weighted mean prices p̄,
``g(p̄) = p̄^T R + Σ_i max_x [u_i(a_i^T x) − (d_i ⊙ p̄)^T x] ≥ U*``, from one best-response pass:
``gap = g(p̄) − U(X)`` bounds the loss against the exact optimum. The pass runs in the shards
(``g(p̄) = Σ_s g_s(p̄) + p̄^T (R − Σ_s R_s)``, in parallel) unless some shard masks a type the
full problem allows (then one pass over the full problem).

Details:
- jobs are validated on the full problem first (``strict`` as in ``pricing.solve``), so errors
  name the job's index in the caller's problem; inside a shard a type whose demand d_ij
  exceeds the shard's capacity R_sj is masked for that job (as ``strict=False``), and a job
  that then fits nowhere raises ``InvalidProblem`` naming it and suggesting client splitting;
- capacity: whole GPUs per shard when every R_j is a whole number ≥ the number of non-empty
  shards, else exact fractions (a shard must have some capacity of every type);
- client splitting (``client_split = t > 0``): the largest-demand jobs are split in halves
  (``pop.clients``) into virtual jobs with demand and weight ``f_v d_i``, ``f_v w_i``; the real
  job gets ``x_i = Σ_v f_v x_v``, whose utility is at least the virtual ones' sum (Jensen);
- start prices: above 200 000 jobs every shard starts from the prices of a 50 000-job stride
  sample of the whole problem (as the exact solver does for itself), not from eq. (17);
- ``repair=True`` runs the price-spread repair (``pop.repair``) and reports the utility it
  recovers against plain POP.

With ``k = 1`` and no client splitting the exact ``pricing.solve`` answer is returned as is.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from walras.allocator import pricing
from walras.allocator.errors import InvalidProblem
from walras.allocator.pop import repair as repair_mod
from walras.allocator.pop.clients import merge_virtual
from walras.allocator.pop.partition import check_k
from walras.allocator.pop.plan import Plan, make_plan, resplit
from walras.allocator.pop.results import (
    PopPricingResult,
    RepairReport,
    ShardReport,
    exact_run,
    frozen,
    sharded_run,
)
from walras.allocator.pop.shards import Runner
from walras.allocator.pop.split import FloatArray, is_integral
from walras.allocator.pricing.backend import get_backend
from walras.allocator.pricing.problem import KINDS, check_jobs
from walras.allocator.pricing.utilities import UTILITIES, Params

SAMPLE_MIN_JOBS = 200_000
SAMPLE_JOBS = 50_000


@dataclass(frozen=True)
class _Options:
    eps: float
    max_iter: int
    backend: str


def _solve_shard(
    shared: tuple[tuple[pricing.PricingProblem | None, ...], _Options],
    payload: tuple[int, FloatArray | None, FloatArray | None],
) -> pricing.PricingResult:
    problems, opts = shared
    s, cap, warm = payload
    problem = problems[s]
    if problem is None:  # pragma: no cover - empty shards are never sent
        raise RuntimeError("empty shard")
    if cap is not None:
        problem = dataclasses.replace(problem, capacity=cap)
    return pricing.solve(
        problem,
        eps=opts.eps,
        max_iter=opts.max_iter,
        backend=opts.backend,
        warm_prices=warm,
        strict=False,
    )


def _shard_dual(
    shared: tuple[tuple[pricing.PricingProblem | None, ...], _Options],
    payload: tuple[int, FloatArray, FloatArray],
) -> float:
    """The shard's dual value g_s(p) (one best-response pass at p, capacity ``cap``)."""
    problems, opts = shared
    s, cap, p = payload
    problem = problems[s]
    if problem is None:  # pragma: no cover - empty shards are never sent
        raise RuntimeError("empty shard")
    problem = dataclasses.replace(problem, capacity=cap)
    res = pricing.solve(problem, max_iter=1, backend=opts.backend, warm_prices=p, strict=False)
    return float(res.dual_bound)


def _shard_demand(
    shared: tuple[tuple[pricing.PricingProblem | None, ...], _Options],
    payload: tuple[int, FloatArray, FloatArray],
) -> FloatArray:
    problems, _ = shared
    s, cap, p = payload
    problem = problems[s]
    if problem is None:  # pragma: no cover - empty shards are never sent
        raise RuntimeError("empty shard")
    X = pricing.best_response(dataclasses.replace(problem, capacity=cap), p)
    return np.asarray((problem.demand_matrix() * X).sum(axis=0), dtype=np.float64)


def _virtual_problem(problem: pricing.PricingProblem, plan: Plan) -> pricing.PricingProblem:
    """The problem over virtual jobs: rows repeated, demand and weight times the fraction."""
    c = plan.clients
    if c.splits == 0:
        return problem
    f = c.fraction
    D = np.asarray(problem.demand)[c.owner]
    D = D * (f if D.ndim == 1 else f[:, None])
    kinds = problem.kind if isinstance(problem.kind, str) else [problem.kind[i] for i in c.owner]
    return pricing.PricingProblem(
        throughput=np.asarray(problem.throughput)[c.owner],
        capacity=problem.capacity,
        demand=D,
        kind=kinds,
        weight=np.asarray(problem.weight)[c.owner] * f,
        target=np.asarray(problem.target)[c.owner],
        alpha=np.asarray(problem.alpha)[c.owner],
    )


def utility(problem: pricing.PricingProblem, t: Any) -> float:
    """``Σ_i u_i(t_i)`` with the pricing solver's utilities (the merged objective)."""
    b = get_backend("numpy")
    t = np.asarray(t, dtype=np.float64)
    codes = np.asarray(problem.kind_codes)
    total = 0.0
    with np.errstate(divide="ignore"):
        for code in np.unique(codes):
            idx = np.flatnonzero(codes == code)
            par = Params(
                np.asarray(problem.weight)[idx],
                np.asarray(problem.target)[idx],
                np.asarray(problem.alpha)[idx],
            )
            total += UTILITIES[KINDS[int(code)]].total(b, t[idx], par)
    return total


def _shard_problems(
    vproblem: pricing.PricingProblem, plan: Plan, uids: Sequence[str] | None
) -> tuple[tuple[pricing.PricingProblem | None, ...], bool]:
    """The shards' problems, and whether any job's demand exceeds its shard's capacity.

    The full problem has passed ``check_jobs``; a shard can only add the defect "fits on no
    type" (its capacity is smaller), so only shards where some demand exceeds the capacity
    are screened again.
    """
    out: list[pricing.PricingProblem | None] = []
    masked = False
    for s, rows in enumerate(plan.members):
        if len(rows) == 0:
            out.append(None)
            continue
        sp = vproblem.subset(rows, capacity=plan.capacity[s])
        if (sp.demand_matrix().max(axis=0) > plan.capacity[s]).any():
            masked = True
            issues = pricing.screen_jobs(sp)
            if issues:
                first = issues[0]
                job = int(plan.clients.owner[rows[first.index]])
                raise InvalidProblem(
                    f"job {job}{'' if uids is None else f' ({uids[job]!r})'}: {first.reason} "
                    f"in shard {s} of {plan.k} "
                    f"(capacity {plan.capacity[s].tolist()}); use fewer shards or client_split",
                    field=first.field,
                    index=job,
                )
        out.append(sp)
    return tuple(out), masked


def _sample_prices(problem: pricing.PricingProblem, eps: float, max_iter: int) -> FloatArray | None:
    """Start prices for every shard from a stride sample (``None`` below ``SAMPLE_MIN_JOBS``).

    The exact solver starts a large problem from the prices of a 50 000-job sample (capacity
    scaled); a 1/k shard of a 10⁶-job problem is below its threshold and would start from
    eq. (17) instead, taking 10+ iterations where the sample start takes one or two. All
    shards share the sample's prices: each is a random 1/k of the same jobs with 1/k of R.
    """
    n = problem.n
    if n < SAMPLE_MIN_JOBS:
        return None
    stride = math.ceil(n / SAMPLE_JOBS)
    idx = np.arange(0, n, stride)
    R = np.asarray(problem.capacity) * (len(idx) / n)
    sample = problem.subset(idx, capacity=R)
    return np.asarray(
        pricing.solve(sample, eps=eps, max_iter=max_iter, strict=False).prices, dtype=np.float64
    )


def _config(
    results: Sequence[pricing.PricingResult | None], caps: FloatArray, m: int
) -> repair_mod.Config:
    k = len(results)
    prices = np.zeros((k, m))
    util = np.zeros(k)
    for s, r in enumerate(results):
        if r is not None:
            prices[s] = r.prices
            util[s] = r.utility
    return repair_mod.Config(caps.copy(), prices, util, tuple(results))


def solve_pricing(
    problem: pricing.PricingProblem,
    k: int,
    *,
    uids: Sequence[str] | None = None,
    eps: float = 1e-3,
    max_iter: int = 100,
    backend: str = "numpy",
    strict: bool = True,
    client_split: float = 0.0,
    repair: bool = False,
    spread_tol: float = 0.01,
    repair_rounds: int = 4,
    certify: bool = True,
    workers: int | None = None,
) -> PopPricingResult:
    """Price discovery on ``k`` shards; see the module docstring.

    Args:
        uids: one stable UID per job (default: rows are sharded by ``splitmix64(row) mod k``,
            stable only while the caller's rows keep their order).
        eps, max_iter, backend: passed to every shard's ``pricing.solve`` (``eps`` is per job,
            so each shard's gap is at most ``eps·n_s`` when it converges).
        client_split: the paper's threshold ``t``: up to ``⌊t·n⌋`` halvings of the
            largest-demand jobs before partitioning (0: none).
        repair: run the price-spread repair; ``spread_tol`` is its tolerance on
            ``max_s p_sj / min_s p_sj − 1`` and ``repair_rounds`` its round budget.
        certify: evaluate the full problem's dual at the mean prices (one pass over all jobs)
            for the merged gap; ``False`` leaves ``dual_bound`` and ``gap`` as ``nan``.
        workers: worker processes (``None``: one per free core, at most ``k``; 1: in-process).
    """
    wall0, cpu0 = time.perf_counter(), time.process_time()
    k = check_k(k)
    n, m = problem.n, problem.m
    ids = None if uids is None else tuple(uids)
    if ids is not None and len(ids) != n:
        raise InvalidProblem(f"uids has {len(ids)} entries for {n} jobs", field="uids")
    if k == 1 and client_split == 0:
        return _exact(problem, ids, eps, max_iter, backend, strict, wall0, cpu0)
    check_jobs(problem, strict=strict)
    R = np.asarray(problem.capacity, dtype=np.float64)
    sizes = problem.demand_matrix().max(axis=1) if client_split > 0 else None
    plan = make_plan(ids, R, k, n=n, sizes=sizes, client_split=client_split, integral=False)
    active = [len(g) > 0 for g in plan.members]
    if is_integral(R) and R.min() >= sum(active):
        # Whole GPUs per shard when every shard can get at least one of every type.
        plan = resplit(plan, R, integral=True)
    vproblem = _virtual_problem(problem, plan)
    problems, masked = _shard_problems(vproblem, plan, ids)
    opts = _Options(eps, max_iter, backend)
    live = [s for s in range(k) if active[s]]
    warm = _sample_prices(vproblem, eps, max_iter)
    with Runner((problems, opts), len(live), workers) as runner:
        first = runner.map(_solve_shard, [(s, None, warm) for s in live])
        results: list[pricing.PricingResult | None] = [None] * k
        # Per shard: wall and CPU seconds summed over all its solves and demand passes.
        timing = np.zeros((k, 2))
        for s, t in zip(live, first, strict=True):
            results[s] = t.value
            timing[s] += (t.wall_s, t.cpu_s)
        plain = _config(results, plan.capacity, m)
        report = None
        solves = np.ones(k)
        best = plain
        if repair and len(live) > 1:

            def demand_at(caps: FloatArray, p: FloatArray) -> FloatArray:
                out = np.zeros((k, m))
                got = runner.map(_shard_demand, [(s, caps[s], p) for s in live])
                for s, t in zip(live, got, strict=True):
                    out[s] = t.value
                    timing[s] += (t.wall_s, t.cpu_s)
                return out

            def resolve(
                base: repair_mod.Config, changed: Sequence[int], caps: FloatArray, p: FloatArray
            ) -> repair_mod.Config:
                got = runner.map(_solve_shard, [(s, caps[s], p) for s in changed])
                new = list(base.results)
                for s, t in zip(changed, got, strict=True):
                    new[s] = t.value
                    timing[s] += (t.wall_s, t.cpu_s)
                return _config(new, caps, m)

            floor = np.zeros((k, m))
            for s in live:
                sp = problems[s]
                if sp is not None:
                    floor[s] = sp.demand_matrix().max(axis=0)
            outcome = repair_mod.run(
                plain, R, active, demand_at, resolve, tol=spread_tol, rounds=repair_rounds,
                floor=floor,
            )  # fmt: skip
            best = outcome.best
            solves += outcome.solves
            after = float(repair_mod.spread(best.prices, active).max())
            report = RepairReport(
                rounds=outcome.rounds,
                utility_plain=plain.total,
                utility=best.total,
                recovered=best.total - plain.total,
                spread_before=float(repair_mod.spread(plain.prices, active).max()),
                spread_after=after,
                within_tolerance=after <= spread_tol,
                resolves=outcome.resolves,
            )
        p_bar = repair_mod.mean_prices(best.prices, best.caps, active)
        dual = math.nan
        if certify and not masked:
            # g(p) = p^T R + Σ_i φ_i(p) = Σ_s g_s(p) + p^T (R − Σ_s R_s): the shards evaluate
            # their jobs in parallel. Valid only when no shard masks a type the full problem
            # allows (a masked φ_i would be smaller and the sum no upper bound).
            duals = runner.map(_shard_dual, [(s, best.caps[s], p_bar) for s in live])
            dual = math.fsum([d.value for d in duals]) + float(p_bar @ (R - best.caps.sum(axis=0)))
            for s, d in zip(live, duals, strict=True):
                timing[s] += (d.wall_s, d.cpu_s)
        elif certify:
            cert = pricing.solve(
                problem, eps=eps, max_iter=1, backend=backend, warm_prices=p_bar, strict=False
            )
            dual = cert.dual_bound
        workers_used = runner.workers
    return _merge(
        problem, vproblem, plan, best, report, timing, solves, p_bar, dual, workers_used,
        wall0, cpu0,
    )  # fmt: skip


def _merge(
    problem: pricing.PricingProblem,
    vproblem: pricing.PricingProblem,
    plan: Plan,
    best: repair_mod.Config,
    report: RepairReport | None,
    timing: FloatArray,
    solves: FloatArray,
    p_bar: FloatArray,
    dual: float,
    workers: int,
    wall0: float,
    cpu0: float,
) -> PopPricingResult:
    n, m = problem.n, problem.m
    split = plan.clients.splits > 0
    X = np.zeros((vproblem.n, m))
    t = np.zeros(vproblem.n)
    for s, rows in enumerate(plan.members):
        r = best.results[s]
        if r is not None:
            X[rows] = r.allocation
            t[rows] = r.throughput
    if split:
        X = merge_virtual(plan.clients, X, n, weighted=True)
        t = (np.asarray(problem.throughput) * X).sum(axis=1)
    total = utility(problem, t) if split else best.total
    shards = []
    for s, rows in enumerate(plan.members):
        r = best.results[s]
        shards.append(
            ShardReport(
                index=s,
                rows=len(rows),
                capacity=frozen(best.caps[s]),
                wall_s=float(timing[s, 0]),
                cpu_s=float(timing[s, 1]),
                certificate=0.0 if r is None else float(r.gap),
                prices=None if r is None else frozen(r.prices),
                converged=True if r is None else bool(r.converged),
                solves=int(solves[s]) if r is not None else 0,
                objective=0.0 if r is None else float(best.utility[s]),
            )
        )
    run = sharded_run(plan, shards, workers, wall0, cpu0)
    return PopPricingResult(
        allocation=_readonly(X),
        throughput=_readonly(t),
        utility=total,
        prices=frozen(p_bar),
        shard_prices=frozen(best.prices),
        dual_bound=dual,
        gap=dual - total,
        run=run,
        repair=report,
    )


def _readonly(x: FloatArray) -> FloatArray:
    x.setflags(write=False)
    return x


def _exact(
    problem: pricing.PricingProblem,
    uids: Sequence[str] | None,
    eps: float,
    max_iter: int,
    backend: str,
    strict: bool,
    wall0: float,
    cpu0: float,
) -> PopPricingResult:
    """k = 1: the exact solver's answer, unchanged."""
    del uids  # one shard: every job is in shard 0 whatever its UID
    w, c = time.perf_counter(), time.process_time()
    r = pricing.solve(problem, eps=eps, max_iter=max_iter, backend=backend, strict=strict)
    report = ShardReport(
        index=0,
        rows=problem.n,
        capacity=frozen(problem.capacity),
        wall_s=time.perf_counter() - w,
        cpu_s=time.process_time() - c,
        certificate=float(r.gap),
        prices=r.prices,
        converged=r.converged,
        objective=float(r.utility),
    )
    run = exact_run(problem.n, report, wall0, cpu0)
    return PopPricingResult(
        allocation=r.allocation,
        throughput=r.throughput,
        utility=r.utility,
        prices=r.prices,
        shard_prices=frozen(np.asarray(r.prices)[None, :]),
        dual_bound=r.dual_bound,
        gap=r.gap,
        run=run,
        exact=r,
    )

"""PS-DSF by POP: tenants in k shards, each shard with 1/k of every node's resources.

    shard s:  PS-DSF (``fairness.solve``) of its tenants on the K nodes with capacity c_s
    merged:   x[rows_s] = x_s;  Σ_s c_s = c  ⇒  Σ_n d_n x_{n,i} ≤ c_i (RDM) and, since
              γ_s = γ·(c_s/c) for an equal split, Σ_n x_{n,i}/γ_{n,i} ≤ Σ_s 1/k = 1 (TDM).

This is the paper's *resource splitting* (§3.3): every shard sees every node, with a fraction
of its capacity, so a tenant that may run only on a few nodes (placement constraints, one GPU
type) still finds them in its shard. The capacity split is exact fractions (``pop.split``,
fractional mode): tasks are divisible, and whole units would leave an 8-GPU node with no GPU
in half of 16 shards, making it ineligible there.

Certificates: each shard's Theorem 1 (RDM) / 2 (TDM) violation on its own sub-problem (the
exact solver's certificate, ``ShardReport.certificate``) and the merged allocation's violation
on the full problem (``certificate_violation``; POP is PS-DSF per shard, not globally).

Client splitting (``client_split > 0``, weights φ as the size): virtual tenants get weight and
cap ``f_v φ_n``, ``f_v D_n``; the real tenant gets ``x_n = Σ_v x_v`` (``pop.clients`` says
what this preserves). Tenants are validated on the full problem first (``strict``), so errors
name the caller's tenant.

With ``k = 1`` and no client splitting the exact ``fairness.solve`` answer is returned as is.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from walras.allocator import fairness
from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.problem import monopoly_tasks, screen
from walras.allocator.fairness.solver import Method, Mode
from walras.allocator.pop.clients import merge_virtual
from walras.allocator.pop.partition import check_k
from walras.allocator.pop.plan import Balance, Plan, make_plan
from walras.allocator.pop.results import (
    PopFairnessResult,
    ShardReport,
    exact_run,
    frozen,
    sharded_run,
)
from walras.allocator.pop.shards import Runner
from walras.allocator.pop.split import FloatArray


@dataclass(frozen=True)
class _Options:
    mode: Mode
    tol: float
    max_sweeps: int
    method: Method


def _solve_shard(
    shared: tuple[tuple[fairness.FairnessProblem | None, ...], _Options], s: int
) -> fairness.FairnessResult:
    problems, o = shared
    problem = problems[s]
    if problem is None:  # pragma: no cover - empty shards are never sent
        raise RuntimeError("empty shard")
    return fairness.solve(
        problem, mode=o.mode, tol=o.tol, max_sweeps=o.max_sweeps, strict=False, method=o.method
    )


def _rows(value: Any, rows: Any) -> Any:
    return None if value is None else np.asarray(value)[rows]


def _shard_problem(
    problem: fairness.FairnessProblem, plan: Plan, s: int
) -> fairness.FairnessProblem:
    rows = plan.members[s]
    owner = plan.clients.owner[rows]
    f = plan.clients.fraction[rows]
    return fairness.FairnessProblem(
        capacity=plan.capacity[s],
        demand=problem.demand[owner],
        weight=problem.phi[owner] * f,
        eligible=problem.delta[owner],
        cap=problem.caps[owner] * f,
        throughput=_rows(problem.throughput, owner),
        tenant_names=[plan.clients.uids[v] for v in rows],
        node_names=problem.nodes,
        resource_names=problem.resources,
    )


def solve_fairness(
    problem: fairness.FairnessProblem,
    k: int,
    *,
    mode: Mode = "tdm",
    uids: Sequence[str] | None = None,
    tol: float = 1e-9,
    max_sweeps: int = 10_000,
    strict: bool = True,
    method: Method = "auto",
    client_split: float = 0.0,
    balance: Balance = "equal",
    workers: int | None = None,
) -> PopFairnessResult:
    """PS-DSF on ``k`` shards; see the module docstring.

    Args:
        uids: one stable UID per tenant (default: the problem's tenant names).
        mode, tol, max_sweeps, method: passed to every shard's ``fairness.solve``.
        strict: as in ``fairness.solve``, checked on the full problem.
        client_split: the paper's threshold ``t`` (sizes: tenant weights).
        balance: ``"equal"`` (1/k of every node, the paper's rule) or ``"demand"`` (shares
            proportional to the shard's total weight).
        workers: worker processes (``None``: one per free core, at most ``k``; 1: in-process).
    """
    wall0, cpu0 = time.perf_counter(), time.process_time()
    k = check_k(k)
    if mode not in ("tdm", "rdm"):
        raise InvalidProblem(f"mode must be 'tdm' or 'rdm', got {mode!r}", field="mode")
    N, K, _ = problem.shape
    ids = problem.tenants if uids is None else tuple(uids)
    if len(ids) != N:
        raise InvalidProblem(f"uids has {len(ids)} entries for {N} tenants", field="uids")
    if k == 1 and client_split == 0:
        r = fairness.solve(
            problem,
            mode=mode,
            tol=tol,
            max_sweeps=max_sweeps,
            strict=strict,
            method=method,
        )
        w, c = time.perf_counter() - wall0, time.process_time() - cpu0
        report = ShardReport(
            0, N, frozen(problem.capacity), w, c, r.certificate_violation, converged=r.converged
        )
        run = exact_run(N, report, wall0, cpu0)
        return PopFairnessResult(
            r.tasks, r.totals, r.certificate_violation, r.certificate_violation, mode,
            r.converged, run, exact=r,
        )  # fmt: skip
    screen(problem, monopoly_tasks(problem), strict=strict)
    plan = make_plan(
        ids, problem.capacity, k, sizes=problem.phi, client_split=client_split,
        balance=balance, integral=False,
    )  # fmt: skip
    live = [s for s in range(k) if len(plan.members[s])]
    problems: list[fairness.FairnessProblem | None] = [None] * k
    for s in live:
        problems[s] = _shard_problem(problem, plan, s)
    opts = _Options(mode, tol, max_sweeps, method)
    with Runner((tuple(problems), opts), len(live), workers) as runner:
        got = dict(zip(live, runner.map(_solve_shard, live), strict=True))
        used = runner.workers
    X = np.zeros((plan.clients.n, K))
    reports = []
    for s in range(k):
        t = got.get(s)
        rows = plan.members[s]
        if t is not None:
            X[rows] = t.value.tasks
        reports.append(
            ShardReport(
                index=s,
                rows=len(rows),
                capacity=frozen(plan.capacity[s]),
                wall_s=0.0 if t is None else t.wall_s,
                cpu_s=0.0 if t is None else t.cpu_s,
                certificate=0.0 if t is None else float(t.value.certificate_violation),
                converged=True if t is None else bool(t.value.converged),
                solves=0 if t is None else 1,
            )
        )
    tasks: FloatArray = merge_virtual(plan.clients, X, N, weighted=False)
    violation = fairness.certificate(problem, tasks, mode)
    run = sharded_run(plan, reports, used, wall0, cpu0)
    return PopFairnessResult(
        tasks=frozen(tasks),
        totals=frozen(tasks.sum(axis=1)),
        certificate_violation=float(violation),
        shard_violation=max(r.certificate for r in reports),
        mode=mode,
        converged=all(r.converged for r in reports),
        run=run,
    )

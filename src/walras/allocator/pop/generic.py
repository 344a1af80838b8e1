"""POP around any row-wise policy: ``(n clients × T types) → (n, T)`` allocation (POP).

The policy registry of the scheduling core wraps every registered policy with
:func:`solve_rows`; :func:`solve_gavel` is that wrapper for the Gavel policies
(``walras.allocator.gavel``), used by the benchmark and the simulator's Gavel semantics.

    shard s:  the policy on its clients with capacity C_s
    merged:   X[rows_s] = X_s   (time shares of real clients: x_i = Σ_v f_v x_v when split)

Feasible by construction when every shard's answer respects its own capacity, because
``Σ_s C_s = C`` (``pop.split``).

Caveats the caller must respect:

- **Stateful policies** (Gavel's FIFO and finish-time fairness keep per-job state in the policy
  object) must run in-process (``workers=1``): a worker process updates its own copy of the
  object, which is then lost. Stateless policies (max-min fairness, the LPs) may use workers.
- **Client splitting** is the caller's job in ``make_shard`` (it receives each virtual client's
  real row and fraction). ``solve_gavel`` does not split: Gavel's gang sizes are whole GPUs and
  its job ids key policy state; the paper applies POP to Gavel without splitting ("granular by
  default", §4.1). Space-sharing policies (job pairs) must never be split (§3.3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.pop.clients import merge_virtual
from walras.allocator.pop.partition import IntArray, check_k
from walras.allocator.pop.plan import Balance, Plan, make_plan
from walras.allocator.pop.results import (
    PopAllocation,
    ShardReport,
    exact_run,
    frozen,
    sharded_run,
)
from walras.allocator.pop.shards import Runner
from walras.allocator.pop.split import FloatArray

S = TypeVar("S")

ShardSolver = Callable[[Any], Any]
"""``shard problem → (rows, T) allocation`` or ``(allocation, certificate)``."""


def _solve(shared: tuple[tuple[Any, ...], ShardSolver], s: int) -> Any:
    problems, solver = shared
    return solver(problems[s])


def _as_allocation(out: Any) -> tuple[FloatArray, float]:
    """A row-wise solver's answer as ``(allocation, certificate)`` (``nan``: none given)."""
    if isinstance(out, tuple):
        x, cert = out
        return np.asarray(x, dtype=np.float64), float(cert)
    return np.asarray(out, dtype=np.float64), float("nan")


@dataclass(frozen=True, eq=False)
class ShardOutputs:
    """What :func:`solve_shards` returns: the plan, each shard's raw answer (``None`` for a shard
    without clients) with the wall/CPU seconds it took where it ran, and the workers used."""

    plan: Plan
    outputs: tuple[Any, ...]
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    workers: int


def solve_shards(
    uids: Sequence[str],
    capacity: Any,
    k: int,
    make_shard: Callable[[IntArray, FloatArray, FloatArray], S],
    solve_shard: Callable[[S], Any],
    *,
    sizes: Any = None,
    client_split: float = 0.0,
    balance: Balance = "equal",
    integral: bool | None = None,
    workers: int | None = None,
) -> ShardOutputs:
    """The partition and solve steps of POP, for any policy; merging is the caller's.

    :func:`solve_rows` merges ``(rows, T)`` answers row by row; a policy whose answer is not one
    row per client (space sharing's job pairs, ``pop.packed_pop``) merges its own. Arguments as
    in :func:`solve_rows`; ``solve_shard`` may return anything picklable.
    """
    k = check_k(k)
    plan = make_plan(
        uids, capacity, k, sizes=sizes, client_split=client_split, balance=balance,
        integral=integral,
    )  # fmt: skip
    owner = plan.clients.owner
    live = [s for s in range(k) if len(plan.members[s])]
    problems: list[Any] = [None] * k
    for s in live:
        rows = plan.members[s]
        problems[s] = make_shard(owner[rows], plan.clients.fraction[rows], plan.capacity[s])
    with Runner((tuple(problems), solve_shard), len(live), workers) as runner:
        got = runner.map(_solve, live)
        used = runner.workers
    by_shard = dict(zip(live, got, strict=True))
    timed = [by_shard.get(s) for s in range(k)]
    return ShardOutputs(
        plan=plan,
        outputs=tuple(None if t is None else t.value for t in timed),
        wall_s=tuple(0.0 if t is None else t.wall_s for t in timed),
        cpu_s=tuple(0.0 if t is None else t.cpu_s for t in timed),
        workers=used,
    )


def solve_rows(
    uids: Sequence[str],
    capacity: Any,
    k: int,
    make_shard: Callable[[IntArray, FloatArray, FloatArray], S],
    solve_shard: Callable[[S], Any],
    *,
    sizes: Any = None,
    client_split: float = 0.0,
    balance: Balance = "equal",
    integral: bool | None = None,
    workers: int | None = None,
) -> PopAllocation:
    """POP over ``k`` shards for any row-wise policy.

    Args:
        uids: one stable UID per client (job/tenant).
        capacity: ``(T,)`` capacity per type (any shape works; it is split entry by entry).
        make_shard: ``(rows, fraction, shard capacity) → shard problem``; ``rows`` are the real
            row indices of the shard's (virtual) clients, ascending, ``fraction`` their share
            (1 unless split). Runs in the calling process.
        solve_shard: ``shard problem → (len(rows), T)`` allocation, or ``(allocation,
            certificate)``; runs in worker processes when ``workers`` allows (module
            docstring on stateful policies).
        sizes: ``(n,)`` client sizes (GPUs), for ``balance="demand"``, the spare-unit tie-break
            and client splitting.
        client_split, balance, integral: see ``pop.plan.make_plan``.
    """
    wall0, cpu0 = time.perf_counter(), time.process_time()
    n = len(uids)
    done = solve_shards(
        uids, capacity, k, make_shard, solve_shard, sizes=sizes, client_split=client_split,
        balance=balance, integral=integral, workers=workers,
    )  # fmt: skip
    plan = done.plan
    X: FloatArray | None = None
    reports = []
    for s in range(plan.k):
        rows = plan.members[s]
        out = done.outputs[s]
        cert = float("nan")
        if out is not None:
            x, cert = _as_allocation(out)
            if x.shape[0] != len(rows):
                raise InvalidProblem(
                    f"shard {s}: the policy returned {x.shape[0]} rows for {len(rows)} clients",
                    field="allocation",
                )
            if X is None:
                X = np.zeros((plan.clients.n, *x.shape[1:]))
            X[rows] = x
        reports.append(
            ShardReport(
                index=s,
                rows=len(rows),
                capacity=frozen(plan.capacity[s]),
                wall_s=done.wall_s[s],
                cpu_s=done.cpu_s[s],
                certificate=cert,
                solves=0 if out is None else 1,
            )
        )
    if X is None:  # pragma: no cover - make_plan rejects n = 0
        raise InvalidProblem("no shard has clients", field="uids")
    merged = merge_virtual(plan.clients, X, n, weighted=True)
    run = sharded_run(plan, reports, done.workers, wall0, cpu0)
    return PopAllocation(allocation=frozen(merged), run=run)


def gavel_uids(job_ids: Any) -> tuple[str, ...]:
    """Stable UIDs of Gavel jobs: their integer ids as strings."""
    return tuple(str(int(j)) for j in np.asarray(job_ids))


def solve_gavel(
    inputs: Any,
    k: int,
    policy: Any = "max_min_fairness_perf",
    *,
    uids: Sequence[str] | None = None,
    balance: Balance = "demand",
    workers: int | None = None,
) -> PopAllocation:
    """A Gavel policy (a name for ``gavel.make_policy`` or a policy object) on ``k`` shards.

    Shard ``s`` gets the rows of its jobs (every per-job field of ``inputs``) and whole GPUs
    ``capacity_s`` (``pop.split``, spare GPUs to the shards with the most GPU demand, i.e.
    ``Σ scale_factors``). With ``k = 1`` the policy runs on ``inputs`` unchanged.

    ``balance`` defaults to ``"demand"`` (GPUs in proportion to the shard's ``Σ scale_factors``),
    not the paper's equal 1/k: hashing leaves shards with ±6% of the mean job count at
    k = 8 and 2,048 jobs, and a max-min policy's value in a shard falls with its crowding.
    Measured (``bench/bench_pop.py``, k = 8): smallest per-job throughput ratio against exact
    0.938 with the equal split, 0.980 with the demand split.
    """
    from walras.allocator import gavel  # the Gavel package imports nothing from pop

    pol = gavel.make_policy(policy) if isinstance(policy, str) else policy
    ids = gavel_uids(inputs.job_ids) if uids is None else tuple(uids)
    if k == 1:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        x = frozen(pol.allocate(inputs))
        w, c = time.perf_counter() - wall0, time.process_time() - cpu0
        report = ShardReport(0, inputs.n_jobs, frozen(inputs.capacity), w, c, float("nan"))
        run = exact_run(inputs.n_jobs, report, wall0, cpu0)
        return PopAllocation(allocation=x, run=run)

    def make_shard(rows: IntArray, fraction: FloatArray, cap: FloatArray) -> Any:
        del fraction  # no client splitting for Gavel (module docstring)
        return gavel.GavelInputs(
            throughputs=inputs.throughputs[rows],
            scale_factors=inputs.scale_factors[rows],
            capacity=cap,
            job_ids=inputs.job_ids[rows],
            priority_weights=_rows(inputs.priority_weights, rows),
            num_steps_remaining=_rows(inputs.num_steps_remaining, rows),
            times_since_start=_rows(inputs.times_since_start, rows),
            type_names=inputs.type_names,
        )

    return solve_rows(
        ids,
        inputs.capacity,
        k,
        make_shard,
        pol.allocate,
        sizes=np.asarray(inputs.scale_factors, dtype=np.float64),
        balance=balance,
        workers=workers,
    )


def _rows(value: Any, rows: IntArray) -> Any:
    return None if value is None else np.asarray(value)[rows]

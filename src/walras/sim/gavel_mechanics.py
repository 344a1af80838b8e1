"""Gavel's simulator mechanics (``scheduler/scheduler.py::simulate``, the version in
tests/data/gavel/NOTICE.md), rebuilt.

One loop iteration is one round:

1. **Clock.** If micro-tasks are running, the clock jumps to the latest finish among them (the
   round ends when its last job finishes; GPUs that finished early idle). Otherwise it jumps to
   the next trace arrival. Gavel's bookkeeping of the round *start* is kept as it is: it becomes
   the previous round's end, so after an idle gap the gap counts in the next round's execution
   time (and so in busy time); the first round starts at 0.
2. **Completions**, latest finish first (then job id): a job that ran ``s`` steps on ``k`` GPUs
   gives ``s // k`` to each GPU and the rest to the last; if any share is 0 (``s < k``) the
   micro-task *fails*: no progress, the job's failure count grows, and after 5 failures in a row
   the job leaves without a JCT. Otherwise every GPU of the gang is busy for
   ``exec = finish − round start``, and the job's time received on its type grows by ``exec``.
3. **Arrivals** with arrival ≤ clock join; each starts with 180 s (half a round) received per type.
4. **Allocation.** An arrival, a completion or a failure makes the allocation stale. Only when it
   is stale *and* (≥ 1920 s passed since the last reset, or the last reset was at t = 0) do the
   received-time counters reset (each job's deficit grows by ``alloc · elapsed − received``) and
   the policy re-solve. Jobs that arrived since have no allocation: priority 0, never placed.
5. **Priorities** per (job, type): ``alloc / (received_j / received_all)``; ``alloc · 10⁹`` when
   the job received nothing; 0 for zero allocation, zero throughput or no allocation.
6. **Selection.** Types in the order V100, P100, K80 (``_perf`` policies) or a seeded shuffle of
   it each round (``random.Random(seed + 5)``, as Gavel); within a type, jobs by (priority,
   deficit, allocation) descending, ties in arrival order. Greedily take each job at most once if
   its scale factor fits the type's free GPUs; FIFO policies skip priority 0.
7. **Placement.** Per type, by decreasing scale factor: a job keeps last round's GPUs if they are
   still free, otherwise it takes GPUs walking the nodes in order (Gavel's strided pointer).
8. **Dispatch.** A job on type ``t`` runs ``s = min(int(T_t · R), remaining)`` steps and finishes
   at ``now + s / T_t``. With a restart cost ``X`` (``reference/tools/sim_with_timing.py``), a
   job whose GPU set differs from last round's (first dispatch included) runs
   ``min(int(T_t · (R − X)), remaining)`` steps and finishes ``X`` later; ``X`` counts as busy.

Worked example (one 1-GPU job alone, R = 360, X = 0, T = 2 steps/s, 1000 steps, arrival 0):
rounds run 720, 280 steps; it finishes at 360 + 280/2 = 500 s, so JCT = makespan = 500 s and
utilisation = 500 / 500 = 1 on its GPU.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import numpy as np

from walras.sim.arrivals import ArrivalQueue
from walras.sim.cluster import GAVEL_TYPES, Cluster
from walras.sim.config import SimConfig
from walras.sim.errors import PolicyError, SimulationStuckError
from walras.sim.policies import Policy, PolicyView
from walras.sim.tally import RoundRecord, Tally
from walras.sim.workload import Workload

MAX_FAILED_ATTEMPTS = 5
"""Gavel drops a job after this many failed micro-tasks in a row."""

PRIORITY_SCALE = 1e9
"""Gavel's stand-in for infinity (a job that received nothing): ``alloc · 10⁹``."""

Progress = Callable[[int, int], None]


def walk_order(cluster: Cluster) -> list[int]:
    """Column indices in Gavel's type order (V100, P100, K80), then other types by name."""
    col = {t: c for c, t in enumerate(cluster.gpu_types)}
    known = [col[t] for t in GAVEL_TYPES if t in col]
    return known + [col[t] for t in sorted(col) if t not in GAVEL_TYPES]


def run(
    workload: Workload,
    cluster: Cluster,
    policy: Policy,
    config: SimConfig,
    tally: Tally,
    progress: Progress | None = None,
) -> float:
    """Simulate until every job has left; returns the final clock (Gavel's "Total duration")."""
    n, n_types = workload.n_jobs, len(cluster.gpu_types)
    round_s, restart_s = float(config.round_s), float(config.restart_s)
    half = round_s / 2.0
    thr = workload.throughputs
    thr_rows: list[list[float]] = thr.tolist()
    sf: list[int] = workload.scale_factors.tolist()
    aware = policy.name.endswith("_perf")
    fifo = policy.name.startswith("fifo")
    shuffler = random.Random(config.seed + 5)
    base_walk = walk_order(cluster)
    servers: list[list[tuple[int, ...]]] = [[] for _ in range(n_types)]
    for node in cluster.nodes:
        servers[cluster.gpu_types.index(node.gpu_type)].append(node.gpu_ids)
    gpu_col = cluster.gpu_type_of()
    capacity = np.array(cluster.counts, dtype=np.float64)

    job_time = np.zeros((n, n_types))
    deficit = np.zeros((n, n_types))
    alloc = np.zeros((n, n_types))
    in_alloc = np.zeros(n, dtype=bool)
    worker_time = [0.0] * n_types
    failures = [0] * n
    active: list[int] = []
    arrivals = ArrivalQueue(workload.arrivals)
    left = n
    now = float(workload.arrivals[0])
    round_start, round_end = 0.0, None
    last_reset, need_update = 0.0, True
    prev_assign: dict[int, tuple[int, ...]] = {}
    running: list[tuple[float, int, tuple[int, ...], int, int]] = []

    def leave(j: int) -> None:
        nonlocal left, need_update
        active.remove(j)
        left -= 1
        need_update = True

    while left > 0:
        next_arrival = arrivals.next_time()
        if next_arrival is None and not running:
            last_reset = 0.0  # Gavel forces a reset when nothing runs and nothing will arrive
        latest = max((r[0] for r in running), default=0.0)
        if latest > 0:
            if round_end is not None:
                round_start = round_end
            round_end = latest
            now = latest
        elif next_arrival is not None:
            now = next_arrival

        # Completions: Gavel pops its max-heap of (-finish, job id).
        running.sort(key=lambda r: (-r[0], r[1]))
        for finish, j, gpus, steps, c in running:
            exec_s = finish - round_start
            k = sf[j]
            if steps < k or exec_s <= 0:
                failures[j] += 1
                need_update = True
                if failures[j] >= MAX_FAILED_ATTEMPTS:
                    tally.complete(j, finish, failed=True)
                    leave(j)
                continue
            failures[j] = 0
            tally.ran(j, steps, exec_s, gpus)
            job_time[j, c] += exec_s
            worker_time[c] += exec_s
            if tally.remaining(j) <= 0:
                tally.complete(j, finish)
                leave(j)
        if running and progress is not None:
            progress(tally.finished, n)
        running = []

        for j in arrivals.admit(now):
            active.append(j)
            job_time[j] = half
            need_update = True

        # Reset and re-solve (Gavel's _update_priorities in simulation mode).
        if need_update and (now - last_reset >= config.min_reset_interval_s or last_reset == 0):
            elapsed = now - last_reset
            idx = np.array(active, dtype=np.int64)
            if idx.size:
                received = job_time[idx] - half
                should = np.where(in_alloc[idx][:, None], alloc[idx] * elapsed, 0.0)
                deficit[idx] += should - received
                job_time[idx] = half
            for c in range(n_types):
                total = 0.0
                for _ in active:  # Gavel sums the 180 s one job at a time; so do we (same bits)
                    total += half
                worker_time[c] = total
            last_reset = now
            alloc[idx] = _solve(policy, workload, tally, idx, capacity, cluster, now)
            in_alloc[:] = False
            in_alloc[idx] = True
            need_update = False

        assign = _schedule(
            active, thr, thr_rows, sf, job_time, worker_time, alloc, in_alloc, deficit,
            base_walk if aware else _shuffled(base_walk, shuffler), fifo,
            list(cluster.counts), servers, gpu_col, prev_assign,
        )  # fmt: skip

        busy = [0] * n_types
        for j, gpus in assign.items():
            c = gpu_col[gpus[0]]
            t = thr_rows[j][c]
            prev = prev_assign.get(j)
            # A kept gang is the very tuple of last round, so the set comparison is rarely needed.
            restarted = prev is None or (prev != gpus and set(prev) != set(gpus))
            span = round_s - restart_s if restarted and restart_s > 0 else round_s
            steps = min(int(t * span), tally.remaining(j))
            finish = now + steps / t
            if restarted and restart_s > 0:
                finish += restart_s
            running.append((finish, j, gpus, steps, c))
            tally.dispatched(j, now, restarted)
            busy[c] += len(gpus)
        prev_assign = assign
        if running:
            tally.rounds.append(
                RoundRecord(now, max(r[0] for r in running), tuple(busy), len(assign),
                            len(active) - len(assign))
            )  # fmt: skip
        elif arrivals.next_time() is None and not need_update and left > 0:
            raise SimulationStuckError(
                f"at t={now:.0f} s no job can be placed and none will arrive; waiting jobs: "
                + ", ".join(str(j) for j in active[:10])
            )
    return now


def _shuffled(walk: list[int], rng: random.Random) -> list[int]:
    out = list(walk)
    rng.shuffle(out)
    return out


def _solve(
    policy: Policy,
    workload: Workload,
    tally: Tally,
    idx: np.ndarray,
    capacity: np.ndarray,
    cluster: Cluster,
    now: float,
) -> np.ndarray:
    # Gavel solves even with no job left (its policies return an empty allocation); calling the
    # policy here too keeps the solve counts equal.
    remaining = workload.total_steps[idx] - np.array([tally.steps_done[j] for j in idx.tolist()])
    started, started_cpu = time.perf_counter(), time.process_time()
    try:
        # Gavel's inputs, checked on construction (inside the solve's time, as Gavel's own
        # policies convert their inputs there).
        view = PolicyView(
            throughputs=workload.throughputs[idx],
            scale_factors=workload.scale_factors[idx],
            capacity=capacity,
            job_ids=idx.astype(np.int64),
            priority_weights=workload.priority_weights[idx],
            num_steps_remaining=remaining.astype(np.float64),
            times_since_start=now - workload.arrivals[idx],
            type_names=cluster.gpu_types,
        )
        x = policy.allocate(view)
    except Exception as exc:  # any solver failure ends the run with its context, not a traceback
        raise PolicyError(
            f"policy {policy.name} failed at t={now:.1f} s with {idx.size} active jobs: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    tally.solve_s.append(time.perf_counter() - started)
    tally.solve_cpu_s.append(time.process_time() - started_cpu)
    return np.asarray(x, dtype=np.float64).reshape(idx.size, len(cluster.gpu_types))


def _schedule(
    active: list[int],
    thr: np.ndarray,
    thr_rows: list[list[float]],
    sf: list[int],
    job_time: np.ndarray,
    worker_time: list[float],
    alloc: np.ndarray,
    in_alloc: np.ndarray,
    deficit: np.ndarray,
    walk: list[int],
    fifo: bool,
    free: list[int],
    servers: list[list[tuple[int, ...]]],
    gpu_col: tuple[int, ...],
    prev_assign: dict[int, tuple[int, ...]],
) -> dict[int, tuple[int, ...]]:
    """Steps 5–7 of the module docstring: the GPUs of every job dispatched this round."""
    if not active:
        return {}
    idx = np.array(active, dtype=np.int64)
    a = alloc[idx]
    has = in_alloc[idx]
    a[~has] = 0.0
    th = thr[idx]
    wt = np.array(worker_time)
    jt = job_time[idx]
    frac = np.zeros_like(jt)
    np.divide(jt, wt[None, :], out=frac, where=wt[None, :] != 0.0)
    prio = a * PRIORITY_SCALE
    prio[th == 0] = 0.0
    ok = (a != 0.0) & (th != 0.0) & (frac > 0.0)
    np.divide(a, frac, out=prio, where=ok)
    dfc = deficit[idx]

    chosen: set[int] = set()
    picked: list[list[int]] = [[] for _ in free]
    for c in walk:
        if free[c] == 0:
            continue
        order = np.lexsort((-a[:, c], -dfc[:, c], -prio[:, c]))
        pc = prio[:, c]
        for r in order.tolist():
            if free[c] == 0:
                break
            j = active[r]
            if j in chosen or thr_rows[j][c] <= 0 or (fifo and pc[r] <= 0.0):
                continue
            if sf[j] > free[c]:
                continue
            free[c] -= sf[j]
            chosen.add(j)
            picked[c].append(j)

    assign: dict[int, tuple[int, ...]] = {}
    for c in walk:
        jobs = sorted(picked[c], key=lambda j: sf[j], reverse=True)
        nodes = [list(g) for g in servers[c]]
        taken: set[int] = set()
        ptr = 0
        for k in sorted({sf[j] for j in jobs}, reverse=True):
            for j in jobs:
                prev = prev_assign.get(j)
                if (
                    sf[j] == k
                    and prev is not None
                    and gpu_col[prev[0]] == c
                    and not any(g in taken for g in prev)
                ):
                    assign[j] = prev
                    taken.update(prev)
            for j in jobs:
                if sf[j] != k or not in_alloc[j]:
                    continue  # Gavel selects a job without allocation but never places it
                got = list(assign.get(j, ()))
                while len(got) < k and ptr < len(nodes):
                    if not nodes[ptr]:
                        ptr += 1
                        continue
                    g = nodes[ptr].pop(0)
                    if g not in taken:
                        got.append(g)
                        taken.add(g)
                if len(got) != k:
                    raise RuntimeError(f"job {j}: could not place {k} GPUs of type {c}")
                assign[j] = tuple(got)
    return assign

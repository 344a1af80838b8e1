"""Benchmark of the realiser's restarts: Gavel's order (old) against restart-priced blocks (new).

A multi-round loop of the operator's pipeline without the control plane: the operator's indexes
(``walras.core.snapshot.Store``) hold synthetic nodes and FungibleJobs; every round runs
``walras.core.cycle.plan`` (price discovery, then the realiser) at rounds of 360 s, and its plan
is applied to the store's pods (deleted pods go, created pods appear bound and running), so the
next round sees them, as the operator's watches would.

Both behaviours run in the same process on the same instance:

- ``old``: ``restart_s = 0`` to the realiser (Gavel's priority order, no credit);
- ``new``: ``restart_s = 10`` (``walras.core.switching``: the balanced order, deficit over
  √target, with a credit of ``72 · restart_s``; when every job fits, each job's utility-priced
  credit ``fit_credit``).

Reported per case and behaviour (one JSON line each): ``restarts_per_round`` (pods created per
round over the steady window), ``restarts_pct`` (of the pods the jobs have), ``restarts_total``
(rounds 2..R), ``share_error_max`` / ``share_error_mean`` (over jobs, the largest
``|received/elapsed − target|`` over types, after ``error_round`` rounds), ``utility_given_up``
(mean over jobs of ``log(target rate / realised rate)``: price discovery's own log utility of the
work rate the target promises against the work actually done per second, with 10 s lost at every
(re)start in both behaviours, so the old behaviour's restarts count against it too), ``time_s``
and ``cpu_s`` of the whole loop.

Cases:

- ``fit_1000x200``: 1,000 jobs of 1-2 one-GPU pods (1,519 pods) on 200 nodes x 8 GPUs of four
  types (the operator benchmark's ``round_1000x200``): not oversubscribed. 60 rounds; steady
  window rounds 31-60; target ``restarts_pct <= 5``.
- ``over_1000x2000``: 1,000 jobs of two one-GPU pods (2,000 pods) on 1,600 GPUs. 30 rounds;
  steady window rounds 16-30; target ``restarts_total`` old / new >= 3 at a share error after 30
  rounds no worse than old's.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import numpy as np

import bench_operator
from walras.core import cycle, policies, snapshot
from walras.sim.walras_mechanics import created_pod

ROUND_S = 360.0
RESTART_S = 10.0
TYPES = ("a100", "v100", "p100", "k80")  # bench_operator.py's types, rates and job shape


def store_for(jobs: int, nodes: int, replicas: int | None, seed: int = 0) -> snapshot.Store:
    """The operator bench's synthetic cluster; ``replicas`` fixed, or 1-2 at random."""
    store: snapshot.Store = bench_operator.synthetic_store(jobs, nodes, seed, replicas)
    return store


def run(store: snapshot.Store, n_rounds: int, restart_s: float, error_round: int) -> dict[str, Any]:
    policy = policies.create("price-discovery", {"backend": "numpy"})
    state = cycle.CycleState()
    options = cycle.CycleOptions(restart_s=restart_s)
    start = 1.8e9
    creates: list[int] = []
    work: dict[tuple[str, str], float] = {}
    error: tuple[float, float] = (math.nan, math.nan)
    planned = None
    for r in range(1, n_rounds + 1):
        now = start + (r - 1) * ROUND_S
        planned = cycle.plan(state, policy, store.freeze(now), now=now, round_no=r, options=options)
        real = planned.realisation
        for d in real.deletes:
            store.delete("pod", d.pod.namespace, d.pod.name)
        for c in real.creates:
            store.upsert("pod", created_pod(c.manifest, c.node))
        creates.append(len(real.creates))
        # Work over this round at the job's rate on its type, less RESTART_S when (re)started:
        # the same accounting for both behaviours, whatever restart_s the realiser was told.
        for j in planned.solution.jobs:
            jr = real.jobs[j.key]
            if jr.group:
                lost = 0.0 if jr.kept else RESTART_S
                work[j.key] = work.get(j.key, 0.0) + j.throughput[jr.gpu_type] * (ROUND_S - lost)
        if r == error_round:
            error = _share_error(planned)
    assert planned is not None
    sol = planned.solution
    rates = np.array([[j.throughput.get(t, 0.0) for t in sol.group_type] for j in sol.jobs])
    target_rate = (sol.targets * rates).sum(axis=1)
    realised = np.array([work.get(j.key, 0.0) for j in sol.jobs]) / (n_rounds * ROUND_S)
    given_up = float(np.mean(np.log(target_rate / np.maximum(realised, 1e-12))))
    pods = sum(j.replicas for j in sol.jobs)
    return {
        "creates": creates,
        "pods": pods,
        "share_error_max": round(error[0], 4),
        "share_error_mean": round(error[1], 4),
        "utility_given_up": round(given_up, 5),
    }


def _share_error(planned: cycle.CyclePlan) -> tuple[float, float]:
    sol = planned.solution
    worst = []
    for r, j in enumerate(sol.jobs):
        hist = planned.histories[j.key]
        if hist.elapsed > 0:
            share = np.array([hist.received.get(g, 0.0) for g in sol.groups]) / hist.elapsed
            worst.append(float(np.abs(share - sol.targets[r]).max()))
    return max(worst), float(np.mean(worst))


def case(name: str, jobs: int, nodes: int, replicas: int | None, n_rounds: int) -> None:
    steady = slice(n_rounds // 2, n_rounds)
    totals: dict[str, int] = {}
    for label, restart_s in (("old", 0.0), ("new", RESTART_S)):
        t0, c0 = time.perf_counter(), time.process_time()
        out = run(store_for(jobs, nodes, replicas), n_rounds, restart_s, error_round=30)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        per_round = float(np.mean(out["creates"][steady]))
        totals[label] = int(sum(out["creates"][1:]))
        line = {
            "bench": "realiser",
            "case": f"{name}_{label}",
            "rounds": n_rounds,
            "steady_rounds": f"{steady.start + 1}-{n_rounds}",
            "pods": out["pods"],
            "restarts_per_round": round(per_round, 1),
            "restarts_pct": round(100.0 * per_round / out["pods"], 2),
            "restarts_max_round": int(max(out["creates"][steady])),
            "restarts_total": totals[label],
            "error_round": 30,
            "share_error_max": out["share_error_max"],
            "share_error_mean": out["share_error_mean"],
            "utility_given_up": out["utility_given_up"],
            "time_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
        }
        if label == "new":
            line["restarts_ratio_old_new"] = round(totals["old"] / max(totals["new"], 1), 2)
        print(json.dumps(line), flush=True)


def main() -> int:
    case("fit_1000x200", 1000, 200, None, 60)
    case("over_1000x2000", 1000, 200, 2, 30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of Hadar/HadarE (``walras.allocator.hadar.plan_round``). One JSON line per case.

Cases:

- ``plan-480x60-{dp,greedy}``: one round of a D5-shaped batch (480 jobs at t = 0; 15 nodes × 4
  GPUs: 20 V100, 20 P100, 20 K80; synthetic seeded throughputs, see
  ``tests/unit/hadar_helpers.gavel_like``), nothing running: the queue choice by the exact DP
  (9,261 pooled states) and by the greedy rule.
- ``plan-480x60-incremental``: the next round, with the first round's jobs running (keep/move
  rule, then the DP over the jobs still waiting).
- ``plan-480x60-replan``: the first round as the ``hadar`` policy plans it (Hyperbolic utility,
  makespan horizon, every job re-planned, backfill, the greedy queue rule above 500,000 cells).
- ``ttd-small-cluster``: HadarE vs Hadar on the small cluster of
  ``tests/unit/hadar_helpers.small_cluster`` (5 nodes × 4 GPUs of mixed types, 12 long forkable
  single-GPU jobs), run to completion in the fixed-round loop of the same module: TTD (makespan)
  of each, their ratio, and utilisation.

``time_s`` is wall time and ``cpu_s`` process CPU time (less sensitive on a shared machine).
"""

from __future__ import annotations

import json
import pathlib
import resource
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.unit.hadar_helpers import Workload, gavel_like, run, small_cluster

from walras.allocator.hadar import HadarInputs, Horizon, Hyperbolic, make_inputs, plan_round
from walras.core.policies.hadar import DP_MAX_CELLS


def _inputs(
    work: Workload,
    remaining: np.ndarray,
    current: np.ndarray,
    clock: float,
    utility: Hyperbolic | None = None,
) -> HadarInputs:
    return make_inputs(
        work.throughput,
        work.replicas,
        remaining,
        work.node_type,
        work.node_free,
        elapsed=np.full(len(remaining), clock),
        current=current,
        forkable=work.forkable,
        total_work=work.total_work,
        round_seconds=work.round_seconds,
        restart_seconds=work.restart_seconds,
        utility=utility,
    )


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def plan_cases() -> list[dict[str, object]]:
    work = gavel_like()
    J, K = len(work.replicas), len(work.node_type)
    first = _inputs(work, work.total_work.copy(), np.zeros((J, K), dtype=np.int64), 0.0)
    out: list[dict[str, object]] = []
    plans = {}
    for method in ("dp", "greedy"):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = plan_round(first, method=method)
        plans[method] = plan
        out.append(
            {
                "bench": "hadar",
                "case": f"plan-480x60-{method}",
                "time_s": round(time.perf_counter() - t0, 4),
                "cpu_s": round(time.process_time() - c0, 4),
                "jobs": J,
                "gpus": int(work.node_free.sum()),
                "placed": len(plan.jobs),
                "gpus_used": sum(p for jp in plan.jobs for _, p in jp.placement),
                "total_payoff": round(plan.total_payoff, 6),
                "method": plan.method,
            }
        )
    # The next round: the DP plan's jobs run for one round, then Hadar re-plans incrementally.
    current = np.zeros((J, K), dtype=np.int64)
    remaining = work.total_work.copy()
    for jp in plans["dp"].jobs:
        for k, p in jp.placement:
            current[jp.job, k] = p
        remaining[jp.job] = max(remaining[jp.job] - jp.rate * (360.0 - 10.0), 1.0)
    second = _inputs(work, remaining, current, 360.0)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_round(second)
    out.append(
        {
            "bench": "hadar",
            "case": "plan-480x60-incremental",
            "time_s": round(time.perf_counter() - t0, 4),
            "cpu_s": round(time.process_time() - c0, 4),
            "placed": len(plan.jobs),
            "kept": sum(jp.kept for jp in plan.jobs),
            "moved": sum(jp.moved for jp in plan.jobs),
            "method": plan.method,
            "peak_rss_mb": round(_peak_mb(), 1),
        }
    )
    replan = _inputs(
        work, work.total_work.copy(), np.zeros((J, K), dtype=np.int64), 0.0, Hyperbolic()
    )
    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan_round(
        replan,
        dp_max_cells=DP_MAX_CELLS,
        backfill=True,
        preempt=True,
        horizon=Horizon(),
    )
    out.append(
        {
            "bench": "hadar",
            "case": "plan-480x60-replan",
            "time_s": round(time.perf_counter() - t0, 4),
            "cpu_s": round(time.process_time() - c0, 4),
            "placed": len(plan.jobs),
            "gpus_used": sum(p for jp in plan.jobs for _, p in jp.placement),
            "method": plan.method,
        }
    )
    return out


def ttd_case() -> dict[str, object]:
    work = small_cluster()
    t0, c0 = time.perf_counter(), time.process_time()
    hadar = run(work, fork_jobs=False)
    hadare = run(work, fork_jobs=True)
    return {
        "bench": "hadar",
        "case": "ttd-small-cluster",
        "time_s": round(time.perf_counter() - t0, 4),
        "cpu_s": round(time.process_time() - c0, 4),
        "nodes": len(work.node_type),
        "gpus": int(work.node_free.sum()),
        "jobs": len(work.replicas),
        "ttd_hadar_h": round(hadar.ttd / 3600.0, 3),
        "ttd_hadare_h": round(hadare.ttd / 3600.0, 3),
        "ttd_ratio": round(hadar.ttd / hadare.ttd, 3),
        "util_hadar": round(hadar.utilisation, 3),
        "util_hadare": round(hadare.utilisation, 3),
        "avg_jct_hadar_h": round(float(hadar.completion.mean()) / 3600.0, 3),
        "avg_jct_hadare_h": round(float(hadare.completion.mean()) / 3600.0, 3),
        "rounds_hadar": hadar.rounds,
        "rounds_hadare": hadare.rounds,
    }


def main() -> None:
    for line in [*plan_cases(), ttd_case()]:
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

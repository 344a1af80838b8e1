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
- ``hadare-paper-mixes``: HadarE's acceptance case (``docs/forking.md``): the Hadar paper's §VI five
  nodes of one GPU each (1 V100, 2 P100 standing in for the T4s, 2 K80) and its workload mixes
  M-1 … M-12 of long forkable Gavel jobs (``tests/unit/hadar_helpers.paper_mix``), each run by
  ``walras simulate --semantics walras`` with the PRODUCT policies ``hadar`` and ``hadare``: per
  mix the TTD of each, the ratio hadar/hadare, both utilisations, the fluid lower bound of the
  TTD with forking (``fluid_makespan``, every job parallel, at most one copy per node) and
  hadar's TTD over it (the largest ratio any forking schedule could reach); the means over the
  mixes, over all twelve and over the seven the paper reports (M-1, 3, 4, 5, 8, 10, 12).
- ``ttd-small-cluster``: ``examples/hadare-small.yaml`` (a dozen long forkable jobs on 5 nodes × 4
  GPUs: 1 V100, 1 P100, 3 K80 nodes), the same product path, with the same bound.
- ``ttd-small-cluster-allocator``: the allocator alone with paper defaults on
  ``tests/unit/hadar_helpers.small_cluster`` in the helper's fixed-round loop (not the product
  policies; kept for comparison with earlier runs).

``time_s`` is wall time and ``cpu_s`` process CPU time (less sensitive on a shared machine).
"""

from __future__ import annotations

import json
import pathlib
import resource
import sys
import time
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.unit.hadar_helpers import (
    PAPER_CLUSTER,
    Workload,
    gavel_like,
    paper_mix,
    run,
    simulate_manifests,
    small_cluster,
)

from walras.allocator.hadar import HadarInputs, Horizon, Hyperbolic, make_inputs, plan_round
from walras.allocator.hadar.horizon import fluid_makespan
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


ROOT = pathlib.Path(__file__).resolve().parent.parent
PAPER_REPORTED = (1, 3, 4, 5, 8, 10, 12)
"""The mixes the Hadar paper reports results for."""
TYPES = ("v100", "p100", "k80")


def _forking_bound(
    docs: list[dict[str, Any]], gpus: dict[str, int], gpus_per_node: int = 1
) -> float:
    """Fluid lower bound (s) on the TTD when every (1-GPU) job may run on every type at once,
    with at most one copy per node (HadarE's rule: ``copies = nodes of the type``)."""
    thr = np.array([[float(d["spec"]["throughput"][t]) for t in TYPES] for d in docs])
    rem = np.array([float(d["spec"]["totalWork"]) for d in docs])
    n = len(docs)
    cap = np.array([float(gpus[t]) for t in TYPES])
    allowed = thr > 0
    ones = np.ones(n, dtype=np.int64)
    copies = np.tile(cap / gpus_per_node, (n, 1))
    _, t_star = fluid_makespan(
        thr, ones, rem, cap, allowed, parallel=np.ones(n, dtype=bool), copies=copies
    )
    return t_star


def paper_mixes_case() -> dict[str, object]:
    t0, c0 = time.perf_counter(), time.process_time()
    gpus = {t: int(c) for t, c in (p.split("=") for p in PAPER_CLUSTER.split(","))}
    mixes: list[dict[str, object]] = []
    for k in range(1, 13):
        docs = paper_mix(k)
        hadar = simulate_manifests(docs, "hadar")
        hadare = simulate_manifests(docs, "hadare")
        bound = _forking_bound(docs, gpus)
        mixes.append(
            {
                "mix": f"M-{k}",
                "ttd_hadar_h": round(hadar["makespan_s"] / 3600.0, 3),
                "ttd_hadare_h": round(hadare["makespan_s"] / 3600.0, 3),
                "ratio": round(hadar["makespan_s"] / hadare["makespan_s"], 3),
                "util_hadar": round(hadar["utilization"], 3),
                "util_hadare": round(hadare["utilization"], 3),
                "bound_h": round(bound / 3600.0, 3),
                # No schedule beats the bound, so no forking policy beats this ratio.
                "ratio_at_bound": round(hadar["makespan_s"] / bound, 3),
                "restarts_hadar": hadar["restarts"],
                "restarts_hadare": hadare["restarts"],
            }
        )
    ratios = [float(str(m["ratio"])) for m in mixes]
    return {
        "bench": "hadar",
        "case": "hadare-paper-mixes",
        "time_s": round(time.perf_counter() - t0, 4),
        "cpu_s": round(time.process_time() - c0, 4),
        "cluster": PAPER_CLUSTER,
        "gpus_per_node": 1,
        "mean_ratio": round(float(np.mean(ratios)), 3),
        "mean_ratio_paper_7": round(float(np.mean([ratios[k - 1] for k in PAPER_REPORTED])), 3),
        "min_ratio": round(min(ratios), 3),
        "mean_ratio_at_bound": round(float(np.mean([m["ratio_at_bound"] for m in mixes])), 3),
        "mean_util_hadar": round(float(np.mean([m["util_hadar"] for m in mixes])), 3),
        "mean_util_hadare": round(float(np.mean([m["util_hadare"] for m in mixes])), 3),
        "mixes": mixes,
    }


def small_product_case() -> dict[str, object]:
    t0, c0 = time.perf_counter(), time.process_time()
    path = ROOT / "examples" / "hadare-small.yaml"
    opts: dict[str, Any] = {"cluster": "v100=4,p100=4,k80=12", "gpus_per_node": "4"}
    hadar = simulate_manifests(path, "hadar", **opts)
    hadare = simulate_manifests(path, "hadare", **opts)
    docs = list(yaml.safe_load_all(path.read_text()))
    bound = _forking_bound(docs, {"v100": 4, "p100": 4, "k80": 12}, gpus_per_node=4)
    return {
        "bench": "hadar",
        "case": "ttd-small-cluster",
        "time_s": round(time.perf_counter() - t0, 4),
        "cpu_s": round(time.process_time() - c0, 4),
        "gpus": 20,
        "jobs": 12,
        "ttd_hadar_h": round(hadar["makespan_s"] / 3600.0, 3),
        "ttd_hadare_h": round(hadare["makespan_s"] / 3600.0, 3),
        "ttd_ratio": round(hadar["makespan_s"] / hadare["makespan_s"], 3),
        "util_hadar": round(hadar["utilization"], 3),
        "util_hadare": round(hadare["utilization"], 3),
        "bound_h": round(bound / 3600.0, 3),
        "ratio_at_bound": round(hadar["makespan_s"] / bound, 3),
        "restarts_hadar": hadar["restarts"],
        "restarts_hadare": hadare["restarts"],
    }


def ttd_case() -> dict[str, object]:
    work = small_cluster()
    t0, c0 = time.perf_counter(), time.process_time()
    hadar = run(work, fork_jobs=False)
    hadare = run(work, fork_jobs=True)
    return {
        "bench": "hadar",
        "case": "ttd-small-cluster-allocator",
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


def main(argv: list[str]) -> None:
    """``python bench/bench_hadar.py [case ...]``: every case, or only the named TTD cases."""
    cases = {
        "hadare-paper-mixes": paper_mixes_case,
        "ttd-small-cluster": small_product_case,
        "ttd-small-cluster-allocator": ttd_case,
    }
    if not argv:
        for line in plan_cases():
            print(json.dumps(line), flush=True)
    for name, case in cases.items():
        if not argv or name in argv:
            print(json.dumps(case()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

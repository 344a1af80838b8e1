"""`walras simulate --semantics walras` on Gavel's D5 case: every registered policy, a JSON line.

D5 (``tests/data/gavel``: 480 jobs of Gavel's seed-0 stream at t = 0, 20 V100 + 20 P100 + 20 K80,
4 GPUs per node, 360 s rounds) with 10 s restarts, through the operator's own scheduling core
(``walras.sim.walras_mechanics`` → ``walras.core.cycle.plan``). Each line carries the makespan,
average and p99 JCT, utilisation, restarts and solve time, with ``cpu_s`` beside ``wall_s``, and
Gavel's own max-min fairness record with the same restart cost for comparison (its simulator, its
mechanics). Each case runs in a worker process of its own.

Usage: ``python bench/bench_simulate_walras.py [policy ...]`` (default: all cases below).
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "gavel"
TRACE = DATA / "static_multi_seed0_n480.trace"


def remaining(exponent: float) -> dict[str, dict[str, object]]:
    """Price discovery weighted by remaining time^exponent (its own arguments)."""
    return {"price-discovery": {"weighting": "remaining", "weighting_exponent": exponent}}


REMAINING = remaining(-0.5)

# (label, policy, extra SimConfig fields)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("price-discovery", "price-discovery", {}),
    ("price-discovery-remaining-0.5", "price-discovery", {"policy_args": REMAINING}),
    (
        "price-discovery-remaining-0.5-backfill",
        "price-discovery",
        {"policy_args": REMAINING, "backfill": True},
    ),
    (
        "price-discovery-remaining-0.75-backfill",
        "price-discovery",
        {"policy_args": remaining(-0.75), "backfill": True},
    ),
    (
        "price-discovery-remaining-1-backfill",
        "price-discovery",
        {"policy_args": remaining(-1.0), "backfill": True},
    ),
    ("price-discovery-hold-3-rounds", "price-discovery", {"hold_s": 1080.0}),
    ("max-min-fairness", "max-min-fairness", {}),
    ("max-min-fairness-agnostic", "max-min-fairness-agnostic", {}),
    ("min-total-duration", "min-total-duration", {}),
    ("finish-time-fairness", "finish-time-fairness", {}),
    ("fifo-aware", "fifo-aware", {}),
    ("psdsf", "psdsf", {}),
    ("hadar", "hadar", {}),
    ("max-min-fairness-pop-4", "max-min-fairness", {"pop_shards": 4}),
]


def run_case(label: str, policy: str, extra: dict[str, Any]) -> dict[str, Any]:
    from walras.sim import walras_mechanics
    from walras.sim.config import SimConfig
    from walras.sim.metrics import SimResult
    from walras.sim.scenario import load_scenario
    from walras.sim.tally import Tally

    scenario = load_scenario(TRACE, cluster="20:20:20", gpus_per_node="4:4:4")
    config = SimConfig(round_s=360.0, restart_s=10.0, seed=0, semantics="walras", **extra)
    tally = Tally(scenario.workload, scenario.cluster.n_gpus)
    wall, cpu = time.perf_counter(), time.process_time()
    error = None
    try:
        makespan = walras_mechanics.run(
            scenario.workload,
            scenario.cluster,
            types.SimpleNamespace(name=policy),
            config,
            tally,
        )
    except Exception as exc:
        error, makespan = f"{type(exc).__name__}: {exc}", math.nan
    result = SimResult(
        policy=policy,
        config=SimConfig(semantics="walras", restart_s=10.0),
        cluster=scenario.cluster,
        tally=tally,
        makespan_s=makespan,
        wall_s=time.perf_counter() - wall,
    )
    summary = result.summary() if error is None else {}
    gavel = next(
        r
        for r in json.loads((DATA / "gavel_results.json").read_text())
        if r["case"] == "D5"
        and r["policy"] == "max_min_fairness_perf"
        and r["restart_seconds"] == 10
    )
    out: dict[str, Any] = {
        "bench": "simulate_walras",
        "case": f"D5-restart10-{label}",
        "policy": policy,
        **{k: v for k, v in extra.items()},
        "makespan_h": summary.get("makespan_s", math.nan) / 3600 if summary else None,
        "avg_jct_h": (summary.get("avg_jct_s") or math.nan) / 3600 if summary else None,
        "jct_p99_h": (summary.get("jct_p99_s") or math.nan) / 3600 if summary else None,
        "utilization": summary.get("utilization"),
        "restarts": summary.get("restarts"),
        "solve_s_mean": summary.get("solve_s_mean"),
        "solve_s_max": summary.get("solve_s_max"),
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "gavel_mmf_makespan_h": gavel["makespan_s"] / 3600,
        "gavel_mmf_avg_jct_h": gavel["avg_jct_s"] / 3600,
    }
    if error is not None:
        out["error"] = error
    return out


def main(argv: list[str]) -> int:
    cases = [c for c in CASES if not argv or c[0] in argv or c[1] in argv]
    with ProcessPoolExecutor(max_workers=2) as pool:
        for line in pool.map(run_case, *zip(*cases, strict=True)):
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

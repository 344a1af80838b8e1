"""`walras simulate --semantics walras` on Gavel's D5 case: every registered policy, a JSON line.

D5 (``tests/data/gavel``: 480 jobs of Gavel's seed-0 stream at t = 0, 20 V100 + 20 P100 + 20 K80, 4
GPUs per node unless a case says ``gpus_per_node``, 360 s rounds) with 10 s restarts, through the
operator's own scheduling core (``walras.sim.walras_mechanics`` → ``walras.core.cycle.plan``). Each
line carries the makespan, average and p99 JCT, utilisation, restarts and solve time, the cycles run
(``rounds``) and how many of them ran the policy's solver (``solves``; the others reused the last
plan, ``walras.core.cycle.solve``), and ``wall_s`` / ``cpu_s`` of the whole process that ran the
case (start-up and imports included, as a ``walras simulate`` process pays them), beside Gavel's own
simulator's record on that trace with the same restart cost (its max-min fairness run:
``gavel_wall_s``, makespan and average JCT; ``wall_ratio`` = wall_s / gavel_wall_s, target ≤ 1).
Each case runs in a process of its own, two at a time.

Usage: ``python bench/bench_simulate_walras.py [policy ...]`` (default: all cases below).
"""

from __future__ import annotations

import json
import math
import pathlib
import resource
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
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
    # Under PS-DSF a gang runs on one node: D5's 8-GPU gangs fit no 4-GPU node, so that run
    # ends with the simulator's error naming them (after the other jobs finish); on 10-GPU nodes
    # (two per type: 20 GPUs of each) every gang fits.
    ("psdsf", "psdsf", {}),
    ("psdsf-10-gpu-nodes", "psdsf", {"gpus_per_node": "10:10:10"}),
    ("hadar", "hadar", {}),
    ("hadare", "hadare", {}),
    ("max-min-fairness-pop-4", "max-min-fairness", {"pop_shards": 4}),
]


def run_case(label: str, policy: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Run one case in this process (the child of :func:`timed_case`); its result fields."""
    from walras.sim import walras_mechanics
    from walras.sim.config import SimConfig
    from walras.sim.metrics import SimResult
    from walras.sim.scenario import load_scenario
    from walras.sim.tally import Tally

    options = dict(extra)
    per_node = str(options.pop("gpus_per_node", "4:4:4"))
    scenario = load_scenario(TRACE, cluster="20:20:20", gpus_per_node=per_node)
    config = SimConfig(round_s=360.0, restart_s=10.0, seed=0, semantics="walras", **options)
    tally = Tally(scenario.workload, scenario.cluster.n_gpus)
    counts = {"rounds": 0, "solves": 0}

    def count(planned: Any) -> None:
        counts["rounds"] += 1
        counts["solves"] += 0 if planned.solution.timings.get("reused") else 1

    error = None
    try:
        makespan = walras_mechanics.run(
            scenario.workload,
            scenario.cluster,
            types.SimpleNamespace(name=policy),
            config,
            tally,
            observer=count,
        )
    except Exception as exc:
        error, makespan = f"{type(exc).__name__}: {exc}", math.nan
    result = SimResult(
        policy=policy,
        config=SimConfig(semantics="walras", restart_s=10.0),
        cluster=scenario.cluster,
        tally=tally,
        makespan_s=makespan,
        wall_s=0.0,
    )
    summary = result.summary() if error is None else {}
    out: dict[str, Any] = {
        "makespan_h": summary.get("makespan_s", math.nan) / 3600 if summary else None,
        "avg_jct_h": (summary.get("avg_jct_s") or math.nan) / 3600 if summary else None,
        "jct_p99_h": (summary.get("jct_p99_s") or math.nan) / 3600 if summary else None,
        "utilization": summary.get("utilization"),
        "restarts": summary.get("restarts"),
        "rounds": counts["rounds"],
        "solves": counts["solves"],
        "solve_s_mean": summary.get("solve_s_mean"),
        "solve_s_max": summary.get("solve_s_max"),
    }
    if error is not None:
        out["error"] = error
    return out


def timed_case(label: str, policy: str, extra: dict[str, Any]) -> dict[str, Any]:
    """One case as a process of its own: its line, with the process's wall and CPU time."""
    cmd = [sys.executable, __file__, "--one", label]
    wall = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - wall
    gavel = next(
        r
        for r in json.loads((DATA / "gavel_results.json").read_text())
        if r["case"] == "D5"
        and r["policy"] == "max_min_fairness_perf"
        and r["restart_seconds"] == 10
    )
    line: dict[str, Any] = {
        "bench": "simulate_walras",
        "case": f"D5-restart10-{label}",
        "policy": policy,
        **extra,
    }
    if proc.returncode != 0:
        return line | {"error": proc.stderr.strip().splitlines()[-1:]}
    return line | {
        **json.loads(proc.stdout.strip().splitlines()[-1]),
        "wall_s": round(wall_s, 2),
        "gavel_wall_s": gavel["wall_s"],
        "wall_ratio": round(wall_s / gavel["wall_s"], 2),
        "gavel_mmf_makespan_h": gavel["makespan_s"] / 3600,
        "gavel_mmf_avg_jct_h": gavel["avg_jct_s"] / 3600,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        label, policy, extra = next(c for c in CASES if c[0] == argv[1])
        out = run_case(label, policy, extra)
        # The whole process's CPU (all threads, imports included).
        use = resource.getrusage(resource.RUSAGE_SELF)
        out["cpu_s"] = round(use.ru_utime + use.ru_stime, 2)
        print(json.dumps(out), flush=True)
        return 0
    cases = [c for c in CASES if not argv or c[0] in argv or c[1] in argv]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for line in pool.map(timed_case, *zip(*cases, strict=True)):
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

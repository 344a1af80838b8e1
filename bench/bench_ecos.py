"""Benchmark of ``walras simulate --lp-solver ecos`` against Gavel's own simulator records.

One JSON line per record of ``tests/data/gavel/gavel_results.json`` that the unit tests do not
run with ECOS: case D5 (480 jobs on 20:20:20 with 4-GPU servers, restart cost 0 and 10 s), every
policy Gavel ran there. ``--lp-solver ecos`` solves Gavel's LP policies with Gavel's own solver
in Gavel's problem shape (``walras.allocator.gavel.ecos``), so the metrics should equal Gavel's
printed ones; ``err_*`` are ours / Gavel's − 1 (utilisation: a difference). Timing: ``time_s``
(wall), ``cpu_s`` (process CPU), ``solve_s_mean`` against Gavel's ``gavel_solve_mean_s`` (the
same ECOS solves, timed by Gavel's wrapper on the same machine kind): ``solve_ratio`` = ours /
Gavel's.

Pass substrings to run a subset: ``python bench/bench_ecos.py D5/max_min_fairness_perf``.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from typing import Any

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "gavel"
TRACE = DATA / "static_multi_seed0_n480.trace"


def case_name(record: dict[str, Any]) -> str:
    return f"{record['case']}/{record['policy']}/x{record['restart_seconds']}"


def run_case(record: dict[str, Any]) -> dict[str, Any]:
    from walras.sim import engine
    from walras.sim.config import SimConfig
    from walras.sim.errors import PolicyError
    from walras.sim.policies import GavelPolicy
    from walras.sim.scenario import load_scenario

    line: dict[str, Any] = {"bench": "simulate_ecos", "case": case_name(record)}
    wall, cpu = time.perf_counter(), time.process_time()
    scenario = load_scenario(
        TRACE, cluster=record["cluster"], gpus_per_node=record["gpus_per_server"]
    )
    config = SimConfig(
        round_s=float(record["round_seconds"]),
        restart_s=float(record["restart_seconds"]),
        seed=record["seed"],
        lp_solver="ecos",
    )
    policy = GavelPolicy(record["policy"], seed=record["seed"], lp_solver="ecos")
    try:
        result = engine.run(scenario.workload, scenario.cluster, policy, config)
    except PolicyError as exc:  # report and go on with the next case
        return line | {"error": str(exc), "cpu_s": round(time.process_time() - cpu, 3)}
    time_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    s = result.summary()
    solve_mean = s["solve_s_mean"] or 0.0
    return line | {
        "time_s": round(time_s, 3),
        "cpu_s": round(cpu_s, 3),
        "makespan_s": round(s["makespan_s"], 3),
        "avg_jct_s": round(s["avg_jct_s"], 3),
        "utilization": round(s["utilization"], 4),
        "solves": len(result.tally.solve_s),
        "gavel_solves": record["solves"],
        "solve_s_mean": round(solve_mean, 5),
        "gavel_solve_mean_s": round(record["solve_mean_s"], 5),
        "solve_ratio": round(solve_mean / record["solve_mean_s"], 3),
        "err_makespan": round(s["makespan_s"] / record["makespan_s"] - 1.0, 5),
        "err_avg_jct": round(s["avg_jct_s"] / record["avg_jct_s"] - 1.0, 5),
        "err_utilization": round(s["utilization"] - record["utilization"], 4),
    }


def main(argv: list[str]) -> int:
    records = json.loads((DATA / "gavel_results.json").read_text())
    for record in records:
        if record["case"] != "D5":
            continue
        if argv and not any(a in case_name(record) for a in argv):
            continue
        print(json.dumps(run_case(record)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

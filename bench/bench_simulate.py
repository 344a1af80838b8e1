"""Benchmark of ``walras simulate --semantics gavel`` against Gavel's own simulator records.

One JSON line per record of ``tests/data/gavel/gavel_results.json`` not already checked by the
unit tests: cases D3 (100 jobs, 8:16:24) and D5 (480 jobs on 20:20:20 with 4-GPU servers, restart
cost 0 and 10 s), for every policy Gavel ran there. Each line has our makespan, average and p99
JCT, utilisation, restarts and solve statistics, Gavel's values, the relative errors
(``err_*``: ours / Gavel's − 1; utilisation as a difference), ``time_s`` (wall), ``cpu_s``
(process CPU, all threads) and ``gavel_wall_s`` (Gavel's whole-process wall time from the record,
measured on the same machine kind; ``wall_ratio`` = time_s / gavel_wall_s, target ≤ 1/3 for
max_min_fairness_perf on D5).

Pass substrings to run a subset: ``python bench/bench_simulate.py D5/max_min_fairness_perf``.
A policy not yet in ``walras.allocator.gavel`` prints a line with ``skipped``.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from typing import Any

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "gavel"
CLI_CASE = "D5/max_min_fairness_perf/x0"
"""Also timed as a whole ``walras simulate`` process (the acceptance target's case)."""
TRACES = {"D3": DATA / "minimize_makespan.trace", "D5": DATA / "static_multi_seed0_n480.trace"}


def case_name(record: dict[str, Any]) -> str:
    return f"{record['case']}/{record['policy']}/x{record['restart_seconds']}"


def run_case(record: dict[str, Any]) -> dict[str, Any]:
    from walras.allocator import gavel
    from walras.sim import engine
    from walras.sim.config import SimConfig
    from walras.sim.errors import PolicyError
    from walras.sim.policies import GavelPolicy
    from walras.sim.scenario import load_scenario

    line: dict[str, Any] = {"bench": "simulate", "case": case_name(record)}
    if record["policy"] not in gavel.POLICY_NAMES:
        return line | {"skipped": "policy not in walras.allocator.gavel yet"}
    wall, cpu = time.perf_counter(), time.process_time()
    scenario = load_scenario(
        TRACES[record["case"]], cluster=record["cluster"], gpus_per_node=record["gpus_per_server"]
    )
    config = SimConfig(
        round_s=float(record["round_seconds"]),
        restart_s=float(record["restart_seconds"]),
        seed=record["seed"],
    )
    try:
        result = engine.run(
            scenario.workload, scenario.cluster, GavelPolicy(record["policy"], seed=0), config
        )
    except PolicyError as exc:  # report and go on with the next case
        return line | {"error": str(exc), "cpu_s": round(time.process_time() - cpu, 3)}
    time_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    s = result.summary()
    paid = record.get("restarted_dispatches")
    return line | {
        "time_s": round(time_s, 3),
        "cpu_s": round(cpu_s, 3),
        "gavel_wall_s": record["wall_s"],
        "wall_ratio": round(time_s / record["wall_s"], 3),
        "makespan_s": round(s["makespan_s"], 3),
        "avg_jct_s": round(s["avg_jct_s"], 3),
        "jct_p99_s": round(s["jct_p99_s"], 3),
        "utilization": round(s["utilization"], 4),
        "restarts": s["restarts"],
        "solves": len(result.tally.solve_s),
        "solve_s_mean": round(s["solve_s_mean"], 5),
        "solve_s_total": round(sum(result.tally.solve_s), 3),
        "solve_cpu_s_total": round(sum(result.tally.solve_cpu_s), 3),
        "gavel_makespan_s": record["makespan_s"],
        "gavel_avg_jct_s": record["avg_jct_s"],
        "gavel_utilization": record["utilization"],
        "gavel_solves": record["solves"],
        "gavel_restarts": paid[0] if paid else None,
        "err_makespan": round(s["makespan_s"] / record["makespan_s"] - 1, 4),
        "err_avg_jct": round(s["avg_jct_s"] / record["avg_jct_s"] - 1, 4),
        "err_utilization": round(s["utilization"] - record["utilization"], 4),
    }


def run_cli(record: dict[str, Any]) -> dict[str, Any]:
    """The whole ``walras simulate --json`` process (start-up and imports included), as Gavel's
    ``wall_s`` is its whole process. ``cpu_s`` is the child's user + system CPU: on a shared
    machine it is what the process would take on an idle one, where wall ≈ CPU (one thread)."""
    import resource
    import subprocess

    cmd = [sys.executable, "-c", "from walras.cli import main; main()", "simulate",
           str(TRACES[record["case"]]),
           "--policy", record["policy"], "--cluster", record["cluster"],
           "--gpus-per-node", record["gpus_per_server"],
           "--restart-seconds", str(record["restart_seconds"]), "--json"]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    time_s = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = {"bench": "simulate", "case": case_name(record) + "/cli"}
    if proc.returncode != 0:
        return line | {"error": proc.stderr.strip().splitlines()[-1:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return line | {
        "time_s": round(time_s, 3),
        "cpu_s": round(cpu_s, 3),
        "sim_wall_s": round(out["wall_s"], 3),
        "gavel_wall_s": record["wall_s"],
        "wall_ratio": round(time_s / record["wall_s"], 3),
        "cpu_ratio": round(cpu_s / record["wall_s"], 3),
        "err_makespan": round(out["makespan_s"] / record["makespan_s"] - 1, 4),
    }


def main(argv: list[str]) -> int:
    records = json.loads((DATA / "gavel_results.json").read_text())
    chosen = [r for r in records if r["case"] in TRACES]
    if argv:
        chosen = [r for r in chosen if any(a in case_name(r) for a in argv)]
    for record in chosen:
        print(json.dumps(run_case(record)), flush=True)
        if case_name(record) == CLI_CASE:
            print(json.dumps(run_cli(record)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

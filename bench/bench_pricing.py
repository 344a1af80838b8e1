"""Benchmark of price discovery on its paper's §6.2 instances; one JSON line per case.

Cases: n ∈ {1e4, 1e5, 1e6} × {log, target-priority}, plus n = 1e7 log when the machine has the
memory for it. Each case runs in its own interpreter so that ``peak_rss_mb`` (ru_maxrss of that
process: instance generation included) is the case's own. ``time_s`` is the wall time of
``pricing.solve`` (validation, start prices, iterations, allocation); ``cpu_s`` its CPU time,
which is less sensitive to other processes on a shared machine. ``gap`` is per job (the
paper's accuracy measure, ≤ 1e-3 by default), ``avg_utility`` the average utility.

Run: ``python bench/bench_pricing.py`` (all cases) or ``--case N UTILITY BACKEND`` (one).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

CASES = [
    (10_000, "log"),
    (10_000, "target"),
    (100_000, "log"),
    (100_000, "target"),
    (1_000_000, "log"),
    (1_000_000, "target"),
    (10_000_000, "log"),
]
BIG = 10_000_000
BIG_NEEDS_GB = 6.0  # the 1e7 instance peaks near 3 GB; leave room for the others on the host


def run_case(n: int, utility: str, backend: str) -> dict[str, object]:
    from walras.allocator import pricing
    from walras.allocator.pricing.instances import paper_problem

    problem = paper_problem(n, seed=0, utility=utility)
    # The solver imports scipy.optimize on its first L-BFGS-B step (~0.45 s of CPU, once per
    # process); import it here so that the case times the solve (bench_solve_cli times it all).
    import scipy.optimize  # noqa: F401

    wall, cpu = time.perf_counter(), time.process_time()
    result = pricing.solve(problem, backend=backend)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    from walras.allocator.pricing import solver

    threads = solver.THREADS  # numpy kernels: WALRAS_PRICING_THREADS (default 1)
    if result.backend.startswith("torch"):
        import torch

        threads = torch.get_num_threads()
    return {
        "bench": "pricing",
        "n": n,
        "m": problem.m,
        "utility": utility,
        "backend": result.backend,
        "threads": threads,
        "time_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "iterations": result.iterations,
        "coarse_iterations": int(result.timings["coarse_iterations"]),
        "gap": result.gap / n,
        "converged": result.converged,
        "avg_utility": result.utility / n,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "phases_s": {k: round(v, 4) for k, v in result.timings.items() if k != "coarse_iterations"},
    }


def available_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return 0.0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--case"]:
        print(json.dumps(run_case(int(argv[1]), argv[2], argv[3])), flush=True)
        return 0
    backend = os.environ.get("WALRAS_BENCH_BACKEND", "numpy")
    failed = 0
    for n, utility in CASES:
        if n >= BIG and available_gb() < BIG_NEEDS_GB:
            print(
                json.dumps(
                    {
                        "bench": "pricing",
                        "n": n,
                        "utility": utility,
                        "skipped": f"needs {BIG_NEEDS_GB} GB free",
                    }
                ),
                flush=True,
            )
            continue
        cmd = [sys.executable, __file__, "--case", str(n), utility, backend]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            failed += 1
            print(
                json.dumps(
                    {
                        "bench": "pricing",
                        "n": n,
                        "utility": utility,
                        "error": proc.stderr.strip().splitlines()[-1:],
                    }
                ),
                flush=True,
            )
            continue
        print(proc.stdout.strip(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

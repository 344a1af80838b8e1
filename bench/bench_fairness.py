"""Benchmark the centralised PS-DSF solve (``walras.allocator.fairness.solve``).

Cases: TDM and RDM at K = 100/1000/5000 nodes × N = 100/1000 tenants, three resources (gpu, cpu,
memory), each tenant eligible on about 30% of the nodes, weights 1–3, no caps. Prints one JSON
line per case: ``mode, K, N, method, time_s, cpu_s, sweeps, iterations, certificate_violation,
converged, peak_rss_mb`` plus ``budget_sweeps`` when the case was cut short. ``time_s`` is wall
time, ``cpu_s`` the process CPU time (``time.process_time``): the machine is shared, so wall time
alone overstates the cost. TDM runs the default method (``"market"``: Newton steps on the Fisher
market dual, counted in ``iterations``; sweeps only as a fallback); RDM runs sweeps finished
exactly by ``fairness.rdm_crossover`` (``converged: true`` with a certificate near rounding means
the finish succeeded), with at least ``RDM_MIN_SWEEPS`` sweeps of budget.

Each case runs with ``OPENBLAS_NUM_THREADS=1``: on two cores shared with other processes a
threaded BLAS spends most of its time spinning (a 1000×1000 solve measured 10–30× slower).

Every case runs in its own interpreter (so ``peak_rss_mb`` is that case's own). To keep the whole
run near three minutes on a 2-core machine, each case gets a sweep budget of about
``BUDGET_S`` seconds, estimated from timing the DRF start (about one sweep); a case that needs
more stops early with ``converged: false``, ``budget_sweeps`` and the certificate it reached.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

BUDGET_S = 8.0
RDM_MIN_SWEEPS = 40
CASES = [(mode, K, N) for K in (100, 1000, 5000) for N in (100, 1000) for mode in ("tdm", "rdm")]
# Cases to leave out, with the reason printed in their place (none today: RDM at K=5000, N=1000
# finishes exactly after 10 sweeps, about 12 s of CPU).
SKIP: dict[tuple[str, int, int], str] = {}


def instance(K: int, N: int, seed: int = 0) -> object:
    from walras.allocator.fairness import FairnessProblem

    rng = np.random.default_rng(seed)
    capacity = np.column_stack(
        [np.full(K, 8.0), rng.choice([32.0, 64.0, 96.0], K), rng.choice([256.0, 512.0, 1024.0], K)]
    )
    demand = np.column_stack(
        [rng.choice([1.0, 2.0, 4.0], N), rng.uniform(1, 16, N), rng.uniform(8, 128, N)]
    )
    eligible = rng.random((N, K)) < 0.3
    eligible[np.arange(N), rng.integers(0, K, N)] = True
    return FairnessProblem(
        capacity=capacity, demand=demand, weight=rng.choice([1.0, 2.0, 3.0], N), eligible=eligible
    )


def run_case(mode: str, K: int, N: int) -> dict[str, object]:
    from walras.allocator.fairness import solve

    problem = instance(K, N)
    start = time.perf_counter()
    # DRF start ≈ one sweep (the market is skipped here: this only sizes the sweep budget).
    solve(problem, mode=mode, max_sweeps=0, method="sweeps")  # type: ignore[arg-type]
    per_sweep = time.perf_counter() - start
    budget = max(1, int(BUDGET_S / max(per_sweep, 1e-6)))
    if mode == "rdm":
        # RDM finishes exactly (rdm_crossover) once the sweeps have found the bottleneck
        # structure, 20–30 sweeps at K = N = 1000; a budget below that would only measure sweeps.
        budget = max(budget, RDM_MIN_SWEEPS)
    start = time.perf_counter()
    cpu = time.process_time()
    result = solve(problem, mode=mode, max_sweeps=budget)  # type: ignore[arg-type]
    cpu = time.process_time() - cpu
    elapsed = time.perf_counter() - start
    line: dict[str, object] = {
        "bench": "fairness",
        "mode": mode,
        "K": K,
        "N": N,
        "method": result.method,
        "time_s": round(elapsed, 4),
        "cpu_s": round(cpu, 4),
        "sweeps": result.sweeps,
        "iterations": result.iterations,
        "certificate_violation": float(result.certificate_violation),
        "converged": result.converged,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if not result.converged and result.method == "sweeps":
        line["budget_sweeps"] = budget
    return line


def main(argv: list[str]) -> int:
    if argv:
        mode, K, N = argv[0], int(argv[1]), int(argv[2])
        print(json.dumps(run_case(mode, K, N)), flush=True)
        return 0
    failed = 0
    for mode, K, N in CASES:
        if (mode, K, N) in SKIP:
            line = {"bench": "fairness", "mode": mode, "K": K, "N": N, "skipped": SKIP[mode, K, N]}
            print(json.dumps(line), flush=True)
            continue
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        rc = subprocess.run(
            [sys.executable, __file__, mode, str(K), str(N)], check=False, env=env
        ).returncode
        if rc != 0:
            print(json.dumps({"bench": "fairness", "mode": mode, "K": K, "N": N, "error": rc}))
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

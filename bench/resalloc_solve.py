"""Solve a ``walras generate`` .npz file with resalloc, the code of the price-discovery paper.

The comparison point of ``bench_solve_cli.py``: "Allocation of fungible resources via a fast,
scalable price discovery method" (Agrawal, Boyd et al.) ships ``resalloc``
(github.com/cvxgrp/resalloc, which needs torch). This script only calls its public API
(``AllocationProblem``, ``utilities.Log``, ``utilities.TargetPriority``, ``solve``); it runs in an
interpreter where resalloc is importable (a separate environment: it is not a Walras dependency)
and prints one JSON object: ``time_s``/``cpu_s`` of building the problem and solving it (as
``walras solve --json`` reports them), the gap per job, the iterations.

The data are converted to float32 tensors, as in the paper's own experiments (its notebooks
build the §6.2 instance with ``.float()``); that is the setting its timings were published for.

Run: ``python bench/resalloc_solve.py FILE.npz [--eps 1e-3] [--max-iter 100] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("problem")
    parser.add_argument("--eps", type=float, default=1e-3)
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1, as walras solve uses)"
    )
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from resalloc.fungible import AllocationProblem, utilities

    torch.set_num_threads(args.threads)
    with np.load(args.problem, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    kind = str(arrays["utility"]) if "utility" in arrays else "log"
    started, started_cpu = time.perf_counter(), time.process_time()
    A = torch.from_numpy(arrays["throughput"]).float()
    R = torch.from_numpy(arrays["capacity"]).float()
    if kind == "log":
        util = utilities.Log()
    elif kind == "target":
        targets = torch.from_numpy(arrays["target"]).float().reshape(-1, 1)
        weights = torch.from_numpy(arrays["weight"]).float().reshape(-1, 1)
        util = utilities.TargetPriority(targets, weights)
    else:
        print(f"error: resalloc comparison supports log and target, not {kind!r}", file=sys.stderr)
        return 2
    problem = AllocationProblem(A, resource_limits=R, utility_function=util)
    _, stats = problem.solve(eps=args.eps, max_iter=args.max_iter)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    n = int(A.shape[0])
    gaps = [float(g) for g in stats.gaps]
    print(
        json.dumps(
            {
                "n": n,
                "utility": kind,
                "gap": gaps[-1] if gaps else None,
                "converged": bool(gaps) and gaps[-1] <= args.eps,
                "iterations": len(gaps),
                "avg_utility": float(stats.utils[-1]) if stats.utils else None,
                "time_s": elapsed,
                "cpu_s": cpu,
                "threads": torch.get_num_threads(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Price discovery on CUDA against numpy on the same instance; one JSON line per case.

For each n (default 10⁶ and 10⁷) and utility (log, target-priority) of the price-discovery
paper's §6.2 instance ("Allocation of fungible resources via a fast, scalable price discovery
method", Agrawal, Boyd et al.), the script solves once with numpy on the CPU and once with the
torch backend on CUDA, and prints:

- ``numpy`` / ``cuda``: wall and CPU seconds of ``pricing.solve`` (CUDA synchronised before the
  clock stops), iterations, gap per job, average utility, backend;
- ``agreement``: the largest price difference (relative to the largest price), the largest
  allocation difference, the difference of average utilities, and ``agree``: whether the
  prices match to 1e-7 relative, the allocations to 1e-7 and the average utilities to 1e-9
  (the tolerances of the CPU torch/numpy test; the same code path on the same instance gives
  the same answer up to floating-point reordering);
- ``speedup``: numpy wall over CUDA wall.

A first small CUDA solve (not reported) pays for the CUDA context and kernel loading, so that
the timed solve is the steady state an operator sees round after round. Without CUDA the
script prints one JSON line saying why and exits with status 1; bad arguments exit with 2.

Run: ``python bench/gpu_check.py [--n 1000000 --n 10000000] [--utility log] [--device cuda:0]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

NS = (1_000_000, 10_000_000)
UTILITIES = ("log", "target")


def fail(message: str, code: int) -> int:
    print(json.dumps({"bench": "gpu_check", "error": message}), flush=True)
    print(f"error: {message}", file=sys.stderr)
    return code


def timed_solve(
    problem: Any, backend: str, device: str | None, torch: Any
) -> tuple[Any, float, float]:
    from walras.allocator import pricing

    wall, cpu = time.perf_counter(), time.process_time()
    result = pricing.solve(problem, backend=backend, device=device)
    if device is not None and torch is not None:
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def summary(result: Any, wall: float, cpu: float, n: int) -> dict[str, Any]:
    return {
        "backend": result.backend,
        "time_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "iterations": result.iterations,
        "coarse_iterations": int(result.timings["coarse_iterations"]),
        "polish_steps": int(result.timings["polish_steps"]),
        "gap": result.gap / n,
        "converged": result.converged,
        "avg_utility": result.utility / n,
        "prices": [float(p) for p in result.prices],
        "phases_s": {
            k: round(v, 4)
            for k, v in result.timings.items()
            if k not in ("coarse_iterations", "polish_steps")
        },
    }


def case(n: int, utility: str, device: str, torch: Any) -> dict[str, Any]:
    from walras.allocator.pricing.instances import paper_problem

    problem = paper_problem(n, seed=0, utility=utility)
    ours, wall_np, cpu_np = timed_solve(problem, "numpy", None, None)
    gpu, wall_gpu, cpu_gpu = timed_solve(problem, "torch", device, torch)
    p_np, p_gpu = np.asarray(ours.prices), np.asarray(gpu.prices)
    dp = float(np.max(np.abs(p_np - p_gpu)) / max(float(np.max(np.abs(p_np))), 1e-300))
    dx = float(np.max(np.abs(np.asarray(ours.allocation) - np.asarray(gpu.allocation))))
    du = abs(ours.utility - gpu.utility) / n
    return {
        "bench": "gpu_check",
        "n": n,
        "m": problem.m,
        "utility": utility,
        "device": torch.cuda.get_device_name(device),
        "numpy": summary(ours, wall_np, cpu_np, n),
        "cuda": summary(gpu, wall_gpu, cpu_gpu, n),
        "agreement": {
            "max_price_diff_rel": dp,
            "max_allocation_diff": dx,
            "avg_utility_diff": du,
            "same_iterations": ours.iterations == gpu.iterations,
            "agree": dp <= 1e-7 and dx <= 1e-7 and du <= 1e-9 * max(1.0, abs(ours.utility) / n),
        },
        "speedup": round(wall_np / wall_gpu, 2) if wall_gpu > 0 else None,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, action="append", help="jobs (repeatable; 1e6 and 1e7)")
    parser.add_argument("--utility", action="append", help="log and/or target (default both)")
    parser.add_argument("--device", default="cuda", help="torch CUDA device (default cuda)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    ns = args.n or list(NS)
    utilities = args.utility or list(UTILITIES)
    for n in ns:
        if n < 1:
            return fail(f"--n must be ≥ 1, got {n}", 2)
    for utility in utilities:
        if utility not in UTILITIES:
            return fail(f"--utility must be one of {', '.join(UTILITIES)}, got {utility!r}", 2)
    try:
        import torch
    except ImportError:
        return fail("no CUDA: torch is not installed", 1)
    if not torch.cuda.is_available():
        return fail("no CUDA: torch.cuda.is_available() is False on this host", 1)
    if not args.device.startswith("cuda"):
        return fail(f"--device must be a CUDA device, got {args.device!r}", 2)
    from walras.allocator import pricing
    from walras.allocator.pricing.instances import paper_problem

    # Warm-up: the CUDA context, kernel loading and the allocator's first blocks.
    pricing.solve(paper_problem(10_000, seed=1), backend="torch", device=args.device)
    torch.cuda.synchronize(args.device)
    for n in ns:
        for utility in utilities:
            torch.cuda.reset_peak_memory_stats(args.device)
            line = case(n, utility, args.device, torch)
            line["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated(args.device) / 2**20, 1)
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

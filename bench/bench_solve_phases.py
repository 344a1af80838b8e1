"""Where a 10⁶-job price-discovery solve spends its CPU, phase by phase; one JSON line per case.

Cases: the paper's §6.2 instance ("Allocation of fungible resources via a fast, scalable price
discovery method", Agrawal, Boyd et al.), n = 10⁶, m = 4, log and target-priority utilities.
Each case solves ``REPEATS`` times in one interpreter and reports, per phase, the CPU seconds
(user + system, ``getrusage``) and calls of the first solve (``cold``: it pays for the fresh
pages) and the median of the later ones (``warm``):

- ``setup``: validation and sorting each job's throughputs (``solver._from_problem``);
- ``start_prices``: the stride-sample solves (``solver._coarse_prices``);
- ``evaluate``: evaluations of the whole problem (``solver._evaluate`` at n = 10⁶);
- ``polish``: the elastic-job polish on the whole problem (``polish.polish`` at n = 10⁶);
- ``allocation``: the dense result (``solver._finish``).

The phases are timed by wrapping those functions in this process; the solver is not changed.
``PYTHONPATH=/path/to/other/src`` profiles another checkout's solver with this environment.

Run: ``python bench/bench_solve_phases.py [--repeats N] [--utility log]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from collections.abc import Callable
from typing import Any

from walras.allocator import pricing
from walras.allocator.pricing import instances, polish, solver

N = 1_000_000
REPEATS = 6


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def instrument(stats: dict[str, list[float]]) -> None:
    """Wrap the phase functions so that each call adds its CPU seconds to ``stats[phase]``."""

    def wrap(module: Any, name: str, phase: Callable[..., str | None]) -> None:
        inner = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = cpu()
            out = inner(*args, **kwargs)
            key = phase(*args, **kwargs)
            if key is not None:
                stats.setdefault(key, []).append(cpu() - start)
            return out

        setattr(module, name, timed)

    def full(prep: Any, *_: Any, **__: Any) -> bool:
        return bool(prep.n == N)

    wrap(solver, "_from_problem", lambda *a, **k: "setup")
    wrap(solver, "_coarse_prices", lambda p, *a, **k: "start_prices" if full(p) else None)
    wrap(solver, "_evaluate", lambda p, *a, **k: "evaluate" if full(p) else None)
    wrap(polish, "polish", lambda p, *a, **k: "polish" if full(p) else None)
    wrap(solver, "_finish", lambda *a, **k: "allocation")


def case(utility: str, repeats: int) -> dict[str, Any]:
    problem = instances.paper_problem(N, seed=0, utility=utility)
    stats: dict[str, list[float]] = {}
    instrument(stats)
    solves: list[tuple[float, dict[str, tuple[int, float]]]] = []
    result = None
    for _ in range(repeats):
        stats.clear()
        start = cpu()
        result = pricing.solve(problem)
        total = cpu() - start
        solves.append((total, {k: (len(v), sum(v)) for k, v in stats.items()}))
    assert result is not None
    first, later = solves[0], solves[1:]
    phases = {
        key: {
            "calls": calls,
            "cold_cpu_s": round(cold, 4),
            "warm_cpu_s": round(statistics.median(s[1].get(key, (0, 0.0))[1] for s in later), 4)
            if later
            else None,
        }
        for key, (calls, cold) in first[1].items()
    }
    return {
        "bench": "solve_phases",
        "case": f"{utility}_{N}",
        "cold_cpu_s": round(first[0], 4),
        "warm_cpu_s": round(statistics.median(s[0] for s in later), 4) if later else None,
        "phases": phases,
        "iterations": result.iterations,
        "sample_iterations": int(result.timings["coarse_iterations"]),
        "polish_steps": int(result.timings["polish_steps"]),
        "gap": result.gap / N,
        "walras_src": solver.__file__,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="solves per case")
    parser.add_argument("--utility", action="append", help="log and/or target (default both)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        print("error: --repeats must be ≥ 1", file=sys.stderr)
        return 2
    for utility in args.utility or ("log", "target"):
        print(json.dumps(case(utility, args.repeats)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

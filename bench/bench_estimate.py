"""Throughputs users don't know: D5 under price discovery with hidden and noisy
declarations, with and without estimation; and the estimator's own speed.

D5 (``tests/data/gavel``: 480 jobs at t = 0, 20 V100 + 20 P100 + 20 K80 in nodes of 4, 360 s
rounds, 10 s restarts, ``--semantics walras --policy price-discovery``) three times:

- ``true``: users declare the true throughputs;
- ``hidden50-noise30-estimate``: each job leaves half its types undeclared (``--hide-fraction
  0.5``) and declares the rest with log-normal noise σ = 0.3 (``--throughput-noise 0.3``); the
  operator's measurements and estimates (``walras.sim.declared``) correct the view;
- ``hidden50-noise30-no-estimate``: the same declarations taken as they are (undeclared types are
  not eligible).

Each line carries the average JCT and its ratio to the ``true`` run (the acceptance target is
≤ 1.10 with estimation), with ``cpu_s`` beside ``time_s``. The ``estimator`` case times one
``estimate_throughputs`` call on a D5-sized matrix (480 × 3, half hidden, 100 groups).

Usage: ``python bench/bench_estimate.py [case ...]``.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "gavel" / "static_multi_seed0_n480.trace"

# (label, throughput noise σ, hide fraction, estimate)
CASES: list[tuple[str, float, float, bool]] = [
    ("true", 0.0, 0.0, True),
    ("hidden50-noise30-estimate", 0.3, 0.5, True),
    ("hidden50-noise30-no-estimate", 0.3, 0.5, False),
]


def run_case(label: str, noise: float, hide: float, estimate: bool) -> dict[str, Any]:
    from walras.sim import engine
    from walras.sim.config import SimConfig
    from walras.sim.scenario import load_scenario

    scenario = load_scenario(TRACE, cluster="20:20:20", gpus_per_node="4:4:4")
    config = SimConfig(
        semantics="walras",
        restart_s=10.0,
        throughput_noise=noise,
        hide_fraction=hide,
        estimate=estimate,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    policy: Any = type("P", (), {"name": "price-discovery"})()
    result = engine.run(scenario.workload, scenario.cluster, policy, config)
    summary = result.summary()
    return {
        "bench": "estimate",
        "case": f"D5-price-discovery-{label}",
        "throughput_noise": noise,
        "hide_fraction": hide,
        "estimate": estimate,
        "avg_jct_h": summary["avg_jct_s"] / 3600,
        "makespan_h": summary["makespan_s"] / 3600,
        "utilization": summary["utilization"],
        "restarts": summary["restarts"],
        "time_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
    }


def estimator_case() -> dict[str, Any]:
    import numpy as np

    from walras.allocator.estimate import estimate_throughputs

    rng = np.random.default_rng(0)
    n, m = 480, 3
    kind = rng.integers(0, 100, n)
    truth = np.exp(rng.normal(0, 2, 100)[kind][:, None] + rng.normal(0, 1, (1, m)))
    known = np.where(
        rng.random((n, m)) < 0.5, np.nan, truth * np.exp(0.3 * rng.normal(size=(n, m)))
    )
    known[np.isnan(known).all(axis=1), 0] = truth[np.isnan(known).all(axis=1), 0]
    wall, cpu = time.perf_counter(), time.process_time()
    est = estimate_throughputs(known, groups=kind.tolist(), tol=1e-6)
    hidden = np.isnan(known)
    return {
        "bench": "estimate",
        "case": "estimator-480x3",
        "iterations": est.iterations,
        "median_rel_error_hidden": float(np.median(np.abs(est.values[hidden] / truth[hidden] - 1))),
        "time_s": round(time.perf_counter() - wall, 4),
        "cpu_s": round(time.process_time() - cpu, 4),
    }


def main(argv: list[str]) -> int:
    if not argv or "estimator" in argv:
        print(json.dumps(estimator_case()), flush=True)
    cases = [c for c in CASES if not argv or c[0] in argv]
    if not cases:
        return 0
    with ProcessPoolExecutor(max_workers=2) as pool:
        lines = list(pool.map(run_case, *zip(*cases, strict=True)))
    base = next((x["avg_jct_h"] for x in lines if x["case"].endswith("-true")), math.nan)
    for line in lines:
        line["avg_jct_vs_true"] = line["avg_jct_h"] / base if base == base else None
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Benchmark of Gavel's heterogeneity-aware max-min fairness LP (``walras.allocator.gavel``).

Prints one JSON line per case: ``time_s`` (wall) and ``cpu_s`` (process CPU, steadier on a shared
machine) of one ``allocate`` call, and the LP size (variables, rows, non-zeros of the HiGHS
problem). Cases, as in POP's evaluation (the POP paper) and the simulator's D5:

- ``2048x3``: 2,048 jobs on 512 GPUs of each of k80, p100, v100 (1,536 GPUs), POP's size;
- ``480x3``: 480 jobs on 20 GPUs per type (D5's cluster, where capacity is contended).

Each in two solution modes: ``vertex`` (HiGHS's optimal vertex) and ``central`` (the default:
the analytic center of the optimal face, Gavel's ECOS optimum; ``walras.allocator.gavel.center``).

Jobs: (job type, scale factor) pairs drawn with a fixed seed from Gavel's throughput table,
``src/walras/data/gavel/simulation_throughputs.json`` when the package ships it; otherwise
throughputs are generated (seeded) with Gavel-like spreads (v100 ≥ p100 ≥ k80).
"""

from __future__ import annotations

import json
import pathlib
import resource
import time

import numpy as np

from walras.allocator.gavel import GavelInputs
from walras.allocator.gavel.max_min_fairness import MaxMinFairness

TYPES = ("k80", "p100", "v100")
TABLE = (
    pathlib.Path(__file__).resolve().parent.parent
    / "src/walras/data/gavel/simulation_throughputs.json"
)


def throughputs(n_jobs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """``(throughputs (J, 3), scale factors (J,), source)``."""
    rng = np.random.default_rng(seed)
    if TABLE.exists():
        table = json.loads(TABLE.read_text())
        keys = sorted(table["v100"])
        pick = rng.integers(0, len(keys), n_jobs)
        thr = np.array([[table[t][keys[i]]["null"] for t in TYPES] for i in pick])
        sf = np.array([int(keys[i].rsplit(",", 1)[1].strip(" )")) for i in pick])
        return thr, sf, "gavel-table"
    v100 = rng.uniform(1.0, 100.0, n_jobs)
    thr = np.stack(
        [v100 * rng.uniform(0.1, 0.5, n_jobs), v100 * rng.uniform(0.4, 0.9, n_jobs), v100], 1
    )
    sf = rng.choice(np.array([1, 2, 4, 8]), n_jobs, p=[0.65, 0.12, 0.17, 0.06])
    return thr, sf, "generated"


def case(n_jobs: int, per_type: int, central: bool) -> dict[str, object]:
    thr, sf, source = throughputs(n_jobs)
    inputs = GavelInputs(thr, sf, np.full(3, float(per_type)), np.arange(n_jobs), type_names=TYPES)
    policy = MaxMinFairness(aware=True, central=central)
    t0, c0 = time.perf_counter(), time.process_time()
    x = policy.allocate(inputs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_var = n_jobs * 3 + 1
    return {
        "bench": "gavel_lp",
        "case": f"{n_jobs}x3-{'central' if central else 'vertex'}",
        "policy": "max_min_fairness_perf",
        "jobs": n_jobs,
        "gpus": 3 * per_type,
        "lp_vars": n_var,
        "lp_rows": 2 * n_jobs + 3,
        "lp_nnz": 3 * n_jobs * 3 + n_jobs,
        "throughputs": source,
        "time_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "min_normalised_throughput": round(float(_values(x, inputs).min()), 6),
        "gpus_used": round(float((sf @ x).sum()), 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _values(x: np.ndarray, inputs: GavelInputs) -> np.ndarray:
    cap = inputs.capacity
    prop = inputs.throughputs @ (cap / cap.sum())
    return (inputs.throughputs * x).sum(axis=1) * inputs.scale_factors / prop


def main() -> None:
    for n_jobs, per_type in ((480, 20), (2048, 512)):
        for central in (False, True):
            print(json.dumps(case(n_jobs, per_type, central)), flush=True)


if __name__ == "__main__":
    main()

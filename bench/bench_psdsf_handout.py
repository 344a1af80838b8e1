"""Benchmark of PS-DSF's per-job hand-out (``walras.allocator.fairness.handout.hand_out``).

Prints one JSON line per case: ``time_s`` (median wall time of 3 calls) and ``cpu_s`` (median
process CPU time, less sensitive than wall time on a shared machine). Each case is a cluster of
8-GPU nodes of 3 GPU types, tenants holding PS-DSF-like node times (each tenant on about a fifth
of the nodes, every node's times summing to 1), jobs of 1–8 GPUs with a random speed per type,
usable on every node. Sizes: 1,000 jobs / 200 nodes / 50 tenants (the operator's 2 s round budget
applies there) and 5,000 jobs / 1,000 nodes / 200 tenants.
"""

from __future__ import annotations

import json
import resource
import statistics
import time

import numpy as np

from walras.allocator.fairness.handout import hand_out

REPEATS = 3


def case(n_jobs: int, n_nodes: int, n_tenants: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    types = rng.integers(0, 3, n_nodes)
    preference = rng.uniform(1.0, 4.0, (n_jobs, 3))[:, types]
    y = rng.random((n_tenants, n_nodes)) * (rng.random((n_tenants, n_nodes)) < 0.2)
    y /= np.maximum(y.sum(axis=0), 1e-12)
    owner = rng.integers(0, n_tenants, n_jobs)
    gang = rng.choice(np.array([1.0, 2.0, 4.0, 8.0]), n_jobs, p=[0.4, 0.3, 0.2, 0.1])
    usable = np.ones((n_jobs, n_nodes), dtype=bool)
    node_gpus = np.full(n_nodes, 8.0)
    walls, cpus = [], []
    for _ in range(REPEATS):
        t0, c0 = time.perf_counter(), time.process_time()
        out = hand_out(y, owner, usable, gang, node_gpus, preference)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    handed = float((out.targets * gang[:, None]).sum())
    return {
        "bench": "psdsf_handout",
        "case": f"{n_jobs}x{n_nodes}x{n_tenants}",
        "time_s": round(statistics.median(walls), 4),
        "cpu_s": round(statistics.median(cpus), 4),
        "gpus_handed_out": round(handed, 2),
        "gpus": float(node_gpus.sum()),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    for n_jobs, n_nodes, n_tenants in ((1000, 200, 50), (5000, 1000, 200)):
        print(json.dumps(case(n_jobs, n_nodes, n_tenants)), flush=True)


if __name__ == "__main__":
    main()

"""Benchmark of the rounds realiser (``walras.allocator.rounds.plan_round``).

Prints one JSON line per case. Each case simulates a few rounds on an oversubscribed cluster of
8-GPU nodes (gangs of 1-4 pods of 1/2/4/8 GPUs, targets scaled to fill each group), feeding each
plan back as the next round's ``current``, and reports the time of one ``plan_round`` call:
``time_s`` (median over the rounds), ``time_first_s`` (round 1, nothing running), ``time_max_s``,
and ``cpu_s`` (median process CPU time, less sensitive than wall time on a shared machine).

Cases: groups = GPU types (price discovery) and groups = single nodes (PS-DSF), at 1,000 jobs /
200 nodes (the operator's round budget is 2 s in total there) and 5,000 jobs / 1,000 nodes.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time

import numpy as np

from walras.allocator import rounds

ROUNDS = 6


def instance(
    n_jobs: int, n_nodes: int, per_node_groups: bool, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_groups = n_nodes if per_node_groups else 4
    node_group = np.arange(n_nodes) % n_groups
    node_free = np.full(n_nodes, 8)
    gpp = rng.choice(np.array([1, 2, 4, 8]), n_jobs, p=[0.4, 0.3, 0.2, 0.1])
    rep = rng.choice(np.array([1, 2, 4]), n_jobs, p=[0.6, 0.3, 0.1])
    if per_node_groups:
        rep = np.minimum(rep, 8 // gpp)  # a group is one node: the gang must fit on it
        # PS-DSF-like sparsity: each job has a share on a handful of nodes.
        targets = np.zeros((n_jobs, n_groups))
        for j in range(n_jobs):
            nodes = rng.choice(n_groups, size=4, replace=False)
            targets[j, nodes] = rng.random(4)
    else:
        targets = rng.random((n_jobs, n_groups)) * (rng.random((n_jobs, n_groups)) < 0.6)
        targets[np.arange(n_jobs), rng.integers(0, n_groups, n_jobs)] += 0.1
    targets /= targets.sum(axis=1, keepdims=True)
    capacity = np.bincount(node_group, weights=node_free, minlength=n_groups)
    load = (targets * (rep * gpp)[:, None]).sum(axis=0)
    targets *= np.minimum(1.0, capacity / np.maximum(load, 1e-12))[None, :]
    return targets, rep, gpp, node_group, node_free


def case(n_jobs: int, n_nodes: int, per_node_groups: bool) -> dict[str, object]:
    targets, rep, gpp, node_group, node_free = instance(n_jobs, n_nodes, per_node_groups)
    received = np.zeros(targets.shape)
    elapsed = np.zeros(n_jobs)
    eligible = targets.sum(axis=1) > 0
    current: np.ndarray | None = None
    times: list[float] = []
    cpu: list[float] = []
    placed = kept = 0
    for _ in range(ROUNDS):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = rounds.plan_round(
            targets, received, elapsed, rep, gpp, node_group, node_free, current
        )
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        received, elapsed = rounds.advance(received, elapsed, plan, eligible)
        current = rounds.as_current(plan, n_jobs, n_nodes)
        placed = len(plan.placements)
        kept = sum(pl.kept for pl in plan.placements)
    used = int((current * gpp[:, None]).sum()) if current is not None else 0
    return {
        "bench": "rounds",
        "case": f"{n_jobs}x{n_nodes}-{'per-node' if per_node_groups else 'types'}",
        "J": n_jobs,
        "K": n_nodes,
        "G": int(targets.shape[1]),
        "pairs": int((targets > 0).sum()),
        "rounds": ROUNDS,
        "time_s": round(statistics.median(times), 5),
        "time_first_s": round(times[0], 5),
        "time_max_s": round(max(times), 5),
        "cpu_s": round(statistics.median(cpu), 5),
        "placed_last": placed,
        "kept_last": kept,
        "gpu_use_last": round(used / int(node_free.sum()), 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> int:
    for n_jobs, n_nodes in ((1_000, 200), (5_000, 1_000)):
        for per_node in (False, True):
            print(json.dumps(case(n_jobs, n_nodes, per_node)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

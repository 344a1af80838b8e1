"""A steady cluster whose prices and shares move in their last digits writes no status patch.

Twelve one-GPU jobs on two 8-GPU nodes of one type: every job runs every round, so nothing a
user reads changes but the numbers the solver recomputes. Each round every job's throughput
(between 1 and 1.77 steps/s) is moved by at most one part in a thousand around its base (as a
measured throughput moves; the spec's generation is unchanged), so its expected throughput moves
in its third significant digit, sometimes across a rounding boundary (checked below: the oracle
that the scenario does move shown digits). Bound: two values at most 2 × 0.001 × 1.77 < 0.004
apart, below the unit 0.01 of the last shown digit of a number in [1, 10), differ by at most
one unit once rounded. The rule of ``walras.operator.visible``: a move within one unit of the
last shown digit is not a change. So after the first round (every status written once) no round
writes a job status; a real change (one job's throughput up by half) is written, for that job.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from walras.core import conditions as cond
from walras.core import cycle, policies
from walras.operator import handlers, loop
from walras.testing.memory_api import MemoryApi

GPU = "nvidia.com/gpu"
JOBS = 12


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"walras.dev/gpu-type": "g"}},
        "status": {
            "allocatable": {GPU: "8", "cpu": "64", "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def job(i: int, rate: float) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": f"j{i:02d}", "uid": f"u{i}", "generation": 1},
        "spec": {
            "replicas": 1,
            "throughput": {"g": rate},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


class Cluster:
    def __init__(self) -> None:
        self.api = MemoryApi()
        self.now = 1000.0
        self.rounds = loop.RoundLoop(
            loop.snapshot.Store(),
            self.api,  # type: ignore[arg-type]  # the in-memory stand-in for writes.Api
            loop.LoopConfig(
                policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
                round_seconds=360.0,
                clock=lambda: self.now,
                cycle_options=cycle.CycleOptions(restart_s=10.0),
            ),
        )
        self.api.watcher = handlers.Watcher(self.rounds.cache, self.rounds)
        pool = {"metadata": {"name": "g"}, "spec": {"gpuType": "g"}}
        self.api.watcher.apply("pool", {"type": "ADDED", "object": pool})
        for name in ("n0", "n1"):
            self.api.watcher.apply("node", {"type": "ADDED", "object": node(name)})
        for i in range(JOBS):
            self.api.add_job(job(i, 1.0 + 0.07 * i))

    def set_rate(self, i: int, rate: float) -> None:
        obj = self.api.jobs[("ns", f"j{i:02d}")]
        obj["spec"]["throughput"] = {"g": rate}
        self.api.watcher.apply("job", {"type": "MODIFIED", "object": obj})

    def round(self) -> tuple[int, list[str]]:
        """One full round; the job-status patches it sent, and the jobs they were for."""
        before = self.api.counts["job_status"]
        statuses = {k: dict(v.get("status") or {}) for k, v in self.api.jobs.items()}
        asyncio.run(self.rounds.run_round())
        self.now += 360.0
        patched = [k[1] for k, v in self.api.jobs.items() if (v.get("status") or {}) != statuses[k]]
        return self.api.counts["job_status"] - before, sorted(patched)


def shown(cluster: Cluster) -> dict[str, tuple[float, float]]:
    """What each job's status would show now: its expected throughput and cost (3 digits)."""
    sol = cluster.rounds.last_solution
    assert sol is not None
    price = sol.prices["g"]
    return {
        j.name: (
            cond.num(float(sol.expected_throughput[r])),
            cond.num(price * sol.targets[r].sum()),
        )
        for r, j in enumerate(sol.jobs)
    }


def test_last_digit_moves_write_nothing_and_a_real_change_is_written() -> None:
    cluster = Cluster()
    first, _ = cluster.round()
    assert first == JOBS  # every status written once
    before = shown(cluster)
    moved_digits = False
    for n in range(1, 9):
        for i in range(JOBS):
            cluster.set_rate(i, (1.0 + 0.07 * i) * (1 + 1e-3 * math.sin(1.7 * n + i)))
        patches, _ = cluster.round()
        assert patches == 0, f"round {n}"
        now = shown(cluster)
        moved_digits = moved_digits or now != before
        before = now
    # The oracle that the scenario is not trivially static: some shown value did move.
    assert moved_digits
    cluster.set_rate(5, 1.5 * (1.0 + 0.07 * 5))
    patches, patched = cluster.round()
    assert "j05" in patched and patches == len(patched)

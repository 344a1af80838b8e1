"""Benchmark of the operator's per-round progress work (``walras.operator.throughputs``).

Prints one JSON line per case: the time of one ``Throughputs.prepare`` call (reading every active
job's pods' ``walras.dev/steps-done``, checking and summing them, measuring steps/s per GPU type,
and the effective throughputs, with the estimator when some are missing) on a snapshot of
``jobs`` one-pod jobs over 4 GPU types (one node per type). Every job declares one type, so three
quarters of the matrix is estimated once progress is measured. Cases ``silent`` (no pod reports:
the cost every cluster pays) and ``reporting`` (every pod reports). ``time_s`` is the median over
the rounds after the first, ``time_first_s`` the first (nothing measured yet: no estimation),
``cpu_s`` the median process CPU time (less sensitive than wall time on a shared machine).
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from typing import Any

from walras.core import snapshot
from walras.operator.throughputs import Throughputs

TYPES = ("a", "b", "c", "d")
ROUNDS = 5


def store(n_jobs: int) -> snapshot.Store:
    s = snapshot.Store()
    for t in TYPES:
        s.upsert("pool", {"metadata": {"name": t}, "spec": {"gpuType": t}})
        s.upsert(
            "node",
            {
                "metadata": {"name": f"n-{t}", "labels": {"walras.dev/gpu-type": t}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            },
        )
    for j in range(n_jobs):
        t = TYPES[j % len(TYPES)]
        s.upsert(
            "job",
            {
                "metadata": {"namespace": "ns", "name": f"j{j}", "uid": f"u{j}"},
                "spec": {
                    "replicas": 1,
                    "throughput": {t: 1.0 + j % 7},
                    "template": {"spec": {"containers": [{"name": "c", "image": f"img{j % 20}"}]}},
                },
            },
        )
    return s


def pods(s: snapshot.Store, n_jobs: int, k: int, reporting: bool) -> None:
    for j in range(n_jobs):
        t = TYPES[j % len(TYPES)]
        pod: dict[str, Any] = {
            "metadata": {
                "namespace": "ns",
                "name": f"j{j}-r1-0",
                "uid": f"p{j}",
                "labels": {"walras.dev/job": f"j{j}"},
                "annotations": (
                    {"walras.dev/steps-done": str(k * 10 * (1 + j % 7))} if reporting else {}
                ),
            },
            "spec": {"nodeName": f"n-{t}"},
            "status": {"phase": "Running"},
        }
        s.upsert("pod", pod)


def case(n_jobs: int, reporting: bool) -> dict[str, object]:
    s = store(n_jobs)
    keeper = Throughputs(min_samples=1)
    times: list[float] = []
    cpus: list[float] = []
    for k in range(ROUNDS):
        pods(s, n_jobs, k, reporting)
        snap = s.freeze(10.0 * k)
        c0, t0 = time.process_time(), time.perf_counter()
        keeper.prepare(snap, 10.0 * k)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {
        "bench": "progress",
        "case": f"prepare-{n_jobs}-jobs-{'reporting' if reporting else 'silent'}",
        "time_s": round(statistics.median(times[1:]), 4),
        "time_first_s": round(times[0], 4),
        "cpu_s": round(statistics.median(cpus[1:]), 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [1000, 5000]
    for n in sizes:
        for reporting in (False, True):
            print(json.dumps(case(n, reporting)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

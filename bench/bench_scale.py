"""How `walras simulate --semantics walras --policy price-discovery` grows with jobs and GPUs.

For each size N (jobs) the script writes a continuous trace with ``walras simulate generate``
(Philly job sizes and durations, Poisson arrivals at ``30 × N / 100,000`` jobs per hour, seed 1)
and simulates it on a cluster scaled with the load: ``G = 2,000 × N / 100,000`` GPUs split
35 % V100, 35 % P100, 30 % K80 (700:700:600 at 100k jobs) in nodes of 4 (V100, P100) and 8 (K80)
GPUs. Arrival rate and GPUs grow together, so every size covers about the same simulated span
(N / rate = 3,333 hours of arrivals) at the same offered load per GPU; what grows is the number
of jobs per round (∝ G) and of event rounds (an incremental round per arrival and per completion,
≤ 2N), so the expected cost is about (full rounds + 2N) × (a per-round floor + c × G).

Each run is one ``/usr/bin/time -v`` process under ``nice -n 10``: ``cpu_s`` (user + system),
wall seconds and the maximum RSS, with the run's rounds from its JSON line. One JSON line per
size. On a machine shared with other work, compare ``cpu_s`` between sizes, not wall time.

``--cycles K [N]`` instead measures the per-cycle cost at full size: the first K cycles of the
N-job trace (default 100,000, on its 2,000 GPUs) in this process, as ``cpu_s`` per cycle and the
largest number of active jobs and pods a cycle saw; the whole run's cost is then about
(full rounds + 2N) × that.

Usage: ``python bench/bench_scale.py [N ...]`` (default: 1000 3000) or ``python
bench/bench_scale.py --cycles K [N]``; traces and logs go to ``$TMPDIR/walras-scale``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from typing import Any

SIZES = (1_000, 3_000)  # `make bench` runs these (about 2 CPU-minutes); name 10000+ to go on
SHARES = (0.35, 0.35, 0.30)  # V100, P100, K80


def cluster_for(jobs: int) -> str:
    """GPUs per type (Gavel's A:B:C form), 2,000 GPUs at 100,000 jobs, whole nodes of 4/4/8."""
    gpus = 2_000 * jobs / 100_000
    counts = [
        max(node, round(gpus * share / node) * node)
        for share, node in zip(SHARES, (4, 4, 8), strict=True)
    ]
    return ":".join(str(c) for c in counts)


def _time_field(text: str, name: str) -> str:
    match = re.search(rf"{re.escape(name)}: (.+)", text)
    if match is None:
        raise RuntimeError(f"/usr/bin/time -v printed no {name!r}")
    return match.group(1).strip()


def _seconds(clock: str) -> float:
    """``h:mm:ss`` or ``m:ss.ss`` as seconds."""
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def run_size(jobs: int, work: pathlib.Path) -> dict[str, object]:
    walras = [str(pathlib.Path(sys.executable).parent / "walras")]  # the console script
    trace = _trace(jobs, work)
    rate = 30 * jobs / 100_000
    cluster = cluster_for(jobs)
    timed = subprocess.run(
        [
            "/usr/bin/time",
            "-v",
            "nice",
            "-n",
            "10",
            *walras,
            "simulate",
            str(trace),
            "--policy",
            "price-discovery",
            "--semantics",
            "walras",
            "--cluster",
            cluster,
            "--gpus-per-node",
            "4:4:8",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if timed.returncode != 0:
        raise RuntimeError(f"{jobs} jobs: exit {timed.returncode}: {timed.stderr[-2000:]}")
    (work / f"j{jobs}.time.txt").write_text(timed.stderr)
    summary = json.loads(timed.stdout.strip().splitlines()[-1])
    cpu = float(_time_field(timed.stderr, "User time (seconds)")) + float(
        _time_field(timed.stderr, "System time (seconds)")
    )
    return {
        "bench": "scale",
        "jobs": jobs,
        "gpus": sum(int(c) for c in cluster.split(":")),
        "cluster": cluster,
        "rate_per_hour": rate,
        "rounds": summary["rounds"],
        "cpu_s": round(cpu, 1),
        "wall_s": _seconds(
            _time_field(timed.stderr, "Elapsed (wall clock) time (h:mm:ss or m:ss)")
        ),
        "max_rss_mb": round(
            int(_time_field(timed.stderr, "Maximum resident set size (kbytes)")) / 1024
        ),
        "utilization": round(summary["utilization"], 3),
        "avg_jct_h": round(summary["avg_jct_s"] / 3600, 2),
        "makespan_h": round(summary["makespan_s"] / 3600, 1),
    }


def _trace(jobs: int, work: pathlib.Path) -> pathlib.Path:
    trace = work / f"j{jobs}.trace"
    rate = 30 * jobs / 100_000
    walras = str(pathlib.Path(sys.executable).parent / "walras")
    subprocess.run(
        [
            walras,
            "simulate",
            "generate",
            str(trace),
            "--jobs",
            str(jobs),
            "--rate",
            f"{rate:g}",
            "--seed",
            "1",
        ],
        check=True,
        capture_output=True,
    )
    return trace


class _EnoughCyclesError(Exception):
    """Raised by the observer once the wanted number of cycles ran."""


def per_cycle(cycles: int, jobs: int, work: pathlib.Path) -> dict[str, object]:
    """The first ``cycles`` cycles of the ``jobs``-job trace, timed in this process."""
    import time

    from walras.sim import walras_mechanics
    from walras.sim.config import SimConfig
    from walras.sim.scenario import load_scenario
    from walras.sim.tally import Tally

    cluster = cluster_for(jobs)
    scenario = load_scenario(_trace(jobs, work), cluster=cluster, gpus_per_node="4:4:8")
    seen: list[tuple[int, int]] = []

    def observe(plan: Any) -> None:
        seen.append((len(plan.active), len(plan.snapshot.pods)))
        if len(seen) >= cycles:
            raise _EnoughCyclesError

    tally = Tally(scenario.workload, scenario.cluster.n_gpus)
    started = time.process_time()
    with contextlib.suppress(_EnoughCyclesError):
        walras_mechanics.run(
            scenario.workload,
            scenario.cluster,
            "price-discovery",
            SimConfig(semantics="walras"),
            tally,
            observer=observe,
        )
    cpu = time.process_time() - started
    return {
        "bench": "scale_cycles",
        "jobs": jobs,
        "gpus": sum(int(c) for c in cluster.split(":")),
        "cycles": len(seen),
        "cpu_s": round(cpu, 1),
        "ms_per_cycle": round(1e3 * cpu / len(seen), 2),
        "max_active_jobs": max(a for a, _ in seen),
        "max_pods": max(p for _, p in seen),
        "jobs_arrived": sum(1 for a in scenario.workload.arrivals if a <= tally.rounds[-1].end_s)
        if tally.rounds
        else 0,
    }


def main(argv: list[str]) -> None:
    work = pathlib.Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "walras-scale"
    work.mkdir(parents=True, exist_ok=True)
    if argv[:1] == ["--cycles"]:
        jobs = int(argv[2]) if len(argv) > 2 else 100_000
        print(json.dumps(per_cycle(int(argv[1]), jobs, work)), flush=True)
        return
    sizes = [int(a) for a in argv] or list(SIZES)
    for jobs in sizes:
        print(json.dumps(run_size(jobs, work)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

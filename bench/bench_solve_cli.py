"""Benchmark of the whole ``walras solve`` process, as a user times it; one JSON line per case.

Cases: ``walras --help`` (start-up only) and ``walras solve FILE --json`` on
``walras generate --n 1000000 --utility log`` (and ``target``). The instance is generated once,
outside the timing. Each case runs ``REPEATS`` times; the line reports the median run:

- ``time_s``: wall time of the whole process (interpreter start, imports, reading the .npz,
  solving, printing), ``cpu_s``: its user + system CPU time (``RUSAGE_CHILDREN``);
- ``solve_time_s`` / ``solve_cpu_s``: what the command itself reports for building the problem
  and solving it (``time_s``/``cpu_s`` of its JSON), ``gap`` per job and ``iterations``.

Issue 15's target for the log case: solve ≤ 0.35 s CPU, whole process ≤ 0.8 s wall, gap ≤ 1e-3.

Run: ``python bench/bench_solve_cli.py`` (or ``python bench/run.py solve_cli``).
"""

from __future__ import annotations

import json
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

N = 1_000_000
REPEATS = 3


def walras_command() -> list[str]:
    """The ``walras`` console script of this interpreter's environment (what users run)."""
    script = pathlib.Path(sys.executable).parent / "walras"
    if script.exists():
        return [str(script)]
    found = shutil.which("walras")
    return [found] if found else [sys.executable, "-c", "from walras.cli import main; main()"]


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, child user + system CPU s, stdout) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def case(name: str, cmd: list[str], *, solve: bool) -> dict[str, Any]:
    runs = []
    for _ in range(REPEATS):
        wall, cpu, out = timed(cmd)
        runs.append((wall, cpu, json.loads(out) if solve else None))
    runs.sort(key=lambda r: r[0])
    wall, cpu, report = runs[len(runs) // 2]
    line: dict[str, Any] = {
        "bench": "solve_cli",
        "case": name,
        "repeats": REPEATS,
        "time_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "time_s_all": [round(r[0], 4) for r in runs],
        "cpu_s_median": round(statistics.median(r[1] for r in runs), 4),
    }
    if report is not None:
        line.update(
            {
                "n": report["n"],
                "solve_time_s": round(report["time_s"], 4),
                "solve_cpu_s": round(report["cpu_s"], 4) if "cpu_s" in report else None,
                "gap": report["gap"],
                "iterations": report["iterations"],
                "converged": report["converged"],
            }
        )
    return line


def main() -> int:
    walras = walras_command()
    print(json.dumps(case("help", [*walras, "--help"], solve=False)), flush=True)
    with tempfile.TemporaryDirectory(prefix="walras-bench-") as tmp:
        for utility in ("log", "target"):
            path = pathlib.Path(tmp) / f"{utility}.npz"
            subprocess.run(
                [*walras, "generate", str(path), "--n", str(N), "--utility", utility],
                check=True,
                capture_output=True,
            )
            cmd = [*walras, "solve", str(path), "--json"]
            print(json.dumps(case(f"solve_{utility}_{N}", cmd, solve=True)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the whole ``walras solve`` process, as a user times it; one JSON line per case.

Cases: ``walras --help`` (start-up only) and ``walras solve FILE --json`` on
``walras generate --n 1000000 --utility log`` (and ``target``). The instance is generated once,
outside the timing. Each case runs ``REPEATS`` times; the line reports the median run:

- ``time_s``: wall time of the whole process (interpreter start, imports, reading the .npz,
  solving, printing), ``cpu_s``: its user + system CPU time (``RUSAGE_CHILDREN``), split into
  ``user_s`` and ``sys_s``, and ``page_faults`` (minor faults: fresh memory the kernel had to
  zero; unlike times, this count barely depends on what else runs on the machine);
- ``solve_time_s`` / ``solve_cpu_s``: what the command itself reports for building the problem
  and solving it (``time_s``/``cpu_s`` of its JSON), ``gap`` per job and ``iterations``.

Target for the log case: solve ≤ 0.35 s CPU, whole process ≤ 0.8 s wall, gap ≤ 1e-3.
``walras_src`` names the source tree that ran (``PYTHONPATH=/path/to/other/src`` runs another
checkout's code with this environment, for an old-versus-new comparison in one time window).

Run: ``python bench/bench_solve_cli.py`` (or ``python bench/run.py solve_cli``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

N = 1_000_000
REPEATS = 3
# Which checkout's ``walras`` the child processes import (they inherit PYTHONPATH).
WALRAS_SRC = subprocess.run(
    [sys.executable, "-c", "import walras, pathlib; print(pathlib.Path(walras.__file__).parent)"],
    capture_output=True,
    text=True,
    check=True,
).stdout.strip()


def walras_command() -> list[str]:
    """The ``walras`` console script of this interpreter's environment (what users run).

    A tree from before ``walras.console`` (another checkout on ``PYTHONPATH``, for old-vs-new
    runs) cannot be started by today's script, which imports it: its own entry point runs then.
    """
    if not (pathlib.Path(WALRAS_SRC) / "console.py").exists():
        return [sys.executable, "-c", "import sys; sys.argv[0] = 'walras'; "
                "from walras.cli import main; main()"]  # fmt: skip
    script = pathlib.Path(sys.executable).parent / "walras"
    if script.exists():
        return [str(script)]
    found = shutil.which("walras")
    return [found] if found else [sys.executable, "-c", "from walras.cli import main; main()"]


@dataclass(frozen=True)
class Run:
    """One run of a command: wall and CPU seconds, minor page faults, stdout."""

    wall: float
    user: float
    sys: float
    faults: int
    out: str

    @property
    def cpu(self) -> float:
        return self.user + self.sys


def timed(cmd: list[str]) -> Run:
    """One run of ``cmd``, measured with the children's resource usage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Run(
        wall,
        after.ru_utime - before.ru_utime,
        after.ru_stime - before.ru_stime,
        after.ru_minflt - before.ru_minflt,
        proc.stdout,
    )


def case(name: str, cmd: list[str], *, solve: bool, repeats: int = REPEATS) -> dict[str, Any]:
    runs = sorted((timed(cmd) for _ in range(repeats)), key=lambda r: r.wall)
    mid = runs[len(runs) // 2]
    report = json.loads(mid.out) if solve else None
    line: dict[str, Any] = {
        "bench": "solve_cli",
        "case": name,
        "repeats": repeats,
        "time_s": round(mid.wall, 4),
        "cpu_s": round(mid.cpu, 4),
        "user_s": round(mid.user, 4),
        "sys_s": round(mid.sys, 4),
        "page_faults": mid.faults,
        "time_s_all": [round(r.wall, 4) for r in runs],
        "cpu_s_median": round(statistics.median(r.cpu for r in runs), 4),
        "cpu_s_min": round(min(r.cpu for r in runs), 4),
        "walras_src": WALRAS_SRC,
    }
    if report is not None:
        solve_cpu = [json.loads(r.out).get("cpu_s") for r in runs]
        line.update(
            {
                "n": report["n"],
                "solve_time_s": round(report["time_s"], 4),
                "solve_cpu_s": round(report["cpu_s"], 4) if "cpu_s" in report else None,
                "solve_cpu_s_all": [None if c is None else round(c, 4) for c in solve_cpu],
                "gap": report["gap"],
                "iterations": report["iterations"],
                "converged": report["converged"],
            }
        )
    return line


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per case (median)")
    parser.add_argument("--utility", action="append", help="log and/or target (default both)")
    args = parser.parse_args(argv)
    walras = walras_command()
    help_line = case("help", [*walras, "--help"], solve=False, repeats=args.repeats)
    print(json.dumps(help_line), flush=True)
    with tempfile.TemporaryDirectory(prefix="walras-bench-") as tmp:
        for utility in args.utility or ("log", "target"):
            path = pathlib.Path(tmp) / f"{utility}.npz"
            subprocess.run(
                [*walras, "generate", str(path), "--n", str(N), "--utility", utility],
                check=True,
                capture_output=True,
            )
            cmd = [*walras, "solve", str(path), "--json"]
            line = case(f"solve_{utility}_{N}", cmd, solve=True, repeats=args.repeats)
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

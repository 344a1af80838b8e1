"""Benchmark of the whole ``walras solve`` process, as a user times it; one JSON line per case.

Cases: ``walras --help`` (start-up only) and ``walras solve FILE --json`` on
``walras generate --n 1000000 --utility log`` (and ``target``). The instance is generated once,
outside the timing. Each case runs ``REPEATS`` times; the line reports the median run:

- ``time_s``: wall time of the whole process (interpreter start, imports, reading the .npz,
  solving, printing), ``cpu_s``: its user + system CPU time, split into ``user_s`` and
  ``sys_s``, ``page_faults`` (minor faults: fresh memory the kernel had to zero; unlike times,
  this count barely depends on what else runs on the machine) and ``peak_rss_mb`` (the
  process's own, from ``wait4``);
- ``solve_time_s`` / ``solve_cpu_s``: what the command itself reports for building the problem
  and solving it (``time_s``/``cpu_s`` of its JSON), ``gap`` per job and ``iterations``.

Targets (log utility, n = 10⁶, gap ≤ 1e-3 per job): solve ≤ 0.15 s CPU, peak memory ≤ 400 MB,
the whole process ≥ 20× faster than resalloc (target-priority: ≥ 30×).

resalloc is the code of "Allocation of fungible resources via a fast, scalable price discovery
method" (Agrawal, Boyd et al.). When an interpreter that imports it is named by
``WALRAS_RESALLOC_PYTHON`` (or this one imports it), each solve case also runs
``bench/resalloc_solve.py`` on the same file, interleaved with ``walras solve`` run by run (the
same time window on a shared machine), and the line gets ``resalloc`` (its medians) and
``ratios`` (resalloc's median over ours: whole-process wall and CPU, solve wall and CPU). When
there is none, ``resalloc`` says so. ``walras_src`` names the source tree that ran
(``PYTHONPATH=/path/to/other/src`` runs another checkout's code with this environment, for an
old-versus-new comparison in one time window).

Run: ``python bench/bench_solve_cli.py [--repeats N] [--utility log] [--no-resalloc]`` (or
``python bench/run.py solve_cli``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
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
    """One run of a command: wall and CPU seconds, minor page faults, peak RSS, stdout."""

    wall: float
    user: float
    sys: float
    faults: int
    rss_mb: float
    out: str

    @property
    def cpu(self) -> float:
        return self.user + self.sys


def timed(cmd: list[str]) -> Run:
    """One run of ``cmd``, measured with that child's own resource usage (``wait4``)."""
    with tempfile.TemporaryFile() as out:
        wall = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {err[-2000:]}")
        out.seek(0)
        text = out.read().decode()
    return Run(
        wall,
        usage.ru_utime,
        usage.ru_stime,
        usage.ru_minflt,
        usage.ru_maxrss / 1024,  # KiB on Linux
        text,
    )


def summary(runs: list[Run], *, solve: bool) -> dict[str, Any]:
    """The median run's figures (by wall time), with every run's wall and CPU beside them."""
    ordered = sorted(runs, key=lambda r: r.wall)
    mid = ordered[len(ordered) // 2]
    line: dict[str, Any] = {
        "time_s": round(mid.wall, 4),
        "cpu_s": round(mid.cpu, 4),
        "user_s": round(mid.user, 4),
        "sys_s": round(mid.sys, 4),
        "page_faults": mid.faults,
        "peak_rss_mb": round(max(r.rss_mb for r in runs), 1),
        "time_s_all": [round(r.wall, 4) for r in runs],
        "cpu_s_all": [round(r.cpu, 4) for r in runs],
        "time_s_median": round(statistics.median(r.wall for r in runs), 4),
        "cpu_s_median": round(statistics.median(r.cpu for r in runs), 4),
        "cpu_s_min": round(min(r.cpu for r in runs), 4),
    }
    if solve:
        reports = [json.loads(r.out) for r in runs]
        report = json.loads(mid.out)
        line.update(
            {
                "n": report["n"],
                "solve_time_s": round(report["time_s"], 4),
                "solve_cpu_s": round(report["cpu_s"], 4),
                "solve_time_s_median": round(statistics.median(x["time_s"] for x in reports), 4),
                "solve_cpu_s_median": round(statistics.median(x["cpu_s"] for x in reports), 4),
                "solve_cpu_s_all": [round(x["cpu_s"], 4) for x in reports],
                "gap": report["gap"],
                "iterations": report["iterations"],
                "converged": report["converged"],
            }
        )
    return line


def case(
    name: str,
    cmd: list[str],
    *,
    solve: bool,
    repeats: int = REPEATS,
    other: list[str] | None = None,
) -> dict[str, Any]:
    """``cmd`` ``repeats`` times (and ``other``, resalloc, right after each run); one line."""
    runs, others = [], []
    for _ in range(repeats):
        runs.append(timed(cmd))
        if other is not None:
            others.append(timed(other))
    line: dict[str, Any] = {"bench": "solve_cli", "case": name, "repeats": repeats}
    line.update(summary(runs, solve=solve))
    line["walras_src"] = WALRAS_SRC
    if other is not None:
        theirs = summary(others, solve=True)
        line["resalloc"] = {k: v for k, v in theirs.items() if not k.endswith("_all")}
        line["ratios"] = {
            key: round(theirs[key] / line[key], 2)
            for key in (
                "time_s_median",
                "cpu_s_median",
                "solve_time_s_median",
                "solve_cpu_s_median",
            )
        }
    return line


def resalloc_python() -> tuple[str | None, str]:
    """An interpreter that imports resalloc (``WALRAS_RESALLOC_PYTHON`` or this one), or why not."""
    named = os.environ.get("WALRAS_RESALLOC_PYTHON", "").strip()
    candidate = named or sys.executable
    try:
        found = subprocess.run(
            [candidate, "-c", "import resalloc.fungible"], capture_output=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"WALRAS_RESALLOC_PYTHON={named} cannot run: {exc}"
    if found.returncode == 0:
        return candidate, "ok"
    if named:
        return None, f"WALRAS_RESALLOC_PYTHON={named} cannot import resalloc"
    return None, (
        "not installed: set WALRAS_RESALLOC_PYTHON to an interpreter that imports resalloc "
        "(github.com/cvxgrp/resalloc, with torch) for the side-by-side comparison"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per case (median)")
    parser.add_argument("--utility", action="append", help="log and/or target (default both)")
    parser.add_argument("--no-resalloc", action="store_true", help="skip the resalloc runs")
    args = parser.parse_args(argv)
    walras = walras_command()
    help_line = case("help", [*walras, "--help"], solve=False, repeats=args.repeats)
    print(json.dumps(help_line), flush=True)
    theirs, why = (None, "skipped (--no-resalloc)") if args.no_resalloc else resalloc_python()
    runner = str(pathlib.Path(__file__).with_name("resalloc_solve.py"))
    with tempfile.TemporaryDirectory(prefix="walras-bench-") as tmp:
        for utility in args.utility or ("log", "target"):
            path = pathlib.Path(tmp) / f"{utility}.npz"
            subprocess.run(
                [*walras, "generate", str(path), "--n", str(N), "--utility", utility],
                check=True,
                capture_output=True,
            )
            cmd = [*walras, "solve", str(path), "--json"]
            other = None if theirs is None else [theirs, runner, str(path)]
            line = case(f"solve_{utility}_{N}", cmd, solve=True, repeats=args.repeats, other=other)
            if theirs is None:
                line["resalloc"] = why
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

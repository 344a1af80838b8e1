"""The evaluation set: policy targets checked on traces that no policy was tuned on.

Ten traces drawn by ``walras simulate generate`` (:mod:`walras.sim.generate`: Gavel's job types
and throughput table, Philly's job sizes and durations), five static (every job at t = 0) and five
continuous (Gavel's Poisson arrivals) at several seeds and arrival rates, all *other* than the D5
trace the policies' defaults were chosen on (``TRACES``; each is a function of its options, so
the generation command regenerates it byte for byte). Each trace runs under four policies
(``POLICIES``) with the same mechanics: ``walras simulate --semantics walras`` (the operator's
own scheduling core), 8 V100 + 8 P100 + 8 K80 in nodes of 4, 360 s rounds, 10 s restarts.

Targets (per trace; ``mtd`` = min-total-duration, ``mmf`` = max-min fairness, ``pd`` =
price-discovery with remaining-work weighting and backfill):

- ``hadar_makespan``: hadar's makespan ÷ mtd's ≤ 1.01 (worst case: the largest ratio);
- ``hadar_jct``: mtd's average JCT ÷ hadar's ≥ 3 (worst case: the smallest);
- ``pd_jct``: 1 − pd's average JCT ÷ mmf's ≥ 0.25 (worst case: the smallest reduction);
- ``pd_makespan``: pd's makespan ÷ mmf's ≤ 1 (worst case: the largest ratio).

Output: one JSON line per trace × policy (makespan, average JCT, utilisation, restarts and the
run's ``cpu_s``, its own process's user + system CPU), appended to ``--out`` so that an
interrupted run resumes where it stopped; then one JSON line per target with each trace's value,
pass or fail, the mean and the worst case across the set. Runs are niced (``nice -n 10``).

Usage::

    python bench/evalset.py [--out bench/out/evalset.jsonl] [--workers 2] [--traces NAME,...]
    python bench/evalset.py --summary-only --out bench/out/evalset.jsonl
    python bench/evalset.py --commands      # the `walras simulate generate` commands
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLUSTER = "8:8:8"
GPUS_PER_NODE = "4"
RESTART_S = "10"


@dataclass(frozen=True)
class Trace:
    """One trace of the set: ``rate`` None is static (every job at t = 0)."""

    name: str
    jobs: int
    seed: int
    rate: float | None

    def generate_args(self, out: pathlib.Path) -> list[str]:
        args = [
            "simulate",
            "generate",
            str(out),
            "--jobs",
            str(self.jobs),
            "--seed",
            str(self.seed),
        ]
        if self.rate is not None:
            args += ["--rate", str(self.rate)]
        return args


# 24 GPUs do about 14 V100-equivalents of work and a job needs ~32 V100 GPU-hours on average
# (1.9 GPUs × ~17 h), so the cluster drains ~0.45 jobs/hour: the rates span light to overload.
# Seeds start at 1: seed 0 is Gavel's D5 stream, the set the defaults were chosen on.
TRACES: tuple[Trace, ...] = (
    Trace("static-s1-n120", 120, 1, None),
    Trace("static-s2-n120", 120, 2, None),
    Trace("static-s3-n120", 120, 3, None),
    Trace("static-s4-n160", 160, 4, None),
    Trace("static-s5-n160", 160, 5, None),
    Trace("cont-s1-r0.3-n120", 120, 1, 0.3),
    Trace("cont-s2-r0.4-n120", 120, 2, 0.4),
    Trace("cont-s3-r0.5-n120", 120, 3, 0.5),
    Trace("cont-s4-r0.6-n120", 120, 4, 0.6),
    Trace("cont-s5-r1.0-n120", 120, 5, 1.0),
)

POLICIES: dict[str, list[str]] = {
    "hadar": ["--policy", "hadar"],
    "min-total-duration": ["--policy", "min-total-duration"],
    "price-discovery-remaining-backfill": [
        "--policy",
        "price-discovery",
        "--policy-arg",
        "price-discovery.weighting=remaining",
        "--backfill",
    ],
    "max-min-fairness": ["--policy", "max-min-fairness"],
}


def walras_cmd() -> list[str]:
    """The `walras` entry point of this interpreter's environment."""
    exe = pathlib.Path(sys.executable).parent / "walras"
    return [str(exe)] if exe.exists() else [shutil.which("walras") or "walras"]


def trace_path(trace: Trace, directory: pathlib.Path) -> pathlib.Path:
    return directory / f"{trace.name}.trace"


def generate(trace: Trace, directory: pathlib.Path) -> pathlib.Path:
    path = trace_path(trace, directory)
    if not path.exists():
        subprocess.run(
            [*walras_cmd(), *trace.generate_args(path)], check=True, stdout=subprocess.DEVNULL
        )
    return path


def run_cell(trace: Trace, label: str, path: pathlib.Path, nice: int) -> dict[str, Any]:
    """One trace × policy in a niced process of its own; its summary plus cpu_s."""
    cmd = [
        "nice",
        "-n",
        str(nice),
        *walras_cmd(),
        "simulate",
        str(path),
        "--semantics",
        "walras",
        "--cluster",
        CLUSTER,
        "--gpus-per-node",
        GPUS_PER_NODE,
        "--restart-seconds",
        RESTART_S,
        *POLICIES[label],
        "--json",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait4 gives this child's own CPU (workers run side by side, so RUSAGE_CHILDREN would mix).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    row: dict[str, Any] = {"trace": trace.name, "policy": label}
    if proc.returncode != 0:
        row["error"] = err.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return row
    summary = json.loads(out.strip().splitlines()[-1])
    for key in ("makespan_s", "avg_jct_s", "jct_p99_s", "utilization", "restarts"):
        if key in summary:
            row[key] = summary[key]
    row["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
    row["wall_s"] = round(time.monotonic() - start, 1)
    return row


def load_rows(out: pathlib.Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line]


# target: (numerator policy, denominator policy, metric, transform, threshold, pass if ≤?)
TARGETS: dict[str, tuple[str, str, str, str, float, bool]] = {
    "hadar_makespan": ("hadar", "min-total-duration", "makespan_s", "ratio", 1.01, True),
    "hadar_jct": ("min-total-duration", "hadar", "avg_jct_s", "ratio", 3.0, False),
    "pd_jct": (
        "price-discovery-remaining-backfill",
        "max-min-fairness",
        "avg_jct_s",
        "reduction",
        0.25,
        False,
    ),
    "pd_makespan": (
        "price-discovery-remaining-backfill",
        "max-min-fairness",
        "makespan_s",
        "ratio",
        1.0,
        True,
    ),
}


def summarise(rows: list[dict[str, Any]], traces: tuple[Trace, ...]) -> list[dict[str, Any]]:
    """Per target: each trace's value and pass/fail, mean and worst across the traces run."""
    cell = {(r["trace"], r["policy"]): r for r in rows if "error" not in r}
    lines = []
    for target, (num, den, metric, transform, threshold, at_most) in TARGETS.items():
        values: dict[str, float] = {}
        for trace in traces:
            a, b = cell.get((trace.name, num)), cell.get((trace.name, den))
            if a is None or b is None or not a.get(metric) or not b.get(metric):
                continue
            ratio = a[metric] / b[metric]
            values[trace.name] = ratio if transform == "ratio" else 1.0 - ratio
        passed = {
            name: (v <= threshold if at_most else v >= threshold) for name, v in values.items()
        }
        worst = (max if at_most else min)(values.values()) if values else math.nan
        mean = sum(values.values()) / len(values) if values else math.nan
        lines.append(
            {
                "target": target,
                "threshold": threshold,
                "pass_if": "<=" if at_most else ">=",
                "traces": len(values),
                "mean": round(mean, 4),
                "worst": round(worst, 4),
                "passed": sum(passed.values()),
                "failed_on": sorted(n for n, ok in passed.items() if not ok),
                "per_trace": {n: round(v, 4) for n, v in values.items()},
            }
        )
    return lines


def longest_alone_h(path: pathlib.Path) -> float:
    """A lower bound on any policy's makespan (h): max over jobs of arrival + steps ÷ best rate.

    No job finishes before it has run all its steps alone on its fastest GPU type (every policy
    here gives a job at most one type's throughput at a time).
    """
    from walras.sim.throughputs import load_throughputs
    from walras.sim.trace import read_trace

    table = load_throughputs()
    jobs = read_trace(path).jobs
    rates = table.matrix(jobs, table.gpu_types, trace=str(path)).max(axis=1)
    return max(j.arrival_s + j.total_steps / r for j, r in zip(jobs, rates, strict=True)) / 3600


SHORT = {
    "hadar": "hadar",
    "min-total-duration": "mtd",
    "price-discovery-remaining-backfill": "pd",
    "max-min-fairness": "mmf",
}


def markdown(rows: list[dict[str, Any]], traces: tuple[Trace, ...], directory: pathlib.Path) -> str:
    """The evaluation page's tables: makespan / average JCT (hours) per trace, then targets."""
    cell = {(r["trace"], r["policy"]): r for r in rows if "error" not in r}
    head = " | ".join(f"{SHORT[p]} makespan / JCT (util.)" for p in POLICIES)
    out = [f"| trace | {head} | longest job alone |", "|---|" + "---:|" * (len(POLICIES) + 1)]
    for t in traces:
        parts = []
        for p in POLICIES:
            r = cell.get((t.name, p))
            parts.append(
                "—"
                if r is None
                else f"{r['makespan_s'] / 3600:.1f} / {r['avg_jct_s'] / 3600:.1f} "
                f"({r['utilization']:.2f})"
            )
        path = trace_path(t, directory)
        bound = f"{longest_alone_h(path):.1f}" if path.exists() else "—"
        out.append(f"| `{t.name}` | " + " | ".join(parts) + f" | {bound} |")
    out += [
        "",
        "| target | threshold | mean | worst | passed | missed on |",
        "|---|---|---:|---:|---:|---|",
    ]
    for line in summarise(rows, traces):
        missed = ", ".join(f"`{n}` ({line['per_trace'][n]:.3f})" for n in line["failed_on"])
        out.append(
            f"| `{line['target']}` | {line['pass_if']} {line['threshold']} | {line['mean']:.3f} "
            f"| {line['worst']:.3f} | {line['passed']}/{line['traces']} | {missed or '—'} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench/out/evalset.jsonl")
    parser.add_argument("--traces-dir", type=pathlib.Path, default=ROOT / "bench/out/evalset")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--nice", type=int, default=10, help="niceness of the runs (default 10)")
    parser.add_argument("--traces", default="", help="comma-separated trace names (default all)")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--commands", action="store_true", help="print the generate commands")
    parser.add_argument("--markdown", action="store_true", help="print the docs' tables and stop")
    args = parser.parse_args()
    if args.workers < 1:
        print("--workers: must be ≥ 1", file=sys.stderr)
        return 2
    names = [n for n in args.traces.split(",") if n]
    known = [t.name for t in TRACES]
    unknown = [n for n in names if n not in known]
    if unknown:
        print(
            f"--traces: unknown trace {unknown[0]!r} (known: {', '.join(known)})", file=sys.stderr
        )
        return 2
    traces = tuple(t for t in TRACES if not names or t.name in names)
    if args.markdown:
        print(markdown(load_rows(args.out), traces, args.traces_dir))
        return 0
    if args.commands:
        for t in traces:
            path = trace_path(t, args.traces_dir)
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(" ".join(["walras", *t.generate_args(shown)]))
        return 0
    if not args.summary_only:
        args.traces_dir.mkdir(parents=True, exist_ok=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        done = {(r["trace"], r["policy"]) for r in load_rows(args.out) if "error" not in r}
        todo = [
            (t, label, generate(t, args.traces_dir))
            for t in traces
            for label in POLICIES
            if (t.name, label) not in done
        ]
        with ThreadPoolExecutor(args.workers) as pool, args.out.open("a", encoding="utf-8") as f:
            futures = [pool.submit(run_cell, *cell, args.nice) for cell in todo]
            for future in as_completed(futures):
                row = future.result()
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()
    for line in summarise(load_rows(args.out), traces):
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

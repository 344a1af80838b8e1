"""Files a person looks at after a run: ``jobs.csv`` (one row per job), ``summary.json`` and three
PNG plots (JCT CDF, GPUs busy per type over time, jobs waiting over time).

Matplotlib (the ``plots`` extra) is imported inside :func:`write_plots` (``walras.plotting``).
"""

from __future__ import annotations

import csv
import json
import math
import pathlib
from typing import Any

import numpy as np

from walras.plotting import pyplot
from walras.sim.metrics import SimResult

JOB_COLUMNS = (
    "job_id",
    "line",
    "job_type",
    "scale_factor",
    "total_steps",
    "arrival_s",
    "first_start_s",
    "completion_s",
    "jct_s",
    "failed",
    "rounds_run",
    "restarts",
    "gpu_seconds",
)


def write_outputs(result: SimResult, out: pathlib.Path) -> list[pathlib.Path]:
    """Write ``jobs.csv``, ``summary.json`` and the plots into ``out``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [write_jobs_csv(result, out / "jobs.csv")]
    summary = out / "summary.json"
    summary.write_text(json.dumps(result.summary(), indent=1) + "\n", encoding="utf-8")
    paths.append(summary)
    paths.extend(write_plots(result, out))
    return paths


def write_jobs_csv(result: SimResult, path: pathlib.Path) -> pathlib.Path:
    led = result.tally
    w = led.workload
    jct = led.jct_s()
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(JOB_COLUMNS)
        for j in range(w.n_jobs):
            writer.writerow(
                [
                    j,
                    w.lines[j],
                    w.job_types[j],
                    int(w.scale_factors[j]),
                    int(w.total_steps[j]),
                    _num(float(w.arrivals[j])),
                    _num(led.first_start_s[j]),
                    _num(led.completion_s[j]),
                    _num(float(jct[j])),
                    int(led.failed[j]),
                    led.rounds_run[j],
                    led.restarts[j],
                    _num(led.gpu_seconds[j]),
                ]
            )
    return path


def write_plots(result: SimResult, out: pathlib.Path) -> list[pathlib.Path]:
    plt = pyplot()
    title = f"{result.tally.workload.source} · {result.policy}"
    paths: list[pathlib.Path] = []

    jct = result.jct_s()
    jct = np.sort(jct[~np.isnan(jct)]) / 3600.0
    fig, ax = plt.subplots(figsize=(6, 4))
    if jct.size:
        ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF · {title}", fontsize=9)
    ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "jct_cdf.png"))

    rounds = result.tally.rounds
    starts = np.array([r.start_s for r in rounds]) / 3600.0
    ends = np.array([r.end_s for r in rounds]) / 3600.0
    fig, ax = plt.subplots(figsize=(7, 4))
    for c, name in enumerate(result.cluster.gpu_types):
        busy = np.array([r.busy_gpus[c] for r in rounds], dtype=np.float64)
        ax.step(starts, busy, where="post", label=f"{name} (of {result.cluster.counts[c]})")
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs dispatched in the round")
    ax.set_title(f"GPUs busy per type · {title}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "gpus_busy.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(starts, [r.queued for r in rounds], where="post", label="waiting (admitted, not run)")
    ax.step(starts, [r.running for r in rounds], where="post", label="running")
    if ends.size:
        ax.set_xlim(0, float(ends.max()))
    ax.set_xlabel("time (h)")
    ax.set_ylabel("jobs")
    ax.set_title(f"Queue length · {title}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "queue.png"))
    return paths


def _save(fig: Any, path: pathlib.Path) -> pathlib.Path:
    plt = pyplot()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _num(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.3f}"

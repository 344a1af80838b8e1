"""Large Gavel-style traces from the throughput table and the Philly job-size distribution.

Each job is drawn as Gavel's trace generator draws it ("Heterogeneity-Aware Cluster Scheduling
Policies for Deep Learning Workloads", Narayanan et al.):

- GPUs (scale factor) from the job-size distribution of Microsoft's Philly cluster ("Analysis of
  Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", Jeon et al.), as Gavel
  samples it: 1 GPU with probability 0.70, 2 with 0.10, 4 with 0.15, 8 with 0.05
  (``SCALE_FACTORS``); ``multi_gpu=False`` makes every job a 1-GPU job;
- the job type uniformly among the types that have a throughput at that scale factor on every
  GPU type of the table (a multi-GPU job needs a distributed type); ``job_types`` restricts the
  choice;
- a duration of 10^U(1.5, 3) minutes with probability 0.8, else 10^U(3, 4) minutes (Philly's
  short and long jobs, ``DURATIONS``), and total steps = duration × the job's throughput on the
  ``reference`` type (V100): the job would run that long alone there;
- arrival times all 0 (``rate=None``: a static trace) or Gavel's Poisson stream at ``rate`` jobs
  per hour (:func:`walras.sim.arrivals.poisson_arrivals`).

The draws use numpy's PCG64 seeded with ``seed`` (not Python's ``random`` sequence Gavel uses), so
a trace is a function of its options, not a copy of one of Gavel's. Lines are Gavel's 10-field
trace format (:mod:`walras.sim.trace`); the command fields, which no simulator runs, name the job
type. Example: ``generate_lines(GenerateOptions(jobs=2, rate=None), table)`` gives two lines
arriving at 0.

Called by ``walras simulate generate`` (:mod:`walras.cli.simulate_generate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from walras.sim.arrivals import poisson_arrivals
from walras.sim.errors import SimInputError
from walras.sim.throughputs import ThroughputTable

# Philly's job sizes as Gavel samples them: (GPUs, probability).
SCALE_FACTORS: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))
# (probability, lower and upper log10 of the duration in minutes).
DURATIONS: tuple[tuple[float, float, float], ...] = ((0.8, 1.5, 3.0), (0.2, 3.0, 4.0))
REFERENCE = "v100"


@dataclass(frozen=True, slots=True)
class GenerateOptions:
    """What to generate; ``check`` names the offending option."""

    jobs: int
    rate: float | None  # jobs per hour; None: every job arrives at 0
    seed: int = 0
    multi_gpu: bool = True
    job_types: tuple[str, ...] | None = None
    reference: str = REFERENCE


def _fail(option: str, message: str) -> SimInputError:
    return SimInputError(f"{option}: {message}")


def candidates(table: ThroughputTable, options: GenerateOptions) -> dict[int, tuple[str, ...]]:
    """For each scale factor, the job types (sorted) a job of that size may be; checks options."""
    if options.jobs < 1:
        raise _fail("--jobs", f"must be ≥ 1, got {options.jobs}")
    if options.rate is not None and not (math.isfinite(options.rate) and options.rate > 0):
        raise _fail("--rate", f"must be a finite number of jobs per hour > 0, got {options.rate}")
    if options.reference not in table.values:
        raise _fail(
            "--reference",
            f"unknown GPU type {options.reference!r} (the table has {', '.join(table.gpu_types)})",
        )
    # A type usable at a scale factor has a throughput for it on every GPU type of the table.
    usable: dict[int, set[str]] = {}
    for scale, _ in SCALE_FACTORS:
        sets = [
            {name for (name, s), v in per_type.items() if s == scale and v > 0}
            for per_type in table.values.values()
        ]
        usable[scale] = set.intersection(*sets) if sets else set()
    known = set().union(*usable.values())
    if options.job_types is not None:
        if not options.job_types:
            raise _fail("--job-types", "names no job type")
        unknown = [t for t in options.job_types if t not in known]
        if unknown:
            raise _fail(
                "--job-types",
                f"unknown job type {unknown[0]!r} (known: {', '.join(sorted(known))})",
            )
        chosen = set(options.job_types)
        usable = {s: names & chosen for s, names in usable.items()}
    if not usable[1]:
        raise _fail("--job-types", "no job type has a 1-GPU throughput on every GPU type")
    return {s: tuple(sorted(names)) for s, names in usable.items()}


def generate_lines(options: GenerateOptions, table: ThroughputTable) -> list[str]:
    """The trace's lines (no trailing newline), job 0 first; see the module docstring."""
    choices = candidates(table, options)
    rng = np.random.default_rng(options.seed)
    n = options.jobs
    sizes = np.array([s for s, _ in SCALE_FACTORS])
    probs = np.array([p for _, p in SCALE_FACTORS])
    scale = rng.choice(sizes, size=n, p=probs) if options.multi_gpu else np.ones(n, dtype=int)
    # A size no chosen type supports falls back to 1 GPU (``--job-types`` of 1-GPU-only models).
    supported = np.array([bool(choices.get(int(s))) for s in sizes])
    scale = np.where(supported[np.searchsorted(sizes, scale)], scale, 1)
    long_job = rng.random(n) >= DURATIONS[0][0]
    lo = np.where(long_job, DURATIONS[1][1], DURATIONS[0][1])
    hi = np.where(long_job, DURATIONS[1][2], DURATIONS[0][2])
    minutes = 10.0 ** rng.uniform(lo, hi)
    pick = rng.random(n)
    arrivals = (
        np.zeros(n) if options.rate is None else poisson_arrivals(n, options.rate, options.seed)
    )
    ref = table.values[options.reference]
    lines = []
    for i in range(n):
        s = int(scale[i])
        names = choices[s]
        job_type = names[min(int(pick[i] * len(names)), len(names) - 1)]
        steps = max(1, round(minutes[i] * 60.0 * ref[(job_type, s)]))
        lines.append(_line(job_type, steps, s, float(arrivals[i])))
    return lines


def _line(job_type: str, steps: int, scale: int, arrival: float) -> str:
    """One 10-field trace line (fields as :mod:`walras.sim.trace` names them)."""
    workdir = job_type.split(" (")[0].lower().replace(" ", "-")
    fields: Sequence[str] = (
        job_type,
        f"generated {job_type}",
        workdir,
        "-",
        "0",
        str(steps),
        str(scale),
        "1",
        "-1.000000",
        f"{arrival:.6f}" if arrival else "0",
    )
    return "\t".join(fields)

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

With tenants (:func:`tenant_manifests`), the same draws become FungibleJob manifests, one
namespace per tenant, each tenant arriving at its own rate (``walras simulate generate OUT.yaml
--tenants a=2,b=1``).

Called by ``walras simulate generate`` (:mod:`walras.cli.simulate_generate`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from walras.sim.arrivals import poisson_arrivals
from walras.sim.errors import SimInputError
from walras.sim.throughputs import ThroughputTable

# Philly's job sizes as Gavel samples them: (GPUs, probability).
SCALE_FACTORS: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))
# (probability, lower and upper log10 of the duration in minutes).
DURATIONS: tuple[tuple[float, float, float], ...] = ((0.8, 1.5, 3.0), (0.2, 3.0, 4.0))
REFERENCE = "v100"
# A Kubernetes namespace name (RFC 1123 label): a tenant of --tenants becomes one.
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


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
    return [_line(*job) for job in draw(options, table)]


def draw(options: GenerateOptions, table: ThroughputTable) -> list[tuple[str, int, int, float]]:
    """Each job's ``(job type, total steps, scale factor, arrival s)``, job 0 first."""
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
    jobs = []
    for i in range(n):
        s = int(scale[i])
        names = choices[s]
        job_type = names[min(int(pick[i] * len(names)), len(names) - 1)]
        steps = max(1, round(minutes[i] * 60.0 * ref[(job_type, s)]))
        jobs.append((job_type, steps, s, float(arrivals[i])))
    return jobs


def parse_tenant_rates(text: str) -> tuple[tuple[str, float], ...]:
    """``--tenants a=2,b=0.5``: each tenant's arrival rate in jobs per hour."""
    out: list[tuple[str, float]] = []
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = math.nan
        if not sep or not _NAMESPACE.match(name) or not (math.isfinite(rate) and rate > 0):
            raise _fail(
                "--tenants",
                f"expected NAME=RATE,... (a namespace name and jobs per hour > 0), got {item!r}",
            )
        if name in (n for n, _ in out):
            raise _fail("--tenants", f"tenant {name!r} named twice")
        out.append((name, rate))
    return tuple(out)


def tenant_manifests(
    options: GenerateOptions, table: ThroughputTable, tenants: Sequence[tuple[str, float]]
) -> list[dict[str, Any]]:
    """A multi-tenant workload as FungibleJob manifests (``walras.sim.manifests`` reads them).

    Tenant ``t`` submits a Poisson stream at ``rate_t`` jobs per hour into namespace ``t``; the
    streams together are one Poisson stream at ``Σ rate_t`` whose every job belongs to ``t`` with
    probability ``rate_t / Σ rate`` (superposition and thinning of Poisson processes), so the
    ``options.jobs`` jobs are drawn as one stream at that rate (``options.rate`` is ignored) and
    each is given a tenant. A job's ``spec.throughput`` is its row of the table on every GPU type
    of the table; its arrival is the annotation ``walras.dev/arrival-seconds``.
    """
    if not tenants:
        raise _fail("--tenants", "names no tenant")
    total = sum(rate for _, rate in tenants)
    jobs = draw(dataclasses.replace(options, rate=total), table)
    rng = np.random.default_rng([options.seed, 1])  # its own stream: the jobs are as without
    owner = rng.choice(len(tenants), size=len(jobs), p=[r / total for _, r in tenants])
    out: list[dict[str, Any]] = []
    for i, ((job_type, steps, scale, arrival), t) in enumerate(zip(jobs, owner, strict=True)):
        rates = {
            gpu_type: float(per[(job_type, scale)])
            for gpu_type, per in sorted(table.values.items())
            # ``*_unconsolidated``: Gavel's rates for a gang spread over servers, no GPU type
            if per.get((job_type, scale), 0.0) > 0 and not gpu_type.endswith("_unconsolidated")
        }
        out.append(
            {
                "apiVersion": "walras.dev/v1alpha1",
                "kind": "FungibleJob",
                "metadata": {
                    "namespace": tenants[int(t)][0],
                    "name": f"job-{i:05d}",
                    "annotations": {"walras.dev/arrival-seconds": f"{arrival:.3f}"},
                },
                "spec": {
                    "replicas": scale,
                    "throughput": rates,
                    "utility": {"kind": "log", "weight": 1.0},
                    "totalWork": float(steps),
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "train",
                                    "image": _image(job_type),
                                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                                }
                            ]
                        }
                    },
                },
            }
        )
    return out


def _image(job_type: str) -> str:
    """A valid image name for a job type (``ResNet-18 (batch size 64)`` -> ``resnet-18-bs64``);
    the simulator runs no container, the name only tells the jobs apart."""
    model, _, batch = job_type.partition(" (batch size ")
    name = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return f"{name}-bs{batch.rstrip(')')}" if batch else name


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

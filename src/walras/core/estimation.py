"""The throughputs a policy sees: declared, measured, or estimated where nobody knows them.

``spec.throughput`` may leave GPU types out. Before each solve the shell calls :func:`effective`
with every job it knows (finished ones too: their measurements still describe their kind of job),
what their workloads reported (``walras.core.progress``) and the pools' per-type defaults. Per
(job, GPU type), first match wins:

1. **measured**: the job's own measured steps/s there, once it has ``min_samples`` samples
   (it replaces a declared value: the workload knows better than the user);
2. **declared**: ``spec.throughput[type]`` (a declared 0 stays 0: "cannot run there");
3. **estimated**: from ``walras.allocator.estimate.estimate_throughputs`` — low-rank completion
   of the (job × GPU type) matrix in log space, fed with the values of rules 1–2 (and measured
   values with fewer samples where nothing is declared), the job's group (``spec.profile``,
   else the image of its first container) and the pools' defaults; its finer source
   (``estimated-own``, ``estimated-similar``, ``default``) is kept for ``walras explain``;
4. otherwise the type is left out (the job is not eligible there), as before estimation.

Rule 3 applies only once there is evidence beyond declarations: some job of ``jobs`` has a
measured value, or some pool a default. A cluster whose workloads report nothing schedules as it
did before estimation existed (an undeclared type is not eligible).

A declared value that disagrees with a measured one (with ``min_samples`` samples) by more than
``MISMATCH_FACTOR`` is listed in :attr:`Effective.mismatched`; the operator turns it into the
job's ``ThroughputMismatch`` condition.

Example: jobs x and y share an image; x measured 4 steps/s on a, y measured 8 on b, and both
types are otherwise unknown for them: x on b is estimated at 8 and y on a at 4 (same group, so the
same speed; a rank-1 log model explains the rest).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from walras.allocator.estimate import Source, estimate_throughputs
from walras.core import model, progress

MEASURED = "measured"
DECLARED = "declared"
ESTIMATED = "estimated"


@dataclass(frozen=True, slots=True)
class Effective:
    """One job's throughputs as the policy sees them, and where each came from.

    ``throughput``: type -> steps/s (types absent: not eligible). ``source``: type -> measured |
    declared | estimated; ``detail``: type -> the estimator's finer source (``estimated-own``,
    ``estimated-similar``, ``default``). ``samples``: type -> measured samples.
    """

    throughput: Mapping[str, float]
    source: Mapping[str, str]
    detail: Mapping[str, str] = field(default_factory=dict)
    samples: Mapping[str, int] = field(default_factory=dict)
    mismatched: tuple[str, ...] = ()

    @property
    def fastest(self) -> float | None:
        best = max(self.throughput.values(), default=0.0)
        return best if best > 0 else None


def job_group(job: model.JobSpec, profile: str = "") -> str:
    """The similarity label of a job: its profile if set, else its first container's image."""
    if profile:
        return f"profile:{profile}"
    spec = job.template.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if isinstance(containers, list) and containers and isinstance(containers[0], Mapping):
        image = containers[0].get("image")
        if isinstance(image, str) and image:
            return f"image:{image}"
    return ""


def _known(
    job: model.JobSpec, prog: progress.Progress, gpu_type: str, min_samples: int
) -> tuple[float, int, str] | None:
    """(value, samples, source) of rules 1–2, or a thinly measured undeclared value."""
    m = prog.measured.get(gpu_type)
    if m is not None and m.samples >= min_samples and m.seconds > 0:
        return m.rate, m.samples, MEASURED
    if gpu_type in job.throughput:
        return job.throughput[gpu_type], 0, DECLARED
    if m is not None and m.samples > 0 and m.seconds > 0:
        return m.rate, m.samples, ESTIMATED  # too few samples to trust alone: fit input only
    return None


def effective(
    jobs: Sequence[model.JobSpec],
    reported: Mapping[str, progress.Progress],
    gpu_types: Sequence[str],
    *,
    defaults: Mapping[str, float] | None = None,
    profiles: Mapping[model.JobKey, str] | None = None,
    min_samples: int = progress.MIN_SAMPLES,
    mismatch_factor: float = progress.MISMATCH_FACTOR,
) -> dict[model.JobKey, Effective]:
    """Per job of ``jobs``, its :class:`Effective` throughputs (see the module docstring).

    ``reported``: progress by job UID; ``gpu_types``: the pools' types; ``defaults``: the pools'
    default steps/s per type; ``profiles``: ``spec.profile`` by job (empty: none).
    """
    types = sorted(set(gpu_types))
    defaults = defaults or {}
    profiles = profiles or {}
    n, m = len(jobs), len(types)
    values = np.full((n, m), np.nan)
    samples = np.zeros((n, m))
    known: list[dict[str, tuple[float, int, str]]] = []
    for j, job in enumerate(jobs):
        prog = reported.get(job.uid, progress.Progress())
        row: dict[str, tuple[float, int, str]] = {}
        for c, t in enumerate(types):
            k = _known(job, prog, t, min_samples)
            if k is None:
                continue
            row[t] = k
            values[j, c] = k[0]
            samples[j, c] = k[1]
        known.append(row)
    missing = any(len(row) < m or any(s == ESTIMATED for _, _, s in row.values()) for row in known)
    # Estimation starts with evidence beyond declarations: a measurement or an admin default.
    # Until then an undeclared type stays out, as without estimation, so a cluster whose workloads
    # do not report progress schedules exactly as it did.
    evidence = bool((samples > 0).any()) or any(defaults.get(t, 0.0) > 0 for t in types)
    estimate = None
    if missing and evidence and n and m:
        estimate = estimate_throughputs(
            values,
            samples,
            groups=[job_group(j, profiles.get(j.key, "")) or None for j in jobs],
            defaults=[defaults.get(t, math.nan) for t in types],
            job_names=[f"{j.namespace}/{j.name}" for j in jobs],
            type_names=types,
        )
    out: dict[model.JobKey, Effective] = {}
    for j, job in enumerate(jobs):
        prog = reported.get(job.uid, progress.Progress())
        thr: dict[str, float] = {}
        src: dict[str, str] = {}
        detail: dict[str, str] = {}
        for c, t in enumerate(types):
            k = known[j].get(t)
            if k is not None and k[2] != ESTIMATED:
                thr[t], src[t] = k[0], k[2]
                continue
            if estimate is None:
                continue
            value = float(estimate.values[j, c])
            how = estimate.source(j, c)
            if k is not None:
                # A thin measurement fed the fit as a known entry: its value is the estimate.
                how = Source.ESTIMATED_OWN
            if how == Source.UNKNOWN or not math.isfinite(value):
                continue
            thr[t], src[t], detail[t] = value, ESTIMATED, str(how)
        mismatched = tuple(
            t
            for t in types
            if t in job.throughput
            and (rate := prog.measured_rate(t, min_samples)) is not None
            and progress.mismatch(job.throughput[t], rate, mismatch_factor)
        )
        out[job.key] = Effective(
            throughput=thr,
            source=src,
            detail=detail,
            samples={t: ms.samples for t, ms in sorted(prog.measured.items())},
            mismatched=mismatched,
        )
    return out

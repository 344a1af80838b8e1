"""Gavel's 10-field ``.trace`` files (``scheduler/utils.py::parse_trace`` reads the same format).

One job per line, tab-separated, no header::

    job_type  command  working_directory  num_steps_arg  needs_data_dir  total_steps
    scale_factor  priority_weight  SLO  arrival_time

The simulator uses ``job_type`` and ``scale_factor`` (the key into the throughput table),
``total_steps``, ``priority_weight`` and ``arrival_time`` (seconds, non-decreasing); the command
fields are kept only for the per-job CSV. Jobs are numbered 0..N−1 in line order, as Gavel does.
Blank lines are skipped (Gavel would fail on them); every other defect raises
:class:`~walras.sim.errors.SimInputError` naming ``file:line: field N (name)``.
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass
from typing import NoReturn

from walras.sim.errors import SimInputError

FIELDS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One trace line. ``job_id`` is the 0-based line order among non-blank lines."""

    job_id: int
    job_type: str
    total_steps: int
    scale_factor: int
    priority_weight: float
    slo: float | None
    arrival_s: float
    line: int
    command: str = ""


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace; ``source`` names it in error messages."""

    source: str
    jobs: tuple[TraceJob, ...]


def read_trace(path: str | pathlib.Path) -> Trace:
    """Parse a Gavel ``.trace`` file."""
    p = pathlib.Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SimInputError(f"cannot read trace {p}: {exc}") from exc
    return parse_trace(text, source=p.name)


def parse_trace(text: str, *, source: str = "<trace>") -> Trace:
    """Parse trace text (see the module docstring)."""
    jobs: list[TraceJob] = []
    previous_arrival = -math.inf
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        fields = raw.split("\t")
        if len(fields) != len(FIELDS):
            raise SimInputError(
                f"{source}:{lineno}: expected {len(FIELDS)} tab-separated fields "
                f"({', '.join(FIELDS)}), got {len(fields)}"
            )

        def fail(index: int, expected: str, _ln: int = lineno, _f: list[str] = fields) -> NoReturn:
            raise SimInputError(
                f"{source}:{_ln}: field {index + 1} ({FIELDS[index]}): expected {expected}, "
                f"got {_f[index]!r}"
            )

        job_type = fields[0].strip()
        if not job_type:
            fail(0, "a job type name")
        needs = _int(fields[4])
        if needs is None or needs not in (0, 1):
            fail(4, "0 or 1")
        total = _int(fields[5])
        if total is None or total < 1:
            fail(5, "a positive integer")
        scale = _int(fields[6])
        if scale is None or scale < 1:
            fail(6, "a positive integer")
        weight = _float(fields[7])
        if weight is None or weight <= 0:
            fail(7, "a positive number")
        slo = _float(fields[8])
        if slo is None:
            fail(8, "a number (negative: no SLO)")
        arrival = _float(fields[9])
        if arrival is None or arrival < 0:
            fail(9, "a non-negative number of seconds")
        if arrival < previous_arrival:
            raise SimInputError(
                f"{source}:{lineno}: field 10 (arrival_time): arrivals must be sorted, got "
                f"{arrival:g} after {previous_arrival:g}"
            )
        previous_arrival = arrival
        jobs.append(
            TraceJob(
                job_id=len(jobs),
                job_type=job_type,
                total_steps=total,
                scale_factor=scale,
                priority_weight=weight,
                slo=slo if slo >= 0 else None,
                arrival_s=arrival,
                line=lineno,
                command=fields[1],
            )
        )
    if not jobs:
        raise SimInputError(f"{source}: the trace holds no jobs")
    return Trace(source=source, jobs=tuple(jobs))


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None

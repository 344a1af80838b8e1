"""``walras explain``'s throughput table: per GPU type, the value the policy used and its source.

Read from the job alone: ``status.throughputs`` (written by the operator each round it changes;
``walras.operator.throughputs``) and ``status.progress.measured``, falling back to
``spec.throughput`` before the operator has written anything. Sources (``docs/progress.md``):
``declared`` (spec.throughput), ``measured`` (the workload's ``walras.dev/steps-done``, enough
samples), ``estimated-own`` / ``estimated-similar`` (matrix completion from the job's own
measurements or jobs of the same profile/image), ``default`` (the pool's defaultThroughput).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.table import Table


@dataclass(frozen=True)
class ThroughputRow:
    gpu_type: str
    value: float
    source: str
    declared: float | None
    measured: float | None
    samples: int


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def rows(job: Mapping[str, Any]) -> tuple[ThroughputRow, ...]:
    """One row per GPU type the job has a throughput for (sorted by type)."""
    spec, status = _map(job.get("spec")), _map(job.get("status"))
    declared = {str(t): v for t, v in _map(spec.get("throughput")).items()}
    used = _map(status.get("throughputs"))
    measured = _map(_map(status.get("progress")).get("measured"))
    out = []
    for t in sorted(set(declared) | set(used) | set(measured)):
        entry = _map(used.get(t))
        m = _map(measured.get(t))
        value = _float(entry.get("value"))
        if value is None:
            value = _float(declared.get(t))
        samples = m.get("samples")
        out.append(
            ThroughputRow(
                gpu_type=t,
                value=value if value is not None else 0.0,
                source=str(entry.get("source") or ("declared" if t in declared else "unknown")),
                declared=_float(declared.get(t)),
                measured=_float(m.get("stepsPerSecond")),
                samples=samples if isinstance(samples, int) else 0,
            )
        )
    return tuple(out)


def effective(job: Mapping[str, Any]) -> dict[str, float]:
    """GPU type -> the throughput the policy used (declared before the operator wrote any)."""
    return {r.gpu_type: r.value for r in rows(job) if r.source != "unknown"}


def table(view: tuple[ThroughputRow, ...]) -> Table:
    out = Table(title="Throughputs (steps/s) and where they came from")
    for column in ("GPU type", "Used", "Source", "Declared", "Measured", "Samples"):
        out.add_column(column, justify="left" if column in ("GPU type", "Source") else "right")
    for r in view:
        out.add_row(
            r.gpu_type,
            f"{r.value:.4g}",
            r.source,
            "-" if r.declared is None else f"{r.declared:.4g}",
            "-" if r.measured is None else f"{r.measured:.4g}",
            str(r.samples),
        )
    return out

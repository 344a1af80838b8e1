"""Gavel's throughput table (``simulation_throughputs.json``) and the per-job matrix read from it.

Format (Gavel's ``utils.read_all_throughputs_json_v2``): ``{gpu_type: {"('<job type>', <scale>)":
{"null": steps_per_s, "<other key>": [a, b], ...}}}``. Only the isolated ``"null"`` value is used
(no packing). A value is the *whole job's* steps per second on ``scale`` GPUs of that type, so a
job of ``total_steps`` alone on type ``t`` runs ``total_steps / value`` seconds.

The table shipped in :mod:`walras.data.gavel` (MIT, Gavel) is the default.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.sim.errors import SimInputError
from walras.sim.trace import TraceJob

_KEY = re.compile(r"^\('(.*)', (\d+)\)$")


@dataclass(frozen=True, slots=True)
class ThroughputTable:
    """Isolated throughputs: ``values[gpu_type][(job_type, scale_factor)]`` in steps/s."""

    source: str
    values: Mapping[str, Mapping[tuple[str, int], float]]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.values))

    def matrix(
        self, jobs: Sequence[TraceJob], gpu_types: Sequence[str], *, trace: str = "<trace>"
    ) -> npt.NDArray[np.float64]:
        """``(len(jobs), len(gpu_types))`` throughputs; errors name the trace line and type."""
        for t in gpu_types:
            if t not in self.values:
                raise SimInputError(
                    f"GPU type {t!r} is not in the throughputs file {self.source} "
                    f"(it has {', '.join(self.gpu_types)})"
                )
        out = np.empty((len(jobs), len(gpu_types)), dtype=np.float64)
        for j, job in enumerate(jobs):
            key = (job.job_type, job.scale_factor)
            for c, t in enumerate(gpu_types):
                value = self.values[t].get(key)
                if value is None:
                    known = any(k[0] == job.job_type for k in self.values[t])
                    what = (
                        f"job type {job.job_type!r} has no entry for scale factor "
                        f"{job.scale_factor} on GPU type {t!r}"
                        if known
                        else f"unknown job type {job.job_type!r} (not in the throughputs file "
                        f"{self.source} for GPU type {t!r})"
                    )
                    field = "7 (scale_factor)" if known else "1 (job_type)"
                    raise SimInputError(f"{trace}:{job.line}: field {field}: {what}")
                out[j, c] = value
        return out


def load_throughputs(path: str | pathlib.Path | None = None) -> ThroughputTable:
    """Read a throughput file; ``None`` reads the table shipped with Walras."""
    if path is None:
        from walras.data import gavel

        with gavel.open_throughputs() as fh:
            raw = fh.read()
        source = "walras.data.gavel/" + gavel.THROUGHPUTS
    else:
        p = pathlib.Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise SimInputError(f"cannot read throughputs {p}: {exc}") from exc
        source = p.name
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise SimInputError(f"{source}{where}: not valid JSON: {exc}") from exc
    return parse_throughputs(data, source=source)


def parse_throughputs(data: Any, *, source: str = "<throughputs>") -> ThroughputTable:
    """Validate the decoded JSON; keeps the isolated (``"null"``) value of every job key."""
    if not isinstance(data, dict) or not data:
        raise SimInputError(f"{source}: expected an object keyed by GPU type")
    values: dict[str, dict[tuple[str, int], float]] = {}
    for gpu_type, jobs in data.items():
        if not isinstance(jobs, dict):
            raise SimInputError(f"{source}: GPU type {gpu_type!r}: expected an object of job keys")
        table: dict[tuple[str, int], float] = {}
        for key, entry in jobs.items():
            match = _KEY.match(key)
            if match is None:
                raise SimInputError(
                    f"{source}: GPU type {gpu_type!r}: job key {key!r} is not of the form "
                    "\"('<job type>', <scale factor>)\""
                )
            value = entry.get("null") if isinstance(entry, dict) else None
            if not isinstance(value, int | float) or value < 0 or value != value:
                raise SimInputError(
                    f'{source}: GPU type {gpu_type!r}, job {key}: "null" must be a '
                    f"non-negative number of steps/s, got {value!r}"
                )
            table[(match.group(1), int(match.group(2)))] = float(value)
        values[str(gpu_type)] = table
    return ThroughputTable(source=source, values=values)

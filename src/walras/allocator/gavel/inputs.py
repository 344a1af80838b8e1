"""What every Gavel policy reads: one immutable snapshot of the active jobs, with Gavel's meaning.

Gavel's ``Scheduler._compute_allocation`` hands each policy dicts keyed by job id and worker type;
here they are arrays, one row per active job (any row order: policies that depend on arrival
order, FIFO, sort by ``job_ids`` themselves) and one column per GPU type.

- ``throughputs[j, t]``: steps/s of the *whole* job ``j`` (all its ``scale_factors[j]`` GPUs) on
  type ``t``; Gavel's ``simulation_throughputs.json`` value ``[type][(job_type, scale)]['null']``.
- ``scale_factors[j]``: GPUs per job (gang size), ≥ 1.
- ``capacity[t]``: GPUs of type ``t`` (Gavel's ``cluster_spec``).
- ``job_ids[j]``: Gavel's integer job id (arrival order), unique. FIFO queues by it and keeps its
  state keyed by it; finish-time fairness keeps its per-job history keyed by it.
- ``priority_weights[j]`` (> 0, default 1): Gavel's ``Job.priority_weight``; max-min fairness
  divides job ``j``'s normalised throughput by it (a weight-2 job gets twice the share).
- ``num_steps_remaining[j]`` (≥ 0): steps still to run (Gavel's ``_get_remaining_steps``); needed
  by ``min_total_duration*`` and ``finish_time_fairness*``.
- ``times_since_start[j]`` (≥ 0): seconds since the job's arrival (Gavel's
  ``current_time - _per_job_start_timestamps[job]``); needed by ``finish_time_fairness*``.
- ``type_names[t]`` (optional): Gavel's worker-type names (``"v100"``, ``"p100"``, ``"k80"``).
  Gavel visits types in *sorted name* order, which FIFO's tie-breaks depend on; without names the
  column order is taken to be that order. The agnostic ``min_total_duration`` and
  ``finish_time_fairness`` use the ``"v100"`` column's throughput on every type, as Gavel
  hard-codes it, so they need the names.
- ``reference_type`` (default ``"v100"``): the type those agnostic policies read. A cluster
  whose types are not Gavel's names it here (Gavel's choice is its fastest type).

Finish-time fairness also needs each job's cumulative isolated time, which Gavel's policy object
accumulates itself across calls (it is not scheduler state); :mod:`.finish_time_fairness` keeps
it inside the policy object in the same way, so it is not an input here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

REFERENCE_TYPE = "v100"
"""The column Gavel's agnostic min-total-duration and finish-time fairness read for every type."""


@dataclass(frozen=True, slots=True)
class GavelInputs:
    """One call's inputs (see the module docstring); validated and converted on construction."""

    throughputs: FloatArray
    scale_factors: IntArray
    capacity: FloatArray
    job_ids: IntArray
    priority_weights: FloatArray | None = None
    num_steps_remaining: FloatArray | None = None
    times_since_start: FloatArray | None = None
    type_names: tuple[str, ...] | None = None
    reference_type: str = REFERENCE_TYPE

    def __post_init__(self) -> None:
        thr = np.asarray(self.throughputs, dtype=np.float64)
        if thr.ndim != 2:
            raise InvalidProblem(
                f"throughputs must be a (jobs, types) matrix, got shape {thr.shape}",
                field="throughputs",
            )
        n_jobs, n_types = thr.shape
        ids = _ints(self.job_ids, "job_ids", n_jobs, lower=None)
        _set(self, "throughputs", _floats(thr, "throughputs", thr.shape, ids))
        _set(self, "job_ids", ids)
        _set(self, "scale_factors", _ints(self.scale_factors, "scale_factors", n_jobs, lower=1))
        _set(self, "capacity", _floats(self.capacity, "capacity", (n_types,), None))
        if self.priority_weights is not None:
            w = _floats(self.priority_weights, "priority_weights", (n_jobs,), ids)
            if w.size and float(w.min()) <= 0.0:
                j = int(np.argmin(w))
                raise InvalidProblem(
                    f"job {ids[j]}: priority_weights must be > 0, got {w[j]}",
                    field="priority_weights",
                    index=j,
                )
            _set(self, "priority_weights", w)
        for name in ("num_steps_remaining", "times_since_start"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, _floats(value, name, (n_jobs,), ids))
        if self.type_names is not None:
            names = tuple(str(n) for n in self.type_names)
            if len(names) != n_types or len(set(names)) != n_types:
                raise InvalidProblem(
                    f"type_names must name the {n_types} throughput columns once each, got {names}",
                    field="type_names",
                )
            _set(self, "type_names", names)

    @property
    def n_jobs(self) -> int:
        return int(self.throughputs.shape[0])

    @property
    def n_types(self) -> int:
        return int(self.throughputs.shape[1])

    def weights(self) -> FloatArray:
        """``priority_weights``, ones when absent."""
        if self.priority_weights is None:
            return np.ones(self.n_jobs)
        return self.priority_weights

    def require(self, name: str, policy: str) -> FloatArray:
        """The optional per-job field ``name``, or an error saying ``policy`` needs it."""
        value: FloatArray | None = getattr(self, name)
        if value is None:
            raise InvalidProblem(f"policy {policy} needs {name}", field=name)
        return value

    def type_order(self) -> IntArray:
        """Column indices in Gavel's visiting order (sorted type names; column order without)."""
        names = self.type_names
        if names is None:
            return np.arange(self.n_types, dtype=np.int64)
        return np.asarray(sorted(range(self.n_types), key=lambda t: names[t]), dtype=np.int64)

    def reference_column(self, policy: str) -> int:
        """Index of the ``reference_type`` column that agnostic policies read for every type."""
        ref = self.reference_type
        if self.type_names is None or ref not in self.type_names:
            raise InvalidProblem(
                f"policy {policy} uses the {ref!r} throughput on every type (as Gavel does with "
                f"'v100') and needs type_names containing it, got {self.type_names}; set "
                "reference_type to another type's name",
                field="type_names",
            )
        return self.type_names.index(ref)


def _set(obj: GavelInputs, name: str, value: object) -> None:
    # The dataclass is frozen for callers; validation stores the converted arrays once.
    object.__setattr__(obj, name, value)


def _floats(value: object, name: str, shape: tuple[int, ...], ids: IntArray | None) -> FloatArray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise InvalidProblem(f"{name} has shape {arr.shape}, expected {shape}", field=name)
    bad = ~np.isfinite(arr)
    what = "is not finite"
    if not bad.any():
        bad = arr < 0.0
        what = "is negative"
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InvalidProblem(
            f"{_where(name, first, ids)}: {name} {what}", field=name, index=first[0]
        )
    return arr


def _ints(value: object, name: str, n: int, *, lower: int | None) -> IntArray:
    raw = np.asarray(value)
    if raw.shape != (n,):
        raise InvalidProblem(f"{name} has shape {raw.shape}, expected ({n},)", field=name)
    if raw.dtype.kind == "f":
        bad = ~np.isfinite(raw) | (raw != np.round(raw))
        if bad.any():
            j = int(np.argmax(bad))
            raise InvalidProblem(f"row {j}: {name} is not an integer", field=name, index=j)
    elif raw.dtype.kind not in "iub":
        raise InvalidProblem(f"{name} must hold integers, got dtype {raw.dtype}", field=name)
    arr = raw.astype(np.int64)
    if lower is not None and arr.size and int(arr.min()) < lower:
        j = int(np.argmax(arr < lower))
        raise InvalidProblem(f"row {j}: {name} must be >= {lower}", field=name, index=j)
    if lower is None and np.unique(arr).size != n:
        uniq, counts = np.unique(arr, return_counts=True)
        raise InvalidProblem(
            f"job id {int(uniq[np.argmax(counts > 1)])} appears more than once in {name}",
            field=name,
        )
    return arr


def _where(name: str, index: tuple[int, ...], ids: IntArray | None) -> str:
    if ids is None:
        return f"type {index[0]}"
    job = f"job {int(ids[index[0]])}"
    return f"{job}, type {index[1]}" if len(index) == 2 else job

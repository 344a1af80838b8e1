"""One round's input to Hadar/HadarE, validated once (every error names the job, node or field).

Built by the caller (the core's ``hadar``/``hadare`` policies, tests, benchmarks) with
:func:`make_inputs`, which fills the optional arrays; read by
:mod:`~walras.allocator.hadar.planner`.

Conventions (shared with :mod:`walras.allocator.rounds`):

- ``throughput[j, t]`` is the work units per second of job ``j``'s *whole gang* when all its
  ``replicas[j]`` GPUs are of type ``t`` (0 = cannot run there). Per GPU, each member contributes
  ``throughput[j, t] / replicas[j]``; a data-parallel gang advances at its slowest member's pace
  (Sultana et al. 2024, eq. 1b: ``W_j · min_r X_j^r``), so a gang spread over several types runs at
  ``min_{t used} throughput[j, t]``.
- One GPU per pod: a placement is ``(node, pods)`` pairs whose pods sum to ``replicas[j]``.
- ``node_free[k]`` is node ``k``'s GPUs usable by Walras this round, *including* the GPUs that
  Walras's own running pods hold (``current``); Hadar decides afresh who keeps them.
- ``current[j, k]`` is the number of job ``j``'s pods running on node ``k`` now. A job is
  *running* (kept unless a move pays) when its row is exactly one whole gang (row sum
  ``replicas[j]``). Any other row (a gang with a pod missing during churn, a forkable job's
  copies) is accepted and the job is re-planned like a waiting one; its current nodes are reused
  first, and a gang on exactly its current pods is reported ``kept``. Rows of jobs that are done
  (``remaining == 0``) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar.utilities import InverseSlowdown, Utility

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class HadarInputs:
    """One round of Hadar (validated in ``__post_init__``; arrays are read-only copies).

    Attributes:
        throughput: ``(J, T)`` work/s of the whole gang on type ``t`` (see module docstring).
        replicas: ``(J,)`` gang size ``W_j`` (GPUs = pods), at least 1.
        remaining: ``(J,)`` work units left; 0 means done (the job is ignored).
        elapsed: ``(J,)`` seconds since the job arrived (``now - a_j``).
        node_type: ``(K,)`` GPU type of each node, in ``[0, T)``.
        node_free: ``(K,)`` GPUs usable by Walras this round (running Walras pods included).
        current: ``(J, K)`` pods running now.
        forkable: ``(J,)`` HadarE may run copies of the job (opt-in per job).
        weight: ``(J,)`` positive utility weight.
        total_work: ``(J,)`` the job's total work (sets its ideal time); ``>= remaining``.
        round_seconds: round length ``L``.
        restart_seconds: cost of (re)starting a gang: checkpoint, reschedule, reload.
        utility: utility shape (:mod:`~walras.allocator.hadar.utilities`).
        u_min, u_max: ``(T,)`` price bounds, or ``None`` for the defaults of
            :func:`walras.allocator.hadar.prices.default_bounds`.
    """

    throughput: FloatArray
    replicas: IntArray
    remaining: FloatArray
    elapsed: FloatArray
    node_type: IntArray
    node_free: IntArray
    current: IntArray
    forkable: BoolArray
    weight: FloatArray
    total_work: FloatArray
    round_seconds: float = 360.0
    restart_seconds: float = 10.0
    utility: Utility = field(default_factory=InverseSlowdown)
    u_min: FloatArray | None = None
    u_max: FloatArray | None = None

    def __post_init__(self) -> None:
        thr = np.asarray(self.throughput, dtype=np.float64)
        if thr.ndim != 2:
            raise InvalidProblem(
                f"throughput must be (jobs, types), got shape {thr.shape}", field="throughput"
            )
        J, T = thr.shape
        node_type = _ints(self.node_type, "node_type", None)
        K = node_type.shape[0]
        values: dict[str, object] = {
            "throughput": _floats(thr, "throughput", (J, T)),
            "replicas": _ints(self.replicas, "replicas", (J,), lower=1),
            "remaining": _floats(self.remaining, "remaining", (J,)),
            "elapsed": _floats(self.elapsed, "elapsed", (J,)),
            "node_type": node_type,
            "node_free": _ints(self.node_free, "node_free", (K,)),
            "current": _ints(self.current, "current", (J, K)),
            "forkable": _bools(self.forkable, "forkable", (J,)),
            "weight": _floats(self.weight, "weight", (J,), positive=True),
            "total_work": _floats(self.total_work, "total_work", (J,)),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
        if K and (int(node_type.max()) >= T):
            k = int(np.argmax(node_type >= T))
            raise InvalidProblem(
                f"node {k}: node_type {int(node_type[k])} is not a type (have {T})",
                field="node_type",
                index=k,
            )
        _check_scalars(self.round_seconds, self.restart_seconds)
        self._check_consistency()
        for name in ("u_min", "u_max"):
            raw = getattr(self, name)
            if raw is not None:
                object.__setattr__(self, name, _floats(raw, name, (T,), positive=True))
        if self.u_min is not None and self.u_max is not None and (self.u_min > self.u_max).any():
            t = int(np.argmax(self.u_min > self.u_max))
            raise InvalidProblem(f"type {t}: u_min exceeds u_max", field="u_min", index=t)
        if not callable(self.utility):
            raise InvalidProblem("utility must be a utility shape (callable)", field="utility")

    def _check_consistency(self) -> None:
        short = self.total_work < self.remaining
        if short.any():
            j = int(np.argmax(short))
            raise InvalidProblem(
                f"job {j}: total_work {self.total_work[j]} < remaining {self.remaining[j]}",
                field="total_work",
                index=j,
            )
        over = self.current.sum(axis=0) > self.node_free
        if over.any():
            k = int(np.argmax(over))
            raise InvalidProblem(
                f"node {k}: current pods {int(self.current[:, k].sum())} exceed node_free "
                f"{int(self.node_free[k])}",
                field="current",
                index=k,
            )

    @property
    def n_jobs(self) -> int:
        return int(self.throughput.shape[0])

    @property
    def n_types(self) -> int:
        return int(self.throughput.shape[1])

    @property
    def n_nodes(self) -> int:
        return int(self.node_type.shape[0])


def make_inputs(
    throughput: npt.ArrayLike,
    replicas: npt.ArrayLike,
    remaining: npt.ArrayLike,
    node_type: npt.ArrayLike,
    node_free: npt.ArrayLike,
    *,
    elapsed: npt.ArrayLike | None = None,
    current: npt.ArrayLike | None = None,
    forkable: npt.ArrayLike | None = None,
    weight: npt.ArrayLike | None = None,
    total_work: npt.ArrayLike | None = None,
    round_seconds: float = 360.0,
    restart_seconds: float = 10.0,
    utility: Utility | None = None,
    u_min: npt.ArrayLike | None = None,
    u_max: npt.ArrayLike | None = None,
) -> HadarInputs:
    """:class:`HadarInputs` with defaults: nothing elapsed or running, nothing forkable, weight 1,
    ``total_work = remaining`` (pass the real total: it sets each job's ideal time)."""
    thr = np.asarray(throughput, dtype=np.float64)
    J = thr.shape[0] if thr.ndim == 2 else 0
    K = np.asarray(node_type).reshape(-1).shape[0]
    rem = np.asarray(remaining, dtype=np.float64)
    return HadarInputs(
        throughput=thr,
        replicas=np.asarray(replicas),
        remaining=rem,
        elapsed=np.zeros(J) if elapsed is None else np.asarray(elapsed),
        node_type=np.asarray(node_type),
        node_free=np.asarray(node_free),
        current=np.zeros((J, K), dtype=np.int64) if current is None else np.asarray(current),
        forkable=np.zeros(J, dtype=bool) if forkable is None else np.asarray(forkable),
        weight=np.ones(J) if weight is None else np.asarray(weight),
        total_work=rem if total_work is None else np.asarray(total_work),
        round_seconds=round_seconds,
        restart_seconds=restart_seconds,
        utility=InverseSlowdown() if utility is None else utility,
        u_min=None if u_min is None else np.asarray(u_min),
        u_max=None if u_max is None else np.asarray(u_max),
    )


def _where(name: str, index: tuple[int, ...]) -> str:
    if name in ("node_type", "node_free"):
        return f"node {index[0]}"
    if name == "current":
        return f"job {index[0]} on node {index[1]}"
    if name in ("u_min", "u_max"):
        return f"type {index[0]}"
    if len(index) == 2:
        return f"job {index[0]}, type {index[1]}"
    return f"job {index[0]}"


def _fail(name: str, bad: npt.NDArray[np.bool_], what: str) -> InvalidProblem:
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return InvalidProblem(f"{_where(name, first)}: {name} {what}", field=name, index=first[0])


def _shape(arr: npt.NDArray[np.generic], name: str, shape: tuple[int, ...] | None) -> None:
    if shape is None:
        if arr.ndim != 1:
            raise InvalidProblem(f"{name} must be 1-D, got shape {arr.shape}", field=name)
    elif arr.shape != shape:
        raise InvalidProblem(f"{name} has shape {arr.shape}, expected {shape}", field=name)


def _floats(
    value: object, name: str, shape: tuple[int, ...], *, positive: bool = False
) -> FloatArray:
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidProblem(f"{name} must hold numbers: {exc}", field=name) from exc
    _shape(arr, name, shape)
    if arr.size:
        if not np.isfinite(arr).all():
            raise _fail(name, ~np.isfinite(arr), "is not finite")
        low = arr <= 0 if positive else arr < 0
        if low.any():
            raise _fail(name, low, "must be positive" if positive else "is negative")
    arr.setflags(write=False)
    return arr


def _ints(value: object, name: str, shape: tuple[int, ...] | None, *, lower: int = 0) -> IntArray:
    raw = np.asarray(value)
    _shape(raw, name, shape)
    if raw.dtype.kind in "iub":
        arr = raw.astype(np.int64)
    elif raw.dtype.kind == "f":
        bad = ~np.isfinite(raw) | (raw != np.round(raw))
        if bad.any():
            raise _fail(name, bad, "is not an integer")
        arr = raw.astype(np.int64)
    else:
        raise InvalidProblem(f"{name} must hold integers, got dtype {raw.dtype}", field=name)
    if arr.size and int(arr.min()) < lower:
        raise _fail(name, arr < lower, "is negative" if lower == 0 else f"must be >= {lower}")
    arr.setflags(write=False)
    return arr


def _bools(value: object, name: str, shape: tuple[int, ...]) -> BoolArray:
    raw = np.asarray(value)
    _shape(raw, name, shape)
    if raw.dtype.kind != "b" and not (raw.dtype.kind in "iu" and np.isin(raw, (0, 1)).all()):
        raise InvalidProblem(f"{name} must hold booleans, got dtype {raw.dtype}", field=name)
    arr = raw.astype(bool)
    arr.setflags(write=False)
    return arr


def _check_scalars(round_seconds: float, restart_seconds: float) -> None:
    if not (np.isfinite(round_seconds) and round_seconds > 0):
        raise InvalidProblem(
            f"round_seconds must be positive, got {round_seconds}", field="round_seconds"
        )
    if not (np.isfinite(restart_seconds) and 0 <= restart_seconds < round_seconds):
        raise InvalidProblem(
            f"restart_seconds must be in [0, round_seconds), got {restart_seconds}",
            field="restart_seconds",
        )

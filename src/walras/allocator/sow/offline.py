"""Offline optimum in hindsight (Babaioff et al. 2022 §2, "offline benchmark"), as a HiGHS MILP.

With every job's realised arrival ``a_j`` and duration ``d_j`` known, choose for each job at most
one (type ``g``, start ``s ≥ a_j``) to maximise total value, within capacity in every round:

    max  Σ_{j,g,s} v_j(s + d_jg − r_j) · x_{jgs}
    s.t. Σ_{j,s: s ≤ τ < s + d_jg} k_jg · x_{jgs} ≤ C_g      for every type g and round τ
         Σ_{g,s} x_{jgs} ≤ 1                                  for every job j
         x ∈ {0, 1}

Only starts with positive value are variables (a zero-value run never helps). ``relaxed=True``
drops integrality (an upper bound, for instances too large for the MILP).

HiGHS (1.12, in scipy 1.17) prints ``HighsMipSolverData::transformNewIntegerFeasibleSolution
tmpSolver.run();`` with a bare ``printf`` when it repairs an incumbent, whatever ``disp`` or
``output_flag`` say (ERGO-Code/HiGHS#2783), which breaks one-JSON-line-per-case output; the solve
therefore runs with file descriptor 1 sent to ``/dev/null`` (:func:`_c_stdout_silenced`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow.model import StatementOfWork, instances
from walras.allocator.sow.plan import last_start


@dataclass(frozen=True, slots=True)
class OfflineResult:
    """``welfare`` of the hindsight optimum and its schedule ``(job, gpu_type, start)``."""

    welfare: float
    schedule: tuple[tuple[str, str, int], ...]
    relaxed: bool


def offline_optimum(
    capacities: Mapping[str, int],
    sows: Sequence[StatementOfWork],
    realisation: Mapping[str, tuple[int, int]],
    *,
    relaxed: bool = False,
    time_limit: float = 60.0,
) -> OfflineResult:
    """Best schedule in hindsight of the realised jobs (see the module docstring)."""
    types = sorted(capacities)
    n_types = len(types)
    cols: list[tuple[str, str, int]] = []
    values: list[float] = []
    rows_r: list[int] = []
    rows_c: list[int] = []
    rows_v: list[float] = []
    job_of: list[int] = []
    jobs: list[str] = []
    horizon = 0
    for sow in sorted(sows, key=lambda s: (s.birth, s.name)):
        for inst in instances(sow):
            if inst.job not in realisation:
                raise InvalidProblem(f"no realisation for job {inst.job}", field="realisation")
            a, d = realisation[inst.job]
            jobs.append(inst.job)
            for dem in inst.demands:
                if dem.gpu_type not in capacities:
                    raise InvalidProblem(f"unknown GPU type {dem.gpu_type}", field="gpu_type")
                dg = dem.duration_on(d)
                for s in range(a, last_start(inst) + 1):
                    v = inst.value(s + dg - inst.release)
                    if v <= 0:
                        continue
                    c = len(cols)
                    cols.append((inst.job, dem.gpu_type, s))
                    values.append(v)
                    job_of.append(len(jobs) - 1)
                    gi = types.index(dem.gpu_type)
                    for tau in range(s, s + dg):
                        rows_r.append(tau * n_types + gi)
                        rows_c.append(c)
                        rows_v.append(float(dem.concurrency))
                    horizon = max(horizon, s + dg)
    if not cols:
        return OfflineResult(0.0, (), relaxed)
    a_cap = sparse.csr_matrix((rows_v, (rows_r, rows_c)), shape=(horizon * n_types, len(cols)))
    a_job = sparse.csr_matrix(
        (np.ones(len(cols)), (job_of, np.arange(len(cols)))), shape=(len(jobs), len(cols))
    )
    ub_cap = np.tile(np.array([capacities[g] for g in types], dtype=np.float64), horizon)
    with _c_stdout_silenced():
        res = milp(
            -np.asarray(values),
            constraints=[
                LinearConstraint(a_cap, -np.inf, ub_cap),
                LinearConstraint(a_job, -np.inf, np.ones(len(jobs))),
            ],
            integrality=np.zeros(len(cols)) if relaxed else np.ones(len(cols)),
            bounds=Bounds(0.0, 1.0),
            options={"time_limit": time_limit, "disp": False},
        )
    if res.x is None:
        raise InvalidProblem(f"offline optimum failed: {res.message}", field="realisation")
    x = np.asarray(res.x)
    chosen = tuple(cols[i] for i in np.flatnonzero(x > 0.5))
    return OfflineResult(float(-res.fun), chosen, relaxed)


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers: a ``printf`` into a pipe sits there until the buffer fills."""
    # OSError/AttributeError: no C library reachable this way (not Linux/macOS): nothing to flush.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """Send what is written to file descriptor 1 inside the block to ``/dev/null``.

    Process-wide: another thread's stdout output during the block is lost too (the simulator
    and the benchmarks solve on their main thread; the operator never calls this module).
    """
    sys.stdout.flush()
    _flush_c_stdio()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)

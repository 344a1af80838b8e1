"""Solve the shards: in worker processes when more than one core is free, else in-process.

``Runner(shared, workers).map(fn, payloads)`` returns ``[fn(shared, p) for p in payloads]`` in
payload order, each with the wall and CPU seconds it took where it ran. The shards are
independent sub-problems (Narayanan et al. 2021 §3.2, the map step), so the only coordination is
collecting the results in order: the answer does not depend on how many workers ran them.

- ``shared`` is the read-only data every call needs (e.g. the k shard problems). The worker
  processes receive it once, when they start, as the pool initializer's argument: under
  ``fork`` (used where the platform has it) that is inherited memory, not a pickle, so a
  10⁷-job problem is not copied through pipes on every call. Payloads and answers are pickled:
  keep payloads small (a shard index and a capacity vector).
- ``workers=None`` picks ``min(len(payloads), free)`` with ``free`` the CPUs this process may
  run on (``os.sched_getaffinity``) minus those the one-minute load average says other
  processes keep busy (``free_cores``). One free core, one payload or ``workers=1`` runs
  in-process (a pool would only add start-up and pickling cost). ``fn`` must be a
  module-level function.
- The pool is started lazily on the first parallel ``map`` and reused until ``close`` (the
  price-spread repair maps several times over the same shards).
- With ``workers=None`` the first ``map`` also decides whether a pool pays at all: it solves
  the first payload in-process and, when ``first × (payloads − 1) < POOL_MIN_S``, the rest too
  (``workers`` becomes 1). Otherwise it submits the rest to the pool and keeps working itself,
  taking pending payloads from the end of the queue (a cancelled future is one no worker has
  started), so the probe costs no wall time. Why: a pool's fork, pickling and shutdown cost
  25-70 ms on a loaded 2-core machine, more than eight 256-job shards of Gavel's max-min LP
  take to solve (``bench/bench_pop.py``; docs/policies.md, POP). An explicit ``workers`` count
  always uses that many processes.

Called by every POP solve (``pop.pricing_pop``, ``pop.fairness_pop``, ``pop.generic``).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from walras.allocator.errors import InvalidProblem

P = TypeVar("P")
R = TypeVar("R")

_SHARED: Any = None  # the worker's copy of ``shared`` (set by the pool initializer)

POOL_MIN_S = 0.1
"""In-process work (seconds, estimated from the first payload) below which ``workers=None`` starts
no pool: about twice the 25-70 ms a two-process pool costs to start and stop (module doc)."""


@dataclass(frozen=True)
class Timed(Generic[R]):
    """One shard's answer and the wall/CPU seconds it took in the process that ran it."""

    value: R
    wall_s: float
    cpu_s: float


def cores() -> int:
    """CPUs this process may use (``os.sched_getaffinity``; ``os.cpu_count`` elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def free_cores() -> int:
    """Cores not busy with other work: ``cores() − ⌊load₁ − 1⌋⁺`` (at least 1).

    The one-minute load average counts runnable processes, this one included (hence the −1);
    on a machine whose cores are all busy a process pool only adds fork and pickling time.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this platform
        load = 0.0
    return max(1, cores() - max(0, math.floor(load - 1.0)))


def choose_workers(count: int, workers: int | None) -> int:
    """Worker processes to use for ``count`` shards (1 means in-process)."""
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise InvalidProblem(f"workers must be ≥ 1 or None, got {workers!r}", field="workers")
    limit = free_cores() if workers is None else workers
    return max(1, min(count, limit))


def _install(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _timed(fn: Callable[[Any, P], R], shared: Any, payload: P) -> Timed[R]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn(shared, payload)
    return Timed(value, time.perf_counter() - wall, time.process_time() - cpu)


def _in_worker(fn: Callable[[Any, P], R], payload: P) -> Timed[R]:
    return _timed(fn, _SHARED, payload)


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class Runner:
    """Maps shard functions in-process or over a lazily started process pool (module doc)."""

    def __init__(self, shared: Any, count: int, workers: int | None = None) -> None:
        self.shared = shared
        self.workers = choose_workers(count, workers)
        self._auto = workers is None
        self._pool: Executor | None = None

    def map(self, fn: Callable[[Any, P], R], payloads: Sequence[P]) -> list[Timed[R]]:
        """``fn(shared, p)`` for every payload, in order."""
        if self.workers <= 1 or len(payloads) <= 1:
            return [_timed(fn, self.shared, p) for p in payloads]
        if self._pool is not None or not self._auto:
            return [f.result() for f in self._submit(fn, payloads)]
        # Auto mode's first map: probe with the first payload (module docstring).
        first = _timed(fn, self.shared, payloads[0])
        if first.wall_s * (len(payloads) - 1) < POOL_MIN_S:
            self.workers = 1
            return [first, *(_timed(fn, self.shared, p) for p in payloads[1:])]
        futures = self._submit(fn, payloads[1:])
        stolen: dict[int, Timed[R]] = {}
        for i in reversed(range(len(futures))):
            if futures[i].cancel():  # no worker has started it: solve it here
                stolen[i] = _timed(fn, self.shared, payloads[1 + i])
        rest = [stolen[i] if i in stolen else f.result() for i, f in enumerate(futures)]
        return [first, *rest]

    def _submit(self, fn: Callable[[Any, P], R], payloads: Sequence[P]) -> list[Future[Timed[R]]]:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=_context(),
                initializer=_install,
                initargs=(self.shared,),
            )
        return [self._pool.submit(_in_worker, fn, p) for p in payloads]

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

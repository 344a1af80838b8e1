"""Run a solve with the loaded OpenBLAS libraries on one thread, then restore their setting.

Why: scipy's L-BFGS-B calls BLAS on 4-element vectors each iteration. That wakes OpenBLAS's
worker threads, which then busy-wait for more work and take the CPU from the numpy
element-wise kernels of the next subproblem evaluation. On a 2-core machine this made a 4-type
L-BFGS-B step cost ~8 ms of CPU instead of ~0.8 ms and slowed the kernels near 2× (measured:
the 50 000-job start-price solve of an n = 1e6 problem took 0.68 s of CPU instead of 0.25 s).
The solver's own arrays are far too small for threaded BLAS to help.

Nothing else is changed: the libraries are found among those already loaded (``/proc/self/maps``;
numpy's and scipy's wheels each bundle one, with prefixed symbol names), and the previous
thread counts are restored on exit. Where no OpenBLAS is loaded, or not on Linux, it does
nothing. The setting is process-wide, so a concurrent BLAS user in another thread runs
single-threaded for the duration of the solve.

Called by ``solver.solve`` and ``solver.best_response``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# (setter, getter) symbol names: scipy-openblas wheels (32- and 64-bit integer builds), plain.
_SYMBOLS = (
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
)

_controls: list[tuple[Any, Any]] | None = None


def _loaded_openblas() -> list[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and ".so" in p)


def _find_controls() -> list[tuple[Any, Any]]:
    controls = []
    for path in _loaded_openblas():
        try:
            lib = ctypes.CDLL(path)  # already loaded: returns the same handle
        except OSError:
            continue
        for setter, getter in _SYMBOLS:
            if hasattr(lib, setter) and hasattr(lib, getter):
                controls.append((getattr(lib, setter), getattr(lib, getter)))
                break
    return controls


def thread_counts() -> tuple[int, ...]:
    """The current thread count of every loaded OpenBLAS (empty when none is found)."""
    global _controls
    if _controls is None:
        _controls = _find_controls()
    return tuple(int(get()) for _, get in _controls)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Within the block every loaded OpenBLAS uses one thread; restored afterwards."""
    global _controls
    if _controls is None:
        _controls = _find_controls()
    before = [int(get()) for _, get in _controls]
    for (set_, _), count in zip(_controls, before, strict=True):
        if count != 1:
            set_(1)
    try:
        yield
    finally:
        for (set_, _), count in zip(_controls, before, strict=True):
            if count != 1:
                set_(count)

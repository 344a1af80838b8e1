"""Keep freed memory in the process (glibc ``mallopt``) for short, array-heavy commands.

glibc serves each allocation above its mmap threshold (128 KiB, raised dynamically up to
32 MiB) with a fresh ``mmap`` and gives it back with ``munmap`` when freed; heap memory above
the trim threshold is returned too. A 10⁶-job solve allocates and frees dozens of 8–32 MB
temporaries, so the kernel zero-fills the same pages again and again: ``walras solve`` on the
paper's n = 10⁶ instance spent 0.2–0.4 s of system time that way, about as much as the solve's
own CPU time. Raising the trim threshold to 1 GiB and the mmap threshold to its maximum
(32 MiB) keeps freed blocks for reuse (the process exits soon after; its peak RSS does not
change: 316 MB either way).

``small_pages_for_numpy`` turns off numpy's huge-page advice on Linux (it marks every array of
4 MB or more for transparent huge pages). With the kernel's default ``defrag=madvise`` a fault
in such an array may compact memory first to find 2 MB of it free; on a host whose memory is
fragmented (here, right after a 1.4 GB resalloc solve) that cost ``walras solve`` at n = 10⁶
0.16–0.30 s of system time against 0.11–0.13 s with ordinary pages (twice as many, cheaper, faults;
three runs each, alternating, each after a resalloc run).

Only ``walras solve`` calls these (not the long-running operator or agent). Without glibc
(musl, macOS) ``keep_freed_memory`` does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 1 << 30
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit hosts


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds; whether it took effect."""
    try:
        # The symbols already loaded into the process (libc among them); no library search.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    trim = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    mmap = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    return bool(trim) and bool(mmap)


def small_pages_for_numpy() -> bool:
    """Ask numpy not to advise huge pages (``NUMPY_MADVISE_HUGEPAGE=0``, unless the user set it).

    numpy reads the variable when it is first imported, so this must run before; whether it
    could still take effect (numpy not imported yet).
    """
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    return "numpy" not in sys.modules

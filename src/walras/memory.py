"""Keep freed memory in the process (glibc ``mallopt``) for short, array-heavy commands.

glibc serves each allocation above its mmap threshold (128 KiB, raised dynamically up to
32 MiB) with a fresh ``mmap`` and gives it back with ``munmap`` when freed; heap memory above
the trim threshold is returned too. A 10⁶-job solve allocates and frees dozens of 8–32 MB
temporaries, so the kernel zero-fills the same pages again and again: ``walras solve`` on the
paper's n = 10⁶ instance spent 0.2–0.4 s of system time that way, about as much as the solve's
own CPU time. Raising the trim threshold to 1 GiB and the mmap threshold to its maximum
(32 MiB) keeps freed blocks for reuse (the process exits soon after; its peak RSS does not
change: 316 MB either way).

Only ``walras solve`` calls this (not the long-running operator or agent). Without glibc
(musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes

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

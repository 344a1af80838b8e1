"""``walras.memory``: glibc's mallopt is found and accepts the thresholds (Linux + glibc)."""

from __future__ import annotations

import platform

import pytest

from walras import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_takes_effect_on_glibc() -> None:
    # mallopt returns 1 on success and 0 for a value glibc rejects (an mmap threshold above
    # its 32 MiB maximum on 64-bit hosts would be rejected).
    assert memory.keep_freed_memory() is True
    assert memory.MMAP_THRESHOLD <= 32 << 20

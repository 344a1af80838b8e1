"""``walras.memory.small_pages_for_numpy``: numpy's huge-page advice off unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import os, sys\n"
    "from walras import memory\n"
    "before = 'numpy' in sys.modules\n"
    "effective = memory.small_pages_for_numpy()\n"
    "print(before, effective, os.environ['NUMPY_MADVISE_HUGEPAGE'])\n"
)


def probe(env_value: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if env_value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_turns_huge_pages_off_before_numpy_is_imported() -> None:
    # A fresh interpreter has not imported numpy: the setting can still take effect.
    assert probe(None) == ["False", "True", "0"]


def test_keeps_the_users_own_setting() -> None:
    assert probe("1") == ["False", "True", "1"]


def test_says_when_numpy_was_imported_first() -> None:
    env = dict(os.environ)
    code = "import numpy\n" + PROBE
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[:2] == ["True", "False"]

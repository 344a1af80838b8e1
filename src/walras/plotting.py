"""matplotlib for the PNG plots, an optional extra: ``pip install 'walras[plots]'``.

The operator's image and a plain ``pip install walras`` do not carry matplotlib (it and its
dependencies are ~40 MB the scheduler never uses). Only the simulator's ``--out`` plots, the sweep
plot and the demo's plot need it; they get pyplot from :func:`pyplot`, which imports it on first
use with the Agg backend (no display). The commands check :func:`available` before any work, so a
missing extra ends a run at once with :data:`MISSING` (exit 2), not after an hour of simulation.
"""

from __future__ import annotations

import importlib.util
from typing import Any

INSTALL = "pip install 'walras[plots]'"
MISSING = f"plots need matplotlib, which is not installed: {INSTALL}"


class PlotsUnavailableError(RuntimeError):
    """matplotlib is not installed (the ``plots`` extra)."""


def available() -> bool:
    """matplotlib can be imported (without importing it: ``walras --help`` stays fast)."""
    return importlib.util.find_spec("matplotlib") is not None


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; :class:`PlotsUnavailableError` when missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailableError(MISSING) from exc
    return plt

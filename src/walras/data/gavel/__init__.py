"""Gavel's ``simulation_throughputs.json`` (MIT, see ``LICENSE.gavel`` here), shipped as the default
throughput table of ``walras simulate`` and the demo.

Used by :mod:`walras.sim.throughputs`; callers that need the raw bytes use
:func:`open_throughputs`.
"""

from __future__ import annotations

from importlib import resources
from typing import IO

THROUGHPUTS = "simulation_throughputs.json"
LICENSE = "LICENSE.gavel"


def open_throughputs() -> IO[bytes]:
    """The shipped ``simulation_throughputs.json``, opened for binary reading."""
    return resources.files(__name__).joinpath(THROUGHPUTS).open("rb")


def license_text() -> str:
    """The MIT notice that must travel with the table."""
    return resources.files(__name__).joinpath(LICENSE).read_text(encoding="utf-8")

"""Options of one simulation run: what ``walras simulate`` passes to :func:`.engine.run`."""

from __future__ import annotations

from dataclasses import dataclass

SEMANTICS = ("gavel",)
"""Round mechanics available; ``walras`` (the operator's round planner) comes with walras.core."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """``round_s``: round length; ``restart_s``: seconds a (re)started job loses in its round;
    ``min_reset_interval_s``: Gavel's ``minimum_time_between_allocation_resets``; ``window``:
    job ids ``[a, b)`` whose mean JCT is reported separately (Gavel's ``-s a -e b``)."""

    round_s: float = 360.0
    restart_s: float = 0.0
    seed: int = 0
    window: tuple[int, int] | None = None
    semantics: str = "gavel"
    min_reset_interval_s: float = 1920.0

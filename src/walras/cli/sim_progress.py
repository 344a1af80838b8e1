"""The progress bar of ``walras simulate``: jobs done of all jobs, elapsed time and an ETA.

Shown on stderr only when a person is watching: never with ``--json`` or ``--quiet``, and never
when stderr is not a terminal (:func:`wanted`), so stdout (the summary or the JSON line) is the
same with or without it. It appears once a run has lasted ``DELAY_S`` seconds, so short runs
print nothing extra. The ETA is rich's estimate: the jobs left divided by the recent rate of
finishing jobs (jobs finished per wall second over the last samples), which is rough early in a
continuous trace, where jobs finish at the pace they arrive.
"""

from __future__ import annotations

import time
from typing import Any


def wanted(*, json_output: bool, quiet: bool, stderr_is_tty: bool) -> bool:
    """Whether to show the bar: a terminal is watching and no machine reads the output."""
    return stderr_is_tty and not (json_output or quiet)


class SimProgress:
    """A rich progress bar on stderr that appears only once a run has lasted ``DELAY_S``."""

    DELAY_S = 2.0

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> SimProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, done: int, total: int) -> None:
        """Called after every simulated round with the jobs finished so far."""
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.started < self.DELAY_S:
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                "jobs done",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                "ETA",
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("simulate", total=total)
        self.bar.update(self.task, completed=done)

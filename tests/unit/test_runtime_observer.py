"""walras.testing.runtime_observer.parse_log: what the observer reads from a workload's log.

The oracle is the log format ``walras.workload.Run`` writes, produced here by a real ``Run``
(its ``log`` callable collects the lines), not retyped.
"""

from __future__ import annotations

from pathlib import Path

from walras.testing.runtime_observer import parse_log
from walras.workload import Run


def _lines(directory: Path, steps: int, stop_after: int | None = None) -> str:
    out: list[str] = []
    state = {"x": 0}
    run = Run(
        steps,
        state=state,
        checkpoint_dir=directory,
        log=lambda m: out.append(f"walras.workload: {m}"),
    )
    try:
        with run:
            for step in run:
                state["x"] = step
                if stop_after is not None and step + 1 == stop_after:
                    run.request_stop("SIGTERM")  # what the SIGTERM handler does
    except SystemExit as exc:
        assert exc.code == 0
    return "\n".join(out) + "\n"


def test_a_fresh_start_stopped_then_resumed_to_the_end(tmp_path: Path) -> None:
    first = parse_log(_lines(tmp_path, 50, stop_after=20))
    assert first.start_step == 0
    assert first.stopped_at == 20 and first.stopped_at in first.checkpoints
    assert first.stop_reason == "SIGTERM"
    assert first.done is None
    second = parse_log(_lines(tmp_path, 50))
    assert second.start_step == 20
    assert second.done == 50
    assert second.stopped_at is None


def test_other_lines_are_ignored() -> None:
    log = parse_log("step 0 loss 1.0\nTraceback (most recent call last):\n")
    assert log.start_step is None and log.checkpoints == [] and log.done is None

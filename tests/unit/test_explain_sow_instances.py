"""``walras explain sow``'s instance table names the unprofitable cancellation.

LIFO cancels only instances that have not started, so a Cancelled instance with start < finish
was stopped by the "no completion can pay any more" rule; one that never started stays plain.
"""

from __future__ import annotations

from walras.cli.explain_sow import instance_phase


def test_started_then_cancelled_is_unprofitable() -> None:
    started = {"index": 0, "phase": "Cancelled", "arrival": 1, "start": 2, "finish": 5}
    assert instance_phase(started) == "Cancelled (unprofitable)"


def test_cancelled_before_start_and_other_phases_stay_plain() -> None:
    assert instance_phase({"phase": "Cancelled", "arrival": 3}) == "Cancelled"
    assert instance_phase({"phase": "Completed", "start": 2, "finish": 5}) == "Completed"
    assert instance_phase({}) == "-"

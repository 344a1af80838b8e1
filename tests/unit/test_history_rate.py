"""A job that stays in its group at a new rate (HadarE copies, measured throughputs).

Oracle, by hand: running in group ``g`` at 2 units/s from t = 0, the rate becomes 5 at t = 10
without a change of group or restart, so at t = 20 the work done is 2·10 + 5·10 = 70, and
leaving the group at t = 20 stops the accounting.
"""

from __future__ import annotations

from walras.core.history import History


def test_same_group_new_rate_counts_from_the_change() -> None:
    hist = History()
    hist.advance(0.0)
    assert hist.run_in("g", 2.0, 0.0) is True
    hist.advance(10.0)
    assert hist.work_done == 20.0
    # Same group: not a change of placement (no restart), but the new rate applies from now on.
    assert hist.run_in("g", 5.0, 10.0) is False
    assert hist.running_since == 0.0
    hist.advance(20.0)
    assert hist.work_done == 70.0
    assert hist.received == {"g": 20.0}
    assert hist.run_in("", 0.0, 20.0) is True
    hist.advance(30.0)
    assert hist.work_done == 70.0
    assert hist.running_rate == 0.0

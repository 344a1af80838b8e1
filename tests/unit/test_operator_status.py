"""Conditions, status diffing and the persisted schedule history (pure pieces of the operator)."""

from __future__ import annotations

import pytest

from walras.core import conditions as cond
from walras.core import history
from walras.operator import status


@pytest.mark.parametrize(
    ("share", "prices", "alternatives", "message"),
    [
        (
            {"v100": 0.12, "k80": 0.0},
            {"v100": 3.4, "k80": 0.0},
            {"k80": 0.9, "v100": 0.12},
            "share of v100 is 0.12 at price 3.4; on k80 you would get 0.90",
        ),
        (
            {"v100": 0.0},
            {"v100": 2.0},
            {},
            "no share at the current prices (v100 2)",
        ),
        (
            {"n1": 0.3},
            {},
            {},
            "share of n1 is 0.30",
        ),
    ],
    ids=["explains-alternative", "nothing-anywhere", "psdsf-no-prices"],
)
def test_insufficient_share_message(
    share: dict[str, float], prices: dict[str, float], alternatives: dict[str, float], message: str
) -> None:
    assert cond.insufficient_share_message(share, prices, alternatives) == message


def test_numbers_have_three_significant_digits() -> None:
    assert cond.num(3.14159) == 3.14
    assert cond.num(1234.5) == 1230.0
    assert cond.num(0.0) == 0.0
    assert cond.fmt(0.123456) == "0.123"


def test_transition_time_changes_only_when_status_flips() -> None:
    old = [
        {"type": "Allocated", "status": "True", "reason": "Allocated", "lastTransitionTime": "t0"},
        {"type": "Bound", "status": "True", "reason": "PodsBound", "lastTransitionTime": "t0"},
    ]
    new = [
        cond.condition("Allocated", True, "Allocated", "new message", 2),
        cond.condition("Bound", False, "NotRunning", "no pods", 2),
        cond.condition("Preempted", True, "SliceEnded", "x", 2),
    ]
    merged = {c["type"]: c["lastTransitionTime"] for c in cond.merge_times(new, old, "t1")}
    assert merged == {"Allocated": "t0", "Bound": "t1", "Preempted": "t1"}
    assert cond.same_conditions(cond.merge_times(new, old, "t1"), new)
    assert not cond.same_conditions(new, new[:2])


def test_status_changed_ignores_transition_times_only() -> None:
    core = {
        "phase": "Running",
        "fairShare": 0.5,
        "conditions": [cond.condition("A", True, "R", "m", 1)],
    }
    old = {**core, "conditions": cond.merge_times(core["conditions"], [], "t0"), "round": 7}
    assert not status.changed(core, old)
    # Shares are shown to two decimals: one unit of the last digit is rounding noise, two are
    # a change (walras.operator.visible).
    assert not status.changed({**core, "fairShare": 0.51}, old)
    assert status.changed({**core, "fairShare": 0.52}, old)
    assert status.changed({**core, "conditions": [cond.condition("A", True, "R", "m2", 1)]}, old)


def test_history_persisted_and_restored_continues_exactly() -> None:
    """Persisting at a change and rebuilding later gives the same history as never stopping."""
    live = history.History()
    live.advance(100.0)
    live.run_in("v100", 2.0, 100.0)
    live.advance(130.0)
    live.run_in("", 0.0, 130.0)
    live.advance(150.0)
    live.run_in("k80", 0.5, 150.0)
    persisted = live.status_fields()  # written with the status change at t = 150
    live.advance(200.0)
    restored = history.History.from_status(persisted, {"k80": 0.5})
    restored.advance(200.0)
    assert restored.received == pytest.approx(live.received)
    assert restored.received == pytest.approx({"v100": 30.0, "k80": 50.0})
    assert restored.elapsed == pytest.approx(live.elapsed) == pytest.approx(100.0)
    assert restored.work_done == pytest.approx(live.work_done) == pytest.approx(30 * 2.0 + 50 * 0.5)
    shares = history.realised_share(persisted, 200.0)
    assert shares == pytest.approx({"v100": 0.3, "k80": 0.5})


def test_history_run_in_reports_changes() -> None:
    hist = history.History()
    assert hist.run_in("g", 1.0, 0.0)
    assert not hist.run_in("g", 1.0, 5.0)
    assert hist.running_since == 0.0
    assert hist.run_in("", 0.0, 6.0) and hist.running_since is None

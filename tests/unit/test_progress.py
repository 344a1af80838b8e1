"""Reported progress (walras.core.progress): checks, sums per job, measured rates, persistence.

Expected values are worked out by hand from the contract in the module docstring (the rate is
``Σ steps / Σ seconds`` of reading intervals; a gang's progress is the max of its readings, a forked
job's the sum over copies).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walras.core import model, progress
from walras.core.progress import Reading, Tracker


def r(text: str, pod: str = "p0", uid: str = "u0", gpu: str = "v100", copy: str = "") -> Reading:
    return Reading(pod=pod, uid=uid, gpu_type=gpu, text=text, copy=copy)


def test_parse_steps() -> None:
    assert progress.parse_steps("42") == 42
    assert progress.parse_steps(" +7 ") == 7
    for bad in ("-1", "1.5", "", "abc", "1e3", str(10**19)):
        with pytest.raises(ValueError):
            progress.parse_steps(bad)


def test_pod_parses_annotation() -> None:
    pod = model.parse_pod(
        {
            "metadata": {
                "name": "j-r1-0",
                "namespace": "ns",
                "labels": {"walras.dev/job": "j"},
                "annotations": {progress.ANN_STEPS_DONE: "12"},
            },
            "spec": {},
        }
    )
    assert pod.steps_done == "12"
    assert model.parse_pod({"metadata": {"name": "x"}, "spec": {}}).steps_done == ""


def test_rate_is_steps_over_seconds_between_changes() -> None:
    # The docstring's example: 100 steps seen at t=10, 400 at t=70 -> 300 steps / 60 s = 5/s.
    t = Tracker()
    assert t.observe("j", [r("100")], 10.0) == []
    assert t.observe("j", [r("100")], 40.0) == []  # unchanged: no sample, interval keeps going
    assert t.observe("j", [r("400")], 70.0) == []
    p = t.progress("j")
    assert p.steps_done == 400
    assert p.updated_at == 70.0
    m = p.measured["v100"]
    assert (m.steps, m.seconds, m.samples, m.rate) == (300.0, 60.0, 1, 5.0)
    assert p.measured_rate("v100", min_samples=1) == 5.0
    assert p.measured_rate("v100", min_samples=2) is None


def test_gang_takes_max_and_never_goes_down() -> None:
    t = Tracker()
    t.observe("j", [r("50", "a", "ua"), r("60", "b", "ub")], 0.0)
    assert t.progress("j").steps_done == 60
    # The gang restarts from a checkpoint at 55: accepted (a new pod), the job keeps 60.
    assert t.observe("j", [r("55", "c", "uc")], 10.0) == []
    assert t.progress("j").steps_done == 60
    t.observe("j", [r("80", "c", "uc")], 20.0)
    assert t.progress("j").steps_done == 80
    # Gone pods leave no state: 25 steps in 10 s on the one interval of pod c.
    assert t.progress("j").measured["v100"].rate == 2.5


def test_first_readings_of_one_round_share_one_bound() -> None:
    # Two replicas report for the first time in the same round, 100 s after creation at a
    # declared 1 step/s: both are within 10 x 1 x 100 steps of the job's 0.
    t = Tracker()
    out = t.observe("j", [r("50", "a", "ua"), r("60", "b", "ub")], 100.0, fastest=1.0)
    assert out == [] and t.progress("j").steps_done == 60


def test_forked_copies_sum() -> None:
    t = Tracker()
    t.observe(
        "j", [r("10", "a", "ua", copy="1/n1"), r("30", "b", "ub", copy="1/n2")], 0.0, forked=True
    )
    assert t.progress("j").steps_done == 40
    # Copy n1 is gone; a new copy n3 starts from 0: 40 + 5.
    t.observe(
        "j", [r("30", "b", "ub", copy="1/n2"), r("5", "c", "uc", copy="2/n3")], 5.0, forked=True
    )
    assert t.progress("j").steps_done == 45
    fields = t.status_fields("j")
    assert fields["forkBase"] == 10.0
    assert fields["copies"] == {"1/n2": 30.0, "2/n3": 5.0}


def test_decreasing_negative_and_garbage_are_ignored() -> None:
    t = Tracker()
    t.observe("j", [r("100")], 0.0)
    out = t.observe("j", [r("90")], 10.0)
    assert [(x.pod, x.reason) for x in out] == [("p0", progress.DECREASING)]
    assert "p0" in out[0].message and "90" in out[0].message
    out = t.observe("j", [r("-3"), r("x", "q", "uq")], 20.0)
    assert [x.reason for x in out] == [progress.INVALID, progress.INVALID]
    assert t.progress("j").steps_done == 100
    # The next honest reading is measured from the last accepted one (100 at t=0).
    assert t.observe("j", [r("300")], 40.0) == []
    assert t.progress("j").measured["v100"].rate == 5.0


def test_too_fast_is_ignored() -> None:
    # Fastest known 10/s, factor 10: at most 100 steps per second of interval.
    t = Tracker()
    t.observe("j", [r("0")], 0.0, fastest=10.0)
    out = t.observe("j", [r("1001")], 1.0, fastest=10.0)
    assert [x.reason for x in out] == [progress.TOO_FAST]
    assert t.observe("j", [r("1000")], 10.0, fastest=10.0) == []  # 100/s: the bound itself
    # A first reading is bounded from the job's creation: 10 s at 100/s at most.
    t2 = Tracker()
    out = t2.observe("k", [r("5000")], 10.0, fastest=10.0, created=0.0)
    assert [x.reason for x in out] == [progress.TOO_FAST]
    assert t2.progress("k").steps_done is None


def test_restart_restores_from_status() -> None:
    t = Tracker()
    t.observe("j", [r("100")], 0.0)
    t.observe("j", [r("400")], 60.0)
    status = {"progress": t.status_fields("j")}
    status["progress"]["updatedAt"] = model.format_time(60.0)
    fresh = Tracker()
    fresh.observe("j", [], 61.0, status=status)
    p = fresh.progress("j")
    assert p.steps_done == 400
    assert p.updated_at == pytest.approx(60.0)
    assert p.measured["v100"].samples == 1 and p.measured["v100"].rate == 5.0


def test_estimated_finish_and_mismatch() -> None:
    assert progress.estimated_finish(10.0, 400, 1000, 5.0) == 130.0
    assert progress.estimated_finish(10.0, 400, None, 5.0) is None
    assert progress.estimated_finish(10.0, 400, 1000, 0.0) is None
    assert progress.mismatch(10.0, 4.0) and not progress.mismatch(10.0, 6.0)


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=20))
def test_steps_done_is_monotone_whatever_one_pod_reports(values: list[int]) -> None:
    t = Tracker()
    best = None
    for k, v in enumerate(values):
        t.observe("j", [r(str(v))], float(k))
        done = t.progress("j").steps_done
        assert done is not None
        assert best is None or done >= best
        best = done
    # Accepted readings form the running maximum of the prefix that never decreased.
    prefix_max = values[0]
    for v in values[1:]:
        if v >= prefix_max:
            prefix_max = v
    assert best == prefix_max

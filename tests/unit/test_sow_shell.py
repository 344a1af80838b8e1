"""The operator's pure SoW shell (``walras.core.sow_shell``).

Oracles: the allocator's own market driver ``walras.allocator.sow.run_market`` (a different
loop over the same mechanism, told the realisation in advance) for the round-by-round advance;
the ledger before a simulated restart for :func:`rebuild` (statuses through JSON, as the API
server stores them); the CRD's field names for rejections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from walras.allocator.sow import Ledger, MechanismParams, Phase, run_market
from walras.core import sow_shell as shell

PARAMS = MechanismParams(max_concurrency=2, max_duration=4, max_value=10.0)
CAPS = {"g": 2}
CLOCK = shell.RoundClock(1000.0, 3.0)


def sow_obj(
    name: str,
    *,
    k: int = 2,
    value: Mapping[str, Any] | None = None,
    points: list[tuple[int, int, float]] | None = None,
    status: Mapping[str, Any] | None = None,
    created: float = 0.0,
    template: Mapping[str, Any] | None = None,
) -> shell.SowObject:
    return shell.SowObject(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        created=created,
        generation=1,
        spec={
            "concurrency": k,
            "throughput": {"g": 1.0},
            "value": dict(value or {"deadline": 10, "amount": 10.0}),
            "distribution": [
                {"arrival": a, "duration": d, "probability": f}
                for a, d, f in (points or [(0, 1, 1.0)])
            ],
            "template": dict(
                template or {"spec": {"containers": [{"name": "c", "image": "registry/i:1"}]}}
            ),
        },
        status=dict(status or {}),
        annotations={},
    )


# The control-plane scenario: `second` (born 1 round after `first`) runs 3 rounds from its
# birth; `first` arrives at its earliest support point, 2 rounds after its birth, inside that run.
FIRST = sow_obj("first", points=[(2, 1, 0.5), (8, 1, 0.5)])
SECOND = sow_obj("second", value={"deadline": 3, "amount": 10.0}, points=[(0, 3, 1.0)])
BIRTHS = {"ns/first": 1, "ns/second": 2}


def drive(
    ledger: Ledger, rounds: Sequence[int], realised: Mapping[str, int]
) -> tuple[Ledger, list[shell.Advance]]:
    """Advance at each round of ``rounds`` (the operator may skip some); an instance's pods
    finish ``realised[job]`` rounds after its start, seen by every later call."""
    steps = []
    for t in rounds:
        finished = {
            j.job: j.start + realised[j.job] - 1
            for j in ledger.jobs
            if j.phase is Phase.RUNNING
            and j.start is not None
            and j.start + realised[j.job] - 1 < t
        }
        # A SoW created while the operator skipped rounds is born at the next call.
        born = [o for o in (FIRST, SECOND) if BIRTHS[o.key] == t]
        adv = shell.advance(ledger, t, born, [FIRST, SECOND], finished)
        ledger = adv.ledger
        steps.append(adv)
    return ledger, steps


def test_advance_matches_the_allocators_market_driver() -> None:
    realised = {"ns/first#0": 1, "ns/second#0": 3}
    ledger, steps = drive(Ledger.empty(PARAMS, CAPS), range(12), realised)
    market = run_market(
        PARAMS,
        CAPS,
        [shell.statement(FIRST, 1), shell.statement(SECOND, 2)],
        {"ns/first#0": (3, 1), "ns/second#0": (2, 3)},
    )
    ours = {j.job: (j.phase, j.start, j.finish, j.charge) for j in ledger.jobs}
    theirs = {j.job: (j.phase, j.start, j.finish, j.charge) for j in market.ledger.jobs}
    assert ours == theirs
    # The scenario is the one claimed: later-born evicted while running, earlier completed.
    assert ours["ns/second#0"][0] is Phase.EVICTED and ours["ns/first#0"][0] is Phase.COMPLETED
    assert [e for s in steps for e in s.evicted] == ["ns/second#0"]


def test_completions_seen_late_are_charged_for_the_rounds_run() -> None:
    # `first` runs 2 rounds from round 3; the operator looks again only at round 9. Its pods'
    # finish round says when it completed: the same outcome as looking every round.
    realised = {"ns/first#0": 2, "ns/second#0": 3}
    every, _ = drive(Ledger.empty(PARAMS, CAPS), range(12), realised)
    skipping, _ = drive(Ledger.empty(PARAMS, CAPS), [0, 1, 2, 3, 9, 10, 11], realised)
    assert skipping.jobs == every.jobs
    first = skipping.job("ns/first#0")
    assert (first.phase, first.start, first.finish) == (Phase.COMPLETED, 3, 5)


def _persisted(ledger: Ledger, target: int) -> list[shell.SowObject]:
    """The SoW objects as a restarted operator lists them (status through JSON)."""
    out = []
    for obj in (FIRST, SECOND):
        status = shell.status_of(obj, ledger, CLOCK, round_no=target)
        if status is not None:
            status = json.loads(json.dumps(status))
        out.append(replace(obj, status=status or {}))
    return out


@pytest.mark.parametrize("crash_after", [1, 2, 3, 5])
def test_rebuild_from_statuses_is_the_same_ledger(crash_after: int) -> None:
    realised = {"ns/first#0": 1, "ns/second#0": 3}
    ledger, _ = drive(Ledger.empty(PARAMS, CAPS), range(crash_after + 1), realised)
    rebuilt, clock, broken = shell.rebuild(PARAMS, CAPS, _persisted(ledger, crash_after))
    assert broken == [] and clock == CLOCK
    assert rebuilt.jobs == ledger.jobs
    assert (rebuilt.time, rebuilt.round_open, rebuilt.sows) == (
        ledger.time,
        ledger.round_open,
        ledger.sows,
    )
    for a, b in zip(rebuilt.usage, ledger.usage, strict=True):
        np.testing.assert_array_equal(a, b)
    # A type the cluster lost meanwhile keeps its place with capacity 0 (LIFO evicts from it).
    lost, _, _ = shell.rebuild(PARAMS, {"h": 3}, _persisted(ledger, crash_after))
    assert lost.capacities == (("g", 0), ("h", 3)) and lost.jobs == ledger.jobs
    # And the restarted operator carries on exactly as the one that did not crash.
    rest = range(crash_after + 1, 12)
    assert drive(rebuilt, rest, realised)[0].jobs == drive(ledger, rest, realised)[0].jobs


def test_sow_seen_during_an_open_round_is_born_at_the_next() -> None:
    ledger = Ledger.empty(PARAMS, CAPS)
    adv = shell.advance(ledger, 4, [], [], {})
    assert adv.ledger.round_open and adv.ledger.time == 4
    again = shell.advance(adv.ledger, 4, [FIRST], [FIRST], {})
    assert again.admitted == [] and again.ledger.sows == ()
    born = shell.advance(again.ledger, 5, [FIRST], [FIRST], {})
    assert born.admitted == ["ns/first"]
    assert born.ledger.jobs[0].admission.instance.birth == 5


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        # Values, concurrency and durations beyond the market's bounds K, D, V (CRD can't know).
        (sow_obj("v", value={"deadline": 3, "amount": 11.0}), "spec.value"),
        (sow_obj("k", k=3), "spec.concurrency"),
        (sow_obj("d", points=[(0, 5, 1.0)]), "spec.distribution"),
    ],
)
def test_rejections_name_the_spec_field(obj: shell.SowObject, field: str) -> None:
    adv = shell.advance(Ledger.empty(PARAMS, CAPS), 0, [obj], [obj], {})
    assert adv.ledger.sows == ()
    assert adv.rejected[obj.key].field == field
    status = shell.rejected_status(obj, adv.rejected[obj.key])
    assert status["phase"] == "Rejected"
    assert status["conditions"][0]["message"].startswith(f"{field}: ")


def test_points_value_function_and_gang_shape() -> None:
    obj = sow_obj(
        "p",
        k=4,
        value={"points": [{"after": 2, "amount": 8.0}, {"after": 6, "amount": 2.0}]},
        template={
            "spec": {
                "containers": [
                    {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                ]
            }
        },
    )
    sow = shell.statement(obj, 0)
    # Linear between the points: v(4) halfway between 8 and 2.
    assert sow.value(4) == pytest.approx(5.0)
    job = shell.gang_template(obj, 0, "g")
    assert shell.gang_shape(job, 4, "nvidia.com/gpu") == (2, 2)
    with pytest.raises(shell.SowError) as info:
        shell.gang_shape(job, 3, "nvidia.com/gpu")
    assert info.value.field == "spec.concurrency"


def test_place_is_first_fit_and_all_or_nothing() -> None:
    gang = shell.Gang("j", "s", 0, "g", 0, pods=3, per_pod=2)
    free = {"a": 2, "b": 4, "c": 1}
    assert shell.place(gang, free, ["a", "b", "c"]) == ["a", "b", "b"]
    assert free == {"a": 0, "b": 0, "c": 1}
    assert shell.place(gang, free, ["a", "b", "c"]) is None
    assert free == {"a": 0, "b": 0, "c": 1}  # untouched when the gang does not fit


def test_round_clock() -> None:
    assert CLOCK.round_at(999.0) == 0
    assert CLOCK.round_at(1000.0 + 3 * 7) == 7
    assert CLOCK.round_at(CLOCK.start_of(9) - 1e-3) == 8


def test_arrival_annotation_moves_the_arrival_and_reveals_the_duration() -> None:
    base = sow_obj("late", k=1, points=[(0, 1, 0.5), (2, 3, 0.5)])
    revealed = replace(
        base,
        spec={**base.spec, "durationRevealed": True},
        annotations={shell.ANN_ARRIVALS: '{"0": [2, 3]}'},
    )
    adv = shell.advance(Ledger.empty(PARAMS, CAPS), 0, [revealed], [revealed], {})
    job = adv.ledger.jobs[0]
    # Not arrived at 0 (the annotation says 2); the plan key at 2 is (2, 3), which it plans.
    assert job.phase is Phase.PENDING
    ledger = adv.ledger
    for t in (1, 2):
        ledger = shell.advance(ledger, t, [], [revealed], {}).ledger
    job = ledger.jobs[0]
    entry = job.admission.plan.lookup((2, 3))
    assert entry is not None and entry.start is not None
    assert (job.arrival, job.signal, job.start) == (2, 3, entry.start)
    assert job.phase in (Phase.WAITING, Phase.RUNNING)


def test_an_arrival_outside_the_report_is_not_run() -> None:
    odd = replace(FIRST, annotations={shell.ANN_ARRIVALS: '{"0": 5}'})  # support: 2 or 8
    ledger = Ledger.empty(PARAMS, CAPS)
    for t in range(7):
        ledger = shell.advance(ledger, t, [odd] if t == 0 else [], [odd], {}).ledger
    assert ledger.jobs[0].phase is Phase.NOT_RUN and ledger.jobs[0].arrival == 5


def test_running_instance_that_can_no_longer_pay_is_cancelled_and_survives_a_restart() -> None:
    # No duration signal: 1 or 3 rounds (½ each) from its birth, worth 10 only if done within
    # 1 round. The plan starts it at once (the 1-round outcome pays); its pods run 3 rounds here,
    # so before its second round the earliest completion (elapsed 2) is worth 0 < its price:
    # the mechanism cancels it, charge 0, and the persisted status reads back the same.
    late = sow_obj("late", value={"deadline": 1, "amount": 10.0}, points=[(0, 1, 0.5), (0, 3, 0.5)])
    ledger = Ledger.empty(PARAMS, CAPS)
    first = shell.advance(ledger, 0, [late], [late], {})
    assert first.admitted == ["ns/late"] and first.ledger.job("ns/late#0").phase is Phase.RUNNING
    second = shell.advance(first.ledger, 1, [], [late], {})
    assert second.unprofitable == ["ns/late#0"] and second.evicted == []
    job = second.ledger.job("ns/late#0")
    assert (job.phase, job.start, job.finish, job.charge) == (Phase.CANCELLED, 0, 1, 0.0)
    assert job.unprofitable
    status = json.loads(json.dumps(shell.status_of(late, second.ledger, CLOCK, round_no=1)))
    assert status["instances"][0]["phase"] == "cancelled"
    rebuilt, _, _ = shell.rebuild(PARAMS, CAPS, [replace(late, status=status)])
    assert rebuilt.jobs == second.ledger.jobs and rebuilt.job("ns/late#0").unprofitable

"""The minimum run time: a gang placed afresh is not stopped or moved before ``min_run_s``.

Two identical one-GPU jobs share one one-GPU node (targets ½ each). Without a restart price
(Gavel's order) the realiser alternates them every round; the oracle is the rule applied by hand
to the round times: a gang that started at ``s`` may be stopped at a round ``t`` only when
``t − s ≥ min_run_s``. With 360 s rounds and ``min_run_s = 400``: the first gang starts at 0,
is 360 s old at 360 (kept), 720 s old at 720 (stopped); the second then starts at 720, is kept
at 1080 and stopped at 1440 — so the runner per round is ``X X Y Y X``, against ``X Y X Y X``
without the minimum.
"""

from __future__ import annotations

from tests.unit.one_gpu_helpers import ROUND
from tests.unit.one_gpu_helpers import apply_plan as _apply
from tests.unit.one_gpu_helpers import store_one_gpu_two_jobs as _store

from walras.core import cycle, history, policies


def _runners(min_run_s: float, rounds: int = 5) -> tuple[list[str], list[bool]]:
    store, state = _store(), cycle.CycleState()
    policy = policies.create("max-min-fairness")
    runners, held = [], []
    for n in range(rounds):
        now = n * ROUND
        plan = cycle.plan(
            state,
            policy,
            store.freeze(now=now),
            now=now,
            round_no=n + 1,
            options=cycle.CycleOptions(min_run_s=min_run_s),
        )
        [running] = [k[1] for k, jr in plan.realisation.jobs.items() if jr.group]
        runners.append(running)
        held.append(any(jr.held for jr in plan.realisation.jobs.values()))
        _apply(store, plan)
    return runners, held


def test_without_a_minimum_the_gangs_alternate_every_round() -> None:
    runners, held = _runners(0.0)
    x, y = runners[0], runners[1]
    assert x != y
    assert runners == [x, y, x, y, x]
    assert not any(held)


def test_a_gang_runs_at_least_the_minimum_before_it_is_stopped() -> None:
    runners, held = _runners(400.0)
    x = runners[0]
    y = "b" if x == "a" else "a"
    assert runners == [x, x, y, y, x]
    # Held at 360 and 1080 (360 s old), free to go at 720 and 1440 (720 s old).
    assert held == [False, True, False, True, False]


def test_a_minimum_below_the_round_changes_nothing() -> None:
    # Every gang is a whole round old at the next full round: 360 ≥ 300.
    assert _runners(300.0)[0] == _runners(0.0)[0]


def test_the_start_survives_an_operator_restart_through_the_record() -> None:
    hist = history.History()
    hist.advance(100.0)
    hist.run_in("v100", 1.0, 100.0, restarted=True, restart_s=10.0)
    assert hist.started_at == 100.0
    back = history.from_record(history.record(hist), rate=1.0)
    assert back.started_at == 100.0
    back.run_in("", 0.0, 500.0)  # stopped: no start any more
    assert back.started_at is None

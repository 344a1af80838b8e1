"""walras.core.notice: the gangs the next full round stops, known when this round is planned.

Two identical one-GPU jobs on one one-GPU node (``tests/unit/test_realise_min_run.py``). Oracles:
the rule by hand (without a minimum run time the running gang is stopped at the next round;
with ``min_run_s = 400`` and 360 s rounds, a gang started at ``s`` is stopped at the first round
``t`` with ``t − s ≥ 400``), and the next round itself when it is planned: every announced stop
happens at the announced time, and every gang it stops was announced.
"""

from __future__ import annotations

import pytest
from tests.unit.one_gpu_helpers import ROUND
from tests.unit.one_gpu_helpers import apply_plan as _apply
from tests.unit.one_gpu_helpers import store_one_gpu_two_jobs as _store

from walras.core import cycle, model, notice, policies


def _announced(min_run_s: float, rounds: int = 5) -> list[tuple[dict[model.JobKey, float], set]]:
    """Per round: the stops announced after planning it, and the gangs it actually stopped."""
    store, state = _store(), cycle.CycleState()
    policy = policies.create("max-min-fairness")
    options = cycle.CycleOptions(min_run_s=min_run_s)
    out = []
    for n in range(rounds):
        now = n * ROUND
        plan = cycle.plan(
            state, policy, store.freeze(now=now), now=now, round_no=n + 1, options=options
        )
        stopped = {k for k, jr in plan.realisation.jobs.items() if jr.preempted}
        out.append((notice.next_stops(plan, round_s=ROUND, options=options), stopped))
        _apply(store, plan)
    return out


@pytest.mark.parametrize("min_run_s", [0.0, 400.0])
def test_every_announced_stop_happens_then_and_every_stop_was_announced(
    min_run_s: float,
) -> None:
    rounds = _announced(min_run_s)
    for n in range(len(rounds) - 1):
        announced, _ = rounds[n]
        _, stopped_next = rounds[n + 1]
        assert set(announced) == stopped_next
        assert all(t == (n + 1) * ROUND for t in announced.values())


def test_the_minimum_run_time_delays_the_notice() -> None:
    # Without a minimum every round announces a stop; with 400 s, a gang started at 0 is held
    # at 360, so the stop is announced only after the round at 360 (for 720), and so on.
    assert [len(a) for a, _ in _announced(0.0)] == [1, 1, 1, 1, 1]
    assert [len(a) for a, _ in _announced(400.0)] == [0, 1, 0, 1, 0]


def test_a_gang_alone_is_never_announced() -> None:
    store, state = _store(), cycle.CycleState()
    store.delete("job", "ns", "b")
    policy = policies.create("max-min-fairness")
    for n in range(3):
        plan = cycle.plan(state, policy, store.freeze(now=n * ROUND), now=n * ROUND, round_no=n + 1)
        assert notice.next_stops(plan, round_s=ROUND) == {}
        _apply(store, plan)


def test_a_bad_round_length_is_refused() -> None:
    store, state = _store(), cycle.CycleState()
    policy = policies.create("max-min-fairness")
    plan = cycle.plan(state, policy, store.freeze(now=0.0), now=0.0, round_no=1)
    with pytest.raises(ValueError, match="round_s"):
        notice.next_stops(plan, round_s=0.0)

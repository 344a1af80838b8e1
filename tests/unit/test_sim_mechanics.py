"""Gavel's round mechanics on tiny cases worked out by hand (see each test's derivation).

Throughputs come from a hand-made table (``toy`` jobs at 2 steps/s on ``v100``) so the
arithmetic is exact; the policies are stand-ins with a known allocation (``sim_helpers``).
"""

from __future__ import annotations

import math

import pytest
from sim_helpers import TOY_TABLE, Constant, toy_trace

from walras.sim import engine
from walras.sim.config import SimConfig
from walras.sim.errors import PolicyError, SimInputError
from walras.sim.scenario import load_scenario
from walras.sim.trace import parse_trace


def _run(text: str, *, gpus: int = 1, per_node: int = 1, restart: float = 0.0) -> engine.SimResult:
    scenario = load_scenario(
        parse_trace(text, source="toy.trace"),
        cluster=f"v100={gpus}",
        gpus_per_node=str(per_node),
        throughputs=TOY_TABLE,
    )
    policy = Constant("max_min_fairness_perf", {"v100": 1.0})
    return engine.run(scenario.workload, scenario.cluster, policy, SimConfig(restart_s=restart))


def test_one_job_alone_takes_ceil_rounds() -> None:
    # 1000 steps at 2 steps/s, rounds of 360 s: round 1 runs int(2·360) = 720 steps and ends at
    # 360; round 2 runs the remaining 280 steps in 140 s, ending at 500. One GPU busy all along.
    result = _run(toy_trace((1000, 1, 0)))
    s = result.summary()
    assert s["makespan_s"] == 500.0
    assert s["avg_jct_s"] == 500.0
    assert s["utilization"] == 1.0
    assert s["rounds"] == 2
    assert s["restarts"] == 1  # the first dispatch only: round 2 keeps the same GPU


def test_late_arrival_counts_from_trace_and_gavel_round_start_quirk() -> None:
    # Arrival at 100 on an idle cluster: the clock jumps to 100 and round 1 runs 720 steps,
    # ending at 460; round 2 runs 280 steps, ending at 600, so JCT = 600 − 100 = 500. Gavel's
    # first round "starts" at 0 in its busy-time accounting, so the GPU counts as busy for
    # 460 + 140 = 600 s of the 600 s makespan: utilisation 1.0 although it idled for 100 s.
    s = _run(toy_trace((1000, 1, 100))).summary()
    assert s["makespan_s"] == 600.0
    assert s["avg_jct_s"] == 500.0
    assert s["utilization"] == 1.0


def test_restart_cost_on_alternating_jobs() -> None:
    # Two 1000-step jobs share one GPU; X = 10 s. Priorities alternate (A, B, A, B: after a round
    # the job that ran has received 3× the other's time; ties go to arrival order), so every
    # dispatch has a new GPU set and pays X: it runs int(2·350) = 700 steps and ends X later.
    #   R1 A: 700 steps, ends 350 + 10 = 360.   R2 B: 700, ends 720.
    #   R3 A: 300 left, ends 720 + 150 + 10 = 880 (A done).   R4 B: 300, ends 880 + 160 = 1040.
    result = _run(toy_trace((1000, 1, 0), (1000, 1, 0)), restart=10.0)
    assert result.tally.completion_s == [880.0, 1040.0]
    s = result.summary()
    assert s["restarts"] == 4
    assert s["makespan_s"] == 1040.0
    # Busy: 360 + 360 + 160 + 160 = 1040 (restart seconds count as busy): utilisation 1.
    assert s["utilization"] == 1.0


def test_no_restart_cost_alternating() -> None:
    # Same without X: R1 A 720 (ends 360), R2 B 720 (720), R3 A 280 (860), R4 B 280 (1000).
    result = _run(toy_trace((1000, 1, 0), (1000, 1, 0)))
    assert result.tally.completion_s == [860.0, 1000.0]
    assert result.summary()["avg_jct_s"] == 930.0


def test_gang_keeps_its_gpus_and_splits_steps() -> None:
    # A 2-GPU job of 1500 steps on one 2-GPU node: rounds of 720, 720, 60 steps (ends
    # 360 + 360 + 30 = 750), same GPUs throughout, so one restart; both GPUs busy 750 s.
    result = _run(toy_trace((1500, 2, 0)), gpus=2, per_node=2)
    s = result.summary()
    assert s["makespan_s"] == 750.0
    assert s["restarts"] == 1
    assert result.tally.gpu_busy_s == [750.0, 750.0]
    assert result.tally.gpu_seconds == [1500.0]


def test_failed_gang_quirk_drops_job_without_jct() -> None:
    # A 2-GPU job with 1 step left: each GPU's share is 1 // 2 = 0, so Gavel fails the micro-task
    # (no progress) every round; after 5 failures the job leaves with no JCT. Each round ends
    # 1 / 2 = 0.5 s after it starts: makespan 5 · 0.5 = 2.5 s, no busy time credited.
    result = _run(toy_trace((1, 2, 0)), gpus=2, per_node=2)
    s = result.summary()
    assert result.tally.failed == [True]
    assert s["avg_jct_s"] is None
    assert s["makespan_s"] == 2.5
    assert s["rounds"] == 5
    assert s["utilization"] == 0.0
    assert math.isnan(float(result.jct_s()[0]))


def test_job_that_fits_nowhere_is_an_input_error() -> None:
    with pytest.raises(SimInputError, match=r"toy.trace:1: field 7 \(scale_factor\)"):
        _run(toy_trace((10, 2, 0)), gpus=1)


def test_policy_sees_remaining_steps_and_age() -> None:
    # The second solve happens at the first reset after a completion: job 0 (720 steps) ends at
    # 360; job 1 (1000 steps, arrived at 0) ran nothing yet, so it has 1000 steps left, age 360.
    scenario = load_scenario(
        parse_trace(toy_trace((720, 1, 0), (1000, 1, 0)), source="toy.trace"),
        cluster="v100=1",
        throughputs=TOY_TABLE,
    )
    policy = Constant("max_min_fairness_perf", {"v100": 0.5})
    engine.run(scenario.workload, scenario.cluster, policy, SimConfig())
    second = policy.views[1]
    assert second.job_ids.tolist() == [1]
    assert second.num_steps_remaining.tolist() == [1000.0]
    assert second.times_since_start.tolist() == [360.0]
    assert second.type_names == ("v100",)


class _Broken:
    name = "max_min_fairness_perf"

    def allocate(self, view: object) -> object:
        raise ZeroDivisionError("boom")


def test_policy_failure_names_time_and_jobs() -> None:
    scenario = load_scenario(
        parse_trace(toy_trace((10, 1, 0), (10, 1, 0)), source="toy.trace"),
        cluster="v100=1",
        throughputs=TOY_TABLE,
    )
    with pytest.raises(PolicyError, match=r"failed at t=0.0 s with 2 active jobs: ZeroDiv"):
        engine.run(scenario.workload, scenario.cluster, _Broken(), SimConfig())

"""Hadar's makespan horizon (``walras.allocator.hadar.horizon``) and re-planned rounds.

Oracles: the fluid makespan LP solved independently with cvxpy (its own modelling of the same
constraints), hand-computed worked examples, and the utility formula for the urgency weights.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar import HadarInputs, Horizon, Hyperbolic, make_inputs, plan_round
from walras.allocator.hadar.horizon import SUPPORT_TOL, apply_horizon, fluid_makespan
from walras.allocator.hadar.prices import job_utility

HOUR = 3600.0


def cvxpy_makespan(
    thr: np.ndarray, gangs: np.ndarray, rem: np.ndarray, cap: np.ndarray, allowed: np.ndarray
) -> float:
    n, T = thr.shape
    dur = np.where(allowed, rem[:, None] / np.where(allowed, thr, 1.0), 0.0)
    x = cp.Variable((n, T), nonneg=True)
    t = cp.Variable()
    cons = (
        [cp.sum(x, axis=1) == 1, x[~allowed] == 0] if (~allowed).any() else [cp.sum(x, axis=1) == 1]
    )
    for r in range(T):
        cons.append(cp.sum(cp.multiply(x[:, r], dur[:, r] * gangs)) <= cap[r] * t)
    cons.append(cp.sum(cp.multiply(x, dur), axis=1) <= t)
    cp.Problem(cp.Minimize(t), cons).solve(solver=cp.CLARABEL)
    return float(t.value)


@pytest.mark.parametrize("seed", range(5))
def test_fluid_makespan_matches_cvxpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, T = 12, 3
    thr = rng.uniform(0.5, 5.0, (n, T))
    gangs = rng.choice([1, 2, 4], n).astype(np.int64)
    rem = rng.uniform(100.0, 10_000.0, n)
    cap = np.array([4.0, 8.0, 6.0])
    allowed = rng.random((n, T)) < 0.8
    allowed[np.arange(n), rng.integers(0, T, n)] = True  # every job has a type
    x, t_star = fluid_makespan(thr, gangs, rem, cap, allowed)
    assert t_star == pytest.approx(cvxpy_makespan(thr, gangs, rem, cap, allowed), rel=1e-5)
    # The returned x is feasible for the constraints at T*.
    dur = np.where(allowed, rem[:, None] / np.where(allowed, thr, 1.0), 0.0)
    assert np.allclose(x.sum(axis=1), 1.0, atol=1e-7)
    assert (x[~allowed] <= 1e-9).all()
    assert ((x * dur * gangs[:, None]).sum(axis=0) <= cap * t_star * (1 + 1e-7)).all()
    assert ((x * dur).sum(axis=1) <= t_star * (1 + 1e-7)).all()


def worked_example() -> HadarInputs:
    # Module docstring: one type, one node of 2 GPUs; 1-GPU jobs needing 10 h, 1 h and 1 h.
    return make_inputs(
        [[1.0], [1.0], [1.0]],
        [1, 1, 1],
        [10 * HOUR, 1 * HOUR, 1 * HOUR],
        [0],
        [2],
        utility=Hyperbolic(),
    )


def test_worked_example_long_job_is_critical_and_starts_first() -> None:
    inputs = worked_example()
    result = apply_horizon(inputs, Horizon(), np.zeros(3, dtype=bool))
    # T* = max(10 h alone, 12 GPU-hours / 2 GPUs = 6 h) = 10 h; H = 10.5 h, critical below
    # 1.05 h of slack: the 10 h job (0.5 h) only.
    assert result.t_star == pytest.approx(10 * HOUR, rel=1e-6)
    assert result.critical.tolist() == [True, False, False]
    # Shortest-first alone (Hyperbolic) runs the two 1 h jobs first: TTD 11 h. With the horizon
    # the 10 h job starts now (TTD 10 h), next to one short job.
    plain = plan_round(inputs, preempt=True, backfill=True)
    assert sorted(p.job for p in plain.jobs) == [1, 2]
    guarded = plan_round(inputs, preempt=True, backfill=True, horizon=Horizon())
    assert sorted(p.job for p in guarded.jobs) == [0, 1]


def test_critical_weight_sets_the_per_gpu_utility_level() -> None:
    inputs = worked_example()
    opts = Horizon(margin=0.05, window=0.1, boost=2.0)
    result = apply_horizon(inputs, opts, np.zeros(3, dtype=bool))
    out = result.inputs
    # Slack of the 10 h job: 10 h · 1.05 − 10 h = 0.5 h, w = 0.1 · 10.5 h; level = boost +
    # (w − slack) / w.
    level = 2.0 + (1.05 - 0.5) / 1.05
    tau = inputs.restart_seconds + 10 * HOUR
    per_gpu = job_utility(out, np.array([0]), np.array([tau]))[0] / 1.0
    assert per_gpu == pytest.approx(level, rel=1e-9)
    # Non-critical jobs keep their weight.
    assert out.weight[1:].tolist() == [1.0, 1.0]


def test_eligible_types_are_the_lp_support() -> None:
    # Two types; job 0 is 10× faster on type 0, job 1 is equally fast on both. The LP puts job 0
    # on type 0 only; every eligible type is one with positive throughput.
    inputs = make_inputs([[10.0, 1.0], [1.0, 1.0]], [1, 1], [36_000.0, 3_600.0], [0, 1], [1, 1])
    result = apply_horizon(inputs, Horizon(), np.zeros(2, dtype=bool))
    x, _ = fluid_makespan(
        inputs.throughput,
        inputs.replicas,
        inputs.remaining,
        np.array([1.0, 1.0]),
        inputs.throughput > 0,
    )
    assert result.eligible.tolist() == (x > SUPPORT_TOL).tolist()
    assert result.eligible[0].tolist() == [True, False]
    assert (result.inputs.throughput[~result.eligible] == 0).all()


def test_skipped_jobs_keep_every_type() -> None:
    inputs = make_inputs([[10.0, 1.0], [1.0, 1.0]], [1, 1], [36_000.0, 3_600.0], [0, 1], [1, 1])
    result = apply_horizon(inputs, Horizon(), np.array([True, False]))
    assert result.inputs.throughput[0].tolist() == [10.0, 1.0]
    assert not result.critical[0]


def test_preempted_round_keeps_a_running_job_on_its_nodes() -> None:
    # The job runs on node 0 and is still first in the queue: re-planning keeps its pods.
    inputs = make_inputs(
        [[1.0], [1.0]],
        [1, 1],
        [HOUR, 5 * HOUR],
        [0, 0],
        [1, 1],
        current=[[1, 0], [0, 0]],
        utility=Hyperbolic(),
    )
    plan = plan_round(inputs, preempt=True, backfill=True, horizon=Horizon())
    first = plan.job(0)
    assert first is not None and first.kept and first.placement == ((0, 1),)


@pytest.mark.parametrize(
    "kw",
    [{"margin": -0.1}, {"window": 0.0}, {"window": 1.5}, {"boost": 1.0}, {"margin": float("nan")}],
)
def test_horizon_options_are_checked(kw: dict[str, float]) -> None:
    with pytest.raises(InvalidProblem):
        Horizon(**kw)


def test_among_makespan_optimal_plans_the_fewest_gpu_seconds_win() -> None:
    # Job 0 (10 h alone) sets T* = 10 h; job 1 (1 h on type 0, 2 h on type 1) fits anywhere
    # within T*, so T alone does not choose. Fewest GPU-seconds: type 0 (3,600 s + restart).
    thr = np.array([[1.0, 1.0], [2.0, 1.0]])
    rem = np.array([10 * HOUR, 2 * HOUR])
    allowed = np.ones((2, 2), dtype=bool)
    x, t_star = fluid_makespan(thr, np.array([1, 1]), rem, np.array([1.0, 1.0]), allowed)
    assert t_star == pytest.approx(10 * HOUR, rel=1e-9)
    assert x[1].tolist() == pytest.approx([1.0, 0.0], abs=1e-7)


def test_a_running_job_stays_on_its_type_when_moving_gains_less_than_the_restart() -> None:
    # Job 1 is 0.1 % faster on type 0: 3.6 s saved over its hour, less than a 10 s restart. It
    # runs on type 1 and stays; a job running nowhere pays the restart anywhere and takes type 0.
    thr = np.array([[1.0, 1.0], [1.001, 1.0]])
    rem = np.array([10 * HOUR, 1 * HOUR])
    allowed = np.ones((2, 2), dtype=bool)
    gangs, cap = np.array([1, 1]), np.array([1.0, 1.0])
    on = np.array([[False, False], [False, True]])
    x, _ = fluid_makespan(thr, gangs, rem, cap, allowed, running_on=on, restart_seconds=10.0)
    assert x[1].tolist() == pytest.approx([0.0, 1.0], abs=1e-7)
    x, _ = fluid_makespan(thr, gangs, rem, cap, allowed, restart_seconds=10.0)
    assert x[1].tolist() == pytest.approx([1.0, 0.0], abs=1e-7)

"""Tests for HadarE's equal-finish split (``walras.allocator.hadar.endgame.finish_together``).

Oracle: the earliest finish time by brute force over the subsets of copies that work. A subset
``S`` working from its starts does ``W`` by ``T_S = (W + Σ_S r s) / Σ_S r``, valid when every member
has started by then (``T_S ≥ max_S s``); the true finish is the smallest valid ``T_S`` (any valid
subset does at least ``W`` by its ``T_S``, and the set of copies started by the true finish is a
valid subset with ``T_S`` equal to it). The split itself is checked by its defining property:
every copy that gets work ends at ``T``, the others start at or after ``T``.

The end game's fluid plan (``HorizonResult.share``) and the per-node copy limit of the forking LP
are checked against LPs solved by hand and an independent cvxpy model.
"""

from __future__ import annotations

import itertools

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar import Horizon, InverseSlowdown, make_inputs, plan_round
from walras.allocator.hadar.endgame import finish_together
from walras.allocator.hadar.horizon import apply_horizon, fluid_makespan


def brute_force_finish(rates: list[float], starts: list[float], work: float) -> float:
    best = np.inf
    copies = [c for c in range(len(rates)) if rates[c] > 0]
    for size in range(1, len(copies) + 1):
        for subset in itertools.combinations(copies, size):
            r = sum(rates[c] for c in subset)
            t = (work + sum(rates[c] * starts[c] for c in subset)) / r
            if t >= max(starts[c] for c in subset) - 1e-12:
                best = min(best, t)
    return best


def test_worked_example() -> None:
    # Module docstring: kept copy 3/s from 0, new copy 1/s from 10, 130 units: T = 35.
    t, steps = finish_together([3.0, 1.0], [0.0, 10.0], 130.0)
    assert t == pytest.approx(35.0)
    assert steps.tolist() == pytest.approx([105.0, 25.0])


def test_a_copy_that_would_start_after_the_others_finish_gets_nothing() -> None:
    # 3/s from 0 does 20 units by 20/3 s < 10 s, before the second copy's restart ends.
    t, steps = finish_together([3.0, 1.0], [0.0, 10.0], 20.0)
    assert t == pytest.approx(20.0 / 3.0)
    assert steps.tolist() == pytest.approx([20.0, 0.0])


def test_same_start_is_the_split_by_rates() -> None:
    t, steps = finish_together([3.0, 2.0, 1.0], [10.0, 10.0, 10.0], 600.0)
    assert t == pytest.approx(110.0)
    assert steps.tolist() == pytest.approx([300.0, 200.0, 100.0])


@settings(max_examples=200, deadline=None)
@given(
    copies=st.lists(
        st.tuples(
            st.one_of(st.just(0.0), st.floats(0.01, 50.0, allow_nan=False)),
            st.sampled_from([0.0, 10.0, 30.0, 200.0]),
        ),
        min_size=1,
        max_size=6,
    ),
    work=st.floats(0.0, 1e5, allow_nan=False),
)
def test_against_brute_force(copies: list[tuple[float, float]], work: float) -> None:
    rates = [r for r, _ in copies]
    starts = [s for _, s in copies]
    if work > 0 and not any(r > 0 for r in rates):
        with pytest.raises(InvalidProblem):
            finish_together(rates, starts, work)
        return
    t, steps = finish_together(rates, starts, work)
    assert steps.sum() == pytest.approx(work, rel=1e-12, abs=1e-9)
    assert (steps >= -1e-9).all()
    if work == 0:
        assert steps.tolist() == [0.0] * len(rates)
        return
    assert t == pytest.approx(brute_force_finish(rates, starts, work), rel=1e-9)
    scale = max(1.0, t)
    for r, s, x in zip(rates, starts, steps, strict=True):
        if x > 1e-9 * work:
            assert s + x / r == pytest.approx(t, rel=1e-9, abs=1e-9 * scale)  # ends at T
        elif r > 0:
            assert s >= t - 1e-9 * scale  # it would start only when the others are done


@pytest.mark.parametrize(
    ("rates", "starts", "work", "field"),
    [
        ([1.0], [0.0], -1.0, "work"),
        ([1.0], [0.0], float("nan"), "work"),
        ([-1.0], [0.0], 1.0, "rates"),
        ([1.0], [float("inf")], 1.0, "starts"),
        ([0.0], [0.0], 1.0, "rates"),
        ([1.0, 2.0], [0.0], 1.0, "rates"),
    ],
)
def test_invalid_inputs_name_the_field(
    rates: list[float], starts: list[float], work: float, field: str
) -> None:
    with pytest.raises(InvalidProblem) as err:
        finish_together(rates, starts, work)
    assert err.value.field == field


# ---------------------------------------------------------------------------------------------
# The fluid plan the end game follows (``HorizonResult.share``) and the per-node copy limit
# ---------------------------------------------------------------------------------------------


def test_share_is_each_jobs_average_gpus_of_the_fluid_plan() -> None:
    # One type, 2 one-GPU nodes; two forked jobs needing 10 h and 2 h alone. Copies run in
    # parallel, so T* = 12 GPU-hours / 2 GPUs = 6 h (each job's copies are on 2 nodes at most,
    # 10 h ≤ 2 × 6 h), and the fluid plan gives them 10/6 and 2/6 GPUs on average.
    hour = 3600.0
    inputs = make_inputs([[1.0], [1.0]], [1, 1], [10 * hour, 2 * hour], [0, 0], [1, 1])
    forked = np.ones(2, dtype=bool)
    result = apply_horizon(inputs, Horizon(), np.zeros(2, dtype=bool), forked=forked)
    assert result.t_star == pytest.approx(6 * hour)
    assert result.share[:, 0].tolist() == pytest.approx([10 / 6, 2 / 6])


def cvxpy_parallel_makespan(
    thr: np.ndarray, rem: np.ndarray, cap: np.ndarray, copies: np.ndarray
) -> float:
    """The forking LP modelled independently: 1-GPU jobs, copies in parallel, at most
    ``copies_jr`` of them on type ``r`` at once."""
    n, T = thr.shape
    dur = rem[:, None] / thr
    x = cp.Variable((n, T), nonneg=True)
    t = cp.Variable()
    cons = [cp.sum(x, axis=1) == 1]
    cons += [cp.sum(cp.multiply(x[:, r], dur[:, r])) <= cap[r] * t for r in range(T)]
    cons += [cp.multiply(x, dur) <= copies * t]
    cp.Problem(cp.Minimize(t), cons).solve(solver=cp.CLARABEL)
    return float(t.value)


@pytest.mark.parametrize("seed", range(4))
def test_fluid_makespan_with_copy_limits_matches_cvxpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, T = 6, 3
    thr = rng.uniform(0.5, 5.0, (n, T))
    rem = rng.uniform(1e3, 1e5, n)
    cap = np.array([4.0, 4.0, 12.0])  # 1, 1 and 3 nodes of 4 GPUs
    copies = np.tile([1.0, 1.0, 3.0], (n, 1))
    ones = np.ones(n, dtype=np.int64)
    par = np.ones(n, dtype=bool)
    allowed = np.ones((n, T), dtype=bool)
    _, t_free = fluid_makespan(thr, ones, rem, cap, allowed, parallel=par)
    x, t_star = fluid_makespan(thr, ones, rem, cap, allowed, parallel=par, copies=copies)
    assert t_star == pytest.approx(cvxpy_parallel_makespan(thr, rem, cap, copies), rel=1e-5)
    assert t_star >= t_free * (1 - 1e-9)  # one more constraint never shortens the plan
    dur = rem[:, None] / thr
    assert (x * dur <= copies * t_star * (1 + 1e-7) + 1e-6).all()


def test_end_game_spare_node_follows_the_fluid_plan() -> None:
    # Nodes: one A, two B (one GPU each). Job 0 does 1/s on A, 3/s on B, 21,600 steps left (7,200 s
    # on one B); job 1 does 6/s on A, 1/s on B, 64,800 left (10,800 s on A, 64,800 s on B).
    # The forking LP by hand: A alone cannot take all of job 1 by T, so with x = job 1's part on A
    #   10,800 x = T,   64,800 (1 − x) + 7,200 = 2 T   ⇒   T* = 9,000 s, x = 5/6,
    # and both types are saturated, so the plan is unique: job 0 holds 7,200 / 9,000 = 0.8 B GPUs
    # on average, job 1 1.0 A and 10,800 / 9,000 = 1.2 B. Two jobs on three nodes is the end game:
    # each job runs one gang, and the spare B node goes to job 1, the job below its B share.
    inputs = make_inputs(
        [[1.0, 3.0], [6.0, 1.0]],
        [1, 1],
        [21_600.0, 64_800.0],
        [0, 1, 1],
        [1, 1, 1],
        forkable=[True, True],
        utility=InverseSlowdown(),
    )
    forked = np.ones(2, dtype=bool)
    plan = apply_horizon(inputs, Horizon(), np.zeros(2, dtype=bool), forked=forked)
    assert plan.t_star == pytest.approx(9_000.0)
    assert plan.share.tolist() == [pytest.approx([0.0, 0.8]), pytest.approx([1.0, 1.2])]
    result = plan_round(inputs, fork_jobs=True, horizon=Horizon())
    first, second = result.job(0), result.job(1)
    assert first is not None and second is not None
    assert [k for k, _ in first.placement] in ([1], [2])
    assert sorted(k for k, _ in second.placement) == sorted({0, 1, 2} - {first.placement[0][0]})

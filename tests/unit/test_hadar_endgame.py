"""Tests for HadarE's equal-finish split (``walras.allocator.hadar.endgame.finish_together``).

Oracle: the earliest finish time by brute force over the subsets of copies that work. A subset
``S`` working from its starts does ``W`` by ``T_S = (W + Σ_S r s) / Σ_S r``, valid when every member
has started by then (``T_S ≥ max_S s``); the true finish is the smallest valid ``T_S`` (any valid
subset does at least ``W`` by its ``T_S``, and the set of copies started by the true finish is a
valid subset with ``T_S`` equal to it). The split itself is checked by its defining property:
every copy that gets work ends at ``T``, the others start at or after ``T``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar.endgame import finish_together


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
        if x > 1e-9 * max(1.0, work):
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

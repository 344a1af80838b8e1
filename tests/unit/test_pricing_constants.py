"""Constant per-job parameters (one number, stride 0) and the block-wise scaled throughputs.

A default or scalar demand, weight, target or exponent is stored as a read-only stride-0 view
(``problem._constant``) instead of n copies: the problem must behave exactly as with the same
values spelled out per job, and screening must still name every job a bad constant affects.
"""

from __future__ import annotations

import numpy as np
import pytest
from pricing_helpers import assert_feasible, cvxpy_optimum

from walras.allocator import pricing
from walras.allocator.errors import InvalidProblem
from walras.allocator.pricing import subproblem


def test_defaults_and_scalars_are_read_only_per_job_arrays() -> None:
    problem = pricing.PricingProblem(np.ones((5, 2)), [2.0, 2.0], weight=3.0, alpha=0.5)
    for name, value in (("demand", 1.0), ("weight", 3.0), ("target", 0.0), ("alpha", 0.5)):
        arr = getattr(problem, name)
        assert arr.shape == (5,) and arr.dtype == np.float64
        assert not arr.flags.writeable
        assert np.all(arr == value)
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1.0
    # Indexing gives ordinary arrays (subset, POP shards, samples).
    sub = problem.subset([0, 3])
    assert np.array_equal(sub.weight, [3.0, 3.0]) and sub.weight.flags.c_contiguous


@pytest.mark.parametrize("kind", ["log", "alpha", "target", "linear"])
def test_constants_solve_like_the_same_values_spelled_out(kind: str) -> None:
    """The solver sees the same numbers either way, so both runs return the same allocation."""
    rng = np.random.default_rng(7)
    n, m = 300, 3
    A = rng.uniform(0.05, 1.0, size=(n, m))
    R = np.array([40.0, 70.0, 90.0])
    scalars = {"weight": 2.0, "target": 0.3, "alpha": 3.0}
    spelled = {k: np.full(n, v) for k, v in scalars.items()}
    a = pricing.solve(pricing.PricingProblem(A, R, kind=kind, **scalars))
    b = pricing.solve(pricing.PricingProblem(A, R, kind=kind, demand=np.ones(n), **spelled))
    assert a.iterations == b.iterations
    np.testing.assert_array_equal(a.allocation, b.allocation)
    np.testing.assert_array_equal(a.prices, b.prices)


def test_constant_weight_log_reaches_the_cvxpy_optimum() -> None:
    """An independent oracle on the constant path (the polish reads the weight of its jobs)."""
    rng = np.random.default_rng(3)
    n, m = 400, 4
    problem = pricing.PricingProblem(
        rng.uniform(0.05, 1.0, size=(n, m)), rng.uniform(0.1, 0.5, size=m) * n / m, weight=1.5
    )
    result = pricing.solve(problem, eps=1e-4)
    assert_feasible(problem, result.allocation)
    optimum = cvxpy_optimum(problem)
    # The certificate says U(X) ≥ U* − gap; gap ≤ eps·n by convergence. cvxpy's own tolerance
    # (~1e-6 relative) is far below eps·n = 0.04.
    assert result.converged
    assert result.utility <= optimum + 1e-6 * n
    assert result.utility >= optimum - 1e-4 * n - 1e-6 * n


def test_bad_constant_is_reported_for_every_job() -> None:
    problem = pricing.PricingProblem(np.ones((4, 2)), [2.0, 2.0], weight=-1.0)
    issues = pricing.screen_jobs(problem)
    assert [(i.index, i.field) for i in issues] == [(j, "weight") for j in range(4)]
    with pytest.raises(InvalidProblem, match="job 0") as info:
        pricing.solve(problem)
    assert info.value.field == "weight"


def test_target_and_alpha_of_other_kinds_are_not_checked() -> None:
    """Only target jobs need a valid target, only α-fair jobs a valid exponent."""
    A = np.ones((3, 2))
    problem = pricing.PricingProblem(A, [2.0, 2.0], kind="log", target=-1.0, alpha=1.0)
    assert pricing.screen_jobs(problem) == ()
    mixed = pricing.PricingProblem(
        A, [2.0, 2.0], kind=["log", "alpha", "target"], target=-1.0, alpha=1.0
    )
    assert [(i.index, i.field) for i in pricing.screen_jobs(mixed)] == [
        (1, "alpha"),
        (2, "target"),
    ]


def test_scaled_throughput_matches_the_whole_array_formula() -> None:
    """Block by block (several blocks here) equals s[lo]·y_lo + s[hi]·y_hi, with s[−1] = 0."""
    rng = np.random.default_rng(1)
    n, m = 2 * subproblem.SCALE_BLOCK + 17, 4
    lo = rng.integers(-1, m, n).astype(np.int8)
    hi = rng.integers(-1, m, n).astype(np.int8)
    y_lo, y_hi = rng.random(n), rng.random(n)
    scale = np.array([1.0, 0.5, 0.25, 0.9])
    s_ext = np.append(scale, 0.0)
    expected = s_ext[lo.astype(np.int64)] * y_lo + s_ext[hi.astype(np.int64)] * y_hi
    got = subproblem.scaled_throughput(lo, hi, y_lo, y_hi, scale)
    np.testing.assert_array_equal(got, expected)
    assert np.all(got[(lo < 0) & (hi < 0)] == 0.0)

"""The solver runs OpenBLAS single-threaded and restores the caller's setting (blas_threads)."""

from __future__ import annotations

import numpy as np
import pytest
from pricing_helpers import assert_feasible, random_problem

from walras.allocator import pricing
from walras.allocator.errors import InvalidProblem
from walras.allocator.pricing import blas_threads


def test_one_blas_thread_inside_and_restored_after() -> None:
    before = blas_threads.thread_counts()
    with blas_threads.one_blas_thread():
        inside = blas_threads.thread_counts()
        assert all(c == 1 for c in inside)
        assert len(inside) == len(before)
    assert blas_threads.thread_counts() == before


def test_restored_when_the_solve_raises() -> None:
    before = blas_threads.thread_counts()
    bad = pricing.PricingProblem(np.array([[np.nan, 1.0]]), [1.0, 1.0])
    with pytest.raises(InvalidProblem):
        pricing.solve(bad)
    assert blas_threads.thread_counts() == before


def test_solution_does_not_depend_on_the_blas_setting() -> None:
    """Same prices and allocation with one thread forced outside as inside the solve."""
    problem = random_problem(np.random.default_rng(4), 3000, 4)
    a = pricing.solve(problem)
    with blas_threads.one_blas_thread():
        b = pricing.solve(problem)
    assert_feasible(problem, a.allocation)
    np.testing.assert_array_equal(a.prices, b.prices)
    np.testing.assert_array_equal(a.allocation, b.allocation)


def test_two_kernel_threads_give_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked evaluation on two threads is bit-identical to one thread (chunk-order sums)."""
    from walras.allocator.pricing import solver

    problem = random_problem(np.random.default_rng(5), 40_000, 3, per_type_demand=True)
    monkeypatch.setattr(solver, "THREADS", 1)
    one = pricing.solve(problem)
    monkeypatch.setattr(solver, "THREADS", 2)
    two = pricing.solve(problem)
    assert_feasible(problem, two.allocation)
    assert one.iterations == two.iterations
    np.testing.assert_array_equal(one.prices, two.prices)
    np.testing.assert_array_equal(one.allocation, two.allocation)
    assert one.utility == two.utility and one.dual_bound == two.dual_bound

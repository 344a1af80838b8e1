"""The solver runs BLAS single-threaded and restores the caller's setting (one_blas_thread).

The thread counts are read with threadpoolctl's ``threadpool_info``, which lists every loaded BLAS
afresh (not through the solver's cached controller).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from pricing_helpers import assert_feasible, random_problem
from threadpoolctl import threadpool_info, threadpool_limits

from walras.allocator import pricing
from walras.allocator.errors import InvalidProblem
from walras.allocator.pricing.solver import one_blas_thread


def thread_counts() -> dict[str, int]:
    """Every loaded BLAS library's thread count, by file."""
    return {
        lib["filepath"]: lib["num_threads"]
        for lib in threadpool_info()
        if lib["user_api"] == "blas"
    }


@pytest.fixture
def two_blas_threads() -> Iterator[None]:
    """Two threads per BLAS outside, so that "restored" differs from "one" on any machine."""
    with threadpool_limits(limits=2, user_api="blas"):
        yield


@pytest.mark.usefixtures("two_blas_threads")
def test_one_blas_thread_inside_and_restored_after() -> None:
    before = thread_counts()
    assert before, "numpy and scipy each load a BLAS"
    with one_blas_thread():
        inside = thread_counts()
        assert set(inside) == set(before)
        assert all(c == 1 for c in inside.values())
    assert thread_counts() == before


@pytest.mark.usefixtures("two_blas_threads")
def test_restored_when_the_solve_raises() -> None:
    before = thread_counts()
    bad = pricing.PricingProblem(np.array([[np.nan, 1.0]]), [1.0, 1.0])
    with pytest.raises(InvalidProblem):
        pricing.solve(bad)
    assert thread_counts() == before


def test_solution_does_not_depend_on_the_blas_setting() -> None:
    """Same prices and allocation with one thread forced outside as inside the solve."""
    problem = random_problem(np.random.default_rng(4), 3000, 4)
    a = pricing.solve(problem)
    with one_blas_thread():
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

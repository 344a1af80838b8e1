"""The price-discovery paper's §6.2 shape at n = 1e5 (the paper reports n = 1e6; same shape).

Log utility: ≤ 20 iterations, ~17 % of jobs on two types, ~18 % with idle time.
Target-priority (T = 0.2, w ∈ {1, 2}): > 95 % of jobs reach the target, nearly all w = 2 jobs.
"""

from __future__ import annotations

import numpy as np
import pytest
from pricing_helpers import assert_feasible

from walras.allocator import pricing
from walras.allocator.pricing.instances import paper_problem

N = 100_000


@pytest.mark.slow
def test_log_utility_shape() -> None:
    problem = paper_problem(N, seed=0, utility="log")
    result = pricing.solve(problem)
    assert result.converged
    assert result.iterations <= 20
    assert_feasible(problem, result.allocation)
    # The paper describes the optimum. A gap of 1e-3 per job admits allocations of another
    # shape (the elastic-job polish certifies one with 13.6 % of jobs on two types); solve to
    # 1e-4 so that the allocation is close to the optimum.
    result = pricing.solve(problem, eps=1e-4)
    assert result.converged
    assert_feasible(problem, result.allocation)
    X = result.allocation
    # Column scaling leaves a sliver of idle time everywhere; count what is visible at 1e-3.
    two = float(((X > 1e-3).sum(axis=1) == 2).mean())
    idle = float((X.sum(axis=1) < 1 - 1e-3).mean())
    assert 0.15 <= two <= 0.19
    assert 0.16 <= idle <= 0.20
    assert ((X > 1e-9).sum(axis=1) <= 2).all()


@pytest.mark.slow
def test_target_priority_shape() -> None:
    problem = paper_problem(N, seed=0, utility="target")
    # The paper describes the optimum; solve to 1e-5 so that the allocation is close to it.
    result = pricing.solve(problem, eps=1e-5, max_iter=200)
    assert result.converged
    assert_feasible(problem, result.allocation)
    t = result.throughput
    w = np.asarray(problem.weight)
    meet = t >= 0.2 * (1 - 1e-3)
    assert meet.mean() > 0.95
    assert meet[w == 2].mean() > 0.99
    assert 0.85 <= meet[w == 1].mean() < 0.97  # the paper: about 10 % of w = 1 jobs miss it


def test_generator_matches_section_6_2() -> None:
    problem = paper_problem(20_000, seed=3, utility="target")
    A = np.asarray(problem.throughput)
    assert A.shape == (20_000, 4)
    assert (A.min(axis=0) >= [0.1, 0.1, 0.3, 0.6]).all()
    assert (A.max(axis=0) <= [0.3, 0.5, 0.8, 1.0]).all()
    np.testing.assert_allclose(problem.capacity, np.array([8e5, 1e5, 1e4, 1e3]) * 0.02)
    assert set(np.unique(problem.weight)) == {1.0, 2.0}
    assert abs(float((np.asarray(problem.weight) == 2).mean()) - 0.5) < 0.02
    assert (np.asarray(problem.target) == 0.2).all()
    again = paper_problem(20_000, seed=3, utility="target")
    np.testing.assert_array_equal(again.throughput, problem.throughput)

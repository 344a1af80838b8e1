"""TDM through Fisher-market prices (``fairness.market``) against cvxpy, the sweeps, Theorem 2."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.fairness_helpers import eisenberg_gale_totals, paper_problem, random_problem

from walras.allocator.fairness import FairnessProblem, certificate, monopoly_tasks, solve
from walras.allocator.fairness.certificates import feasibility_violation


def _tied_problem(seed: int, K: int, N: int, shapes: int = 3) -> FairnessProblem:
    """Few distinct node shapes, so many nodes tie for a tenant (a degenerate market)."""
    rng = np.random.default_rng(seed)
    kinds = rng.uniform(4.0, 64.0, size=(shapes, 3))
    capacity = kinds[rng.integers(0, shapes, K)]
    demand = rng.choice([1.0, 2.0, 4.0], size=(N, 3))
    eligible = rng.random((N, K)) < 0.5
    eligible[np.arange(N), rng.integers(0, K, N)] = True
    weight = rng.choice([1.0, 2.0], size=N)
    return FairnessProblem(capacity=capacity, demand=demand, weight=weight, eligible=eligible)


@pytest.mark.parametrize("seed", range(4))
def test_market_agrees_with_eisenberg_gale_and_the_sweeps(seed: int) -> None:
    problem = random_problem(300 + seed, K=8, N=12, p_eligible=0.5)
    fast = solve(problem, mode="tdm", method="market")
    assert fast.method == "market" and fast.sweeps == 0 and fast.converged
    assert fast.certificate_violation <= 1e-9
    slow = solve(problem, mode="tdm", method="sweeps")
    assert slow.method == "sweeps"
    np.testing.assert_allclose(fast.totals, slow.totals, rtol=1e-7)
    np.testing.assert_allclose(fast.levels, slow.levels, rtol=1e-7)
    np.testing.assert_allclose(fast.totals, eisenberg_gale_totals(problem), rtol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_market_on_ties_is_exact_and_feasible(seed: int) -> None:
    problem = _tied_problem(seed, K=30, N=25)
    result = solve(problem, mode="tdm")
    assert result.method == "market"
    assert result.certificate_violation <= 1e-9
    tasks = np.asarray(result.tasks)
    assert feasibility_violation(problem, tasks, "tdm") <= 1e-12
    assert (tasks[monopoly_tasks(problem) <= 0] == 0).all()
    slow = solve(problem, mode="tdm", method="sweeps")
    np.testing.assert_allclose(result.totals, slow.totals, rtol=1e-6)


def test_market_reproduces_the_papers_split() -> None:
    # Users 1 and 2 tie on classes A and B; the maximum-entropy split is the paper's one.
    result = solve(paper_problem(), mode="tdm", method="market")
    assert result.method == "market"
    np.testing.assert_allclose(
        result.tasks,
        [[40, 170, 0, 0], [20, 85, 0, 0], [0, 0, 82.5, 0], [0, 0, 0, 27.5]],
        rtol=0,
        atol=1e-9,
    )


def test_binding_cap_falls_back_to_the_sweeps_and_stays_exact() -> None:
    problem = random_problem(310, K=6, N=9, p_eligible=0.6, caps=True)
    uncapped = solve(
        FairnessProblem(
            capacity=problem.capacity,
            demand=problem.demand,
            weight=problem.weight,
            eligible=problem.eligible,
        ),
        mode="tdm",
    )
    binds = bool((uncapped.totals > problem.caps).any())
    result = solve(problem, mode="tdm")
    assert result.method == ("sweeps" if binds else "market")
    assert result.converged and result.certificate_violation <= 1e-7
    assert (result.totals <= problem.caps * (1 + 1e-9)).all()
    np.testing.assert_allclose(result.totals, eisenberg_gale_totals(problem), rtol=1e-4)


def test_cap_that_does_not_bind_keeps_the_market_answer() -> None:
    problem = random_problem(311, K=5, N=6, p_eligible=0.6)
    loose = FairnessProblem(
        capacity=problem.capacity,
        demand=problem.demand,
        weight=problem.weight,
        eligible=problem.eligible,
        cap=np.asarray(solve(problem).totals) * 2.0,
    )
    result = solve(loose, mode="tdm")
    assert result.method == "market" and result.certificate_violation <= 1e-9
    np.testing.assert_allclose(result.totals, solve(problem).totals, rtol=1e-9)


def test_ineligible_tenant_and_idle_node_with_the_market() -> None:
    # Tenant 2 may run nowhere (lenient), so node 2 has no eligible tenant left.
    problem = FairnessProblem(
        capacity=np.array([[8.0, 64.0], [4.0, 32.0], [2.0, 16.0]]),
        demand=np.array([[1.0, 4.0], [2.0, 8.0], [16.0, 1.0]]),
        eligible=np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=bool),
    )
    result = solve(problem, mode="tdm", strict=False)
    assert result.method == "market"
    assert [n for n, _ in result.ineligible] == [2]
    assert (result.tasks[2] == 0).all() and (result.tasks[:, 2] == 0).all()
    assert certificate(problem, np.asarray(result.tasks), "tdm") <= 1e-9


@pytest.mark.slow
def test_market_at_a_few_hundred_nodes_with_identical_shapes() -> None:
    problem = _tied_problem(7, K=200, N=150, shapes=4)
    result = solve(problem, mode="tdm")
    assert result.method == "market"
    assert result.certificate_violation <= 1e-9


def test_conjugate_gradient_newton_steps_give_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from walras.allocator.fairness import market

    problem = _tied_problem(11, K=40, N=30, shapes=3)
    dense = solve(problem, mode="tdm")
    monkeypatch.setattr(market, "DENSE_MAX_K", 0)  # every Newton step through CG
    cg = solve(problem, mode="tdm")
    assert dense.method == cg.method == "market"
    assert cg.certificate_violation <= 1e-9
    np.testing.assert_allclose(cg.totals, dense.totals, rtol=1e-9)

"""Distributed PS-DSF: node_update and the asynchronous agent simulation (PS-DSF §III-D).

Checks the settings documented in ``walras.allocator.fairness.distributed``: staggered agents
converge to the centralised answer (within 1e-3), damped simultaneous agents converge,
undamped simultaneous agents oscillate, and the agents re-converge after churn.
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.fairness_helpers import random_problem

from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness import (
    ChurnEvent,
    FairnessProblem,
    monopoly_tasks,
    node_update,
    simulate_async,
    solve,
)
from walras.allocator.fairness.problem import fit_counts
from walras.allocator.fairness.waterfill import tdm_fill


def _close(tasks: np.ndarray, reference: np.ndarray, gamma: np.ndarray) -> float:
    """Largest difference in node time share (scale-free)."""
    return float(np.max(np.abs(tasks - reference) / np.where(gamma > 0, gamma, 1.0)))


def _subproblem(
    problem: FairnessProblem, tenant_on: np.ndarray, node_on: np.ndarray
) -> FairnessProblem:
    return FairnessProblem(
        capacity=problem.capacity,
        demand=problem.demand,
        weight=problem.phi,
        eligible=problem.delta & node_on[None, :],
        cap=np.where(tenant_on, problem.caps, 0.0),
    )


@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_node_update_is_the_server_procedure_given_published_totals(mode: str) -> None:
    problem = random_problem(11, K=4, N=6)
    central = solve(problem, mode=mode)
    x = np.asarray(central.tasks)
    totals = x.sum(axis=1)
    for i in range(problem.shape[1]):
        # At the PS-DSF point every node's own update is a fixed point.
        col = node_update(
            problem.capacity[i],
            problem.demand,
            problem.phi,
            problem.delta[:, i],
            totals,
            x[:, i],
            mode=mode,
        )
        np.testing.assert_allclose(col, x[:, i], atol=1e-7 * max(1.0, x.max()))


def test_node_update_damping_and_stale_totals() -> None:
    problem = random_problem(12, K=3, N=4)
    prev = np.zeros(4)
    full = node_update(
        problem.capacity[0], problem.demand, problem.phi, problem.delta[:, 0], np.zeros(4), prev
    )
    half = node_update(
        problem.capacity[0],
        problem.demand,
        problem.phi,
        problem.delta[:, 0],
        np.zeros(4),
        prev,
        damping=0.5,
    )
    np.testing.assert_allclose(half, 0.5 * full)
    # Stale totals smaller than this node's own column: b is clipped at 0, no negative tasks.
    stale = node_update(
        problem.capacity[0], problem.demand, problem.phi, problem.delta[:, 0], np.zeros(4), full
    )
    assert (stale >= 0).all()
    with pytest.raises(InvalidProblem, match="damping"):
        node_update(
            problem.capacity[0],
            problem.demand,
            problem.phi,
            problem.delta[:, 0],
            np.zeros(4),
            prev,
            damping=0.0,
        )


def test_node_update_respects_caps_and_throughput() -> None:
    problem = random_problem(13, K=2, N=3)
    cap = np.array([0.5, np.inf, np.inf])
    col = node_update(
        problem.capacity[0],
        problem.demand,
        problem.phi,
        np.ones(3, bool),
        np.zeros(3),
        np.zeros(3),
        cap=cap,
        throughput_i=np.array([2.0, 1.0, 1.0]),
    )
    assert col[0] <= 0.5 + 1e-12
    gamma = fit_counts(problem.capacity, problem.demand)[:, 0] * np.array([2.0, 1.0, 1.0])
    assert abs((col / gamma).sum() - 1.0) <= 1e-9
    ref, _ = tdm_fill(gamma, problem.phi, np.zeros(3), cap)
    np.testing.assert_allclose(col, ref)


@pytest.mark.parametrize(("jitter", "damping"), [(0.2, 1.0), (0.1, 0.5), (0.0, "1/L")])
@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_async_agents_converge_to_the_central_answer(
    jitter: float, damping: object, mode: str
) -> None:
    problem = random_problem(3, K=5, N=6, p_eligible=0.6)
    gamma = np.asarray(monopoly_tasks(problem))
    theta = 1.0 / int((gamma > 0).sum(axis=1).max()) if damping == "1/L" else float(damping)  # type: ignore[arg-type]
    central = solve(problem, mode=mode)
    trace = simulate_async(problem, mode=mode, jitter=jitter, damping=theta, duration=300, seed=1)
    assert _close(trace.tasks, np.asarray(central.tasks), gamma) <= 1e-3
    assert trace.violation[-1] <= 1e-3
    assert trace.residual[-1] <= 1e-3


def test_simultaneous_undamped_agents_oscillate() -> None:
    problem = random_problem(3, K=5, N=6, p_eligible=0.6)
    trace = simulate_async(problem, jitter=0.0, damping=1.0, duration=100, keep_history=True)
    # Period-2 cycle: the allocation keeps jumping, two samples apart it repeats.
    assert trace.residual[-10:].min() >= 0.1
    assert trace.violation[-10:].min() >= 0.1
    np.testing.assert_allclose(trace.history[-1], trace.history[-3], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_agents_reconverge_after_tenant_and_node_churn(mode: str) -> None:
    problem = random_problem(5, K=5, N=6, p_eligible=0.7)
    gamma = np.asarray(monopoly_tasks(problem))
    events = [
        ChurnEvent(at=150.0, kind="tenant_leave", index=2),
        ChurnEvent(at=300.0, kind="tenant_join", index=2),
        ChurnEvent(at=450.0, kind="node_leave", index=1),
    ]
    trace = simulate_async(
        problem, mode=mode, jitter=0.2, damping=1.0, duration=600, events=events, keep_history=True
    )
    tenant_on = np.ones(6, bool)
    node_on = np.ones(5, bool)
    phases = [(149.0, tenant_on.copy(), node_on.copy())]
    tenant_on[2] = False
    phases.append((299.0, tenant_on.copy(), node_on.copy()))
    tenant_on[2] = True
    phases.append((449.0, tenant_on.copy(), node_on.copy()))
    node_on[1] = False
    phases.append((600.0, tenant_on.copy(), node_on.copy()))
    for at, t_on, n_on in phases:
        k = int(np.searchsorted(trace.times, at, side="right")) - 1
        central = solve(_subproblem(problem, t_on, n_on), mode=mode, strict=False)
        assert _close(trace.history[k], np.asarray(central.tasks), gamma) <= 1e-3, at
        assert trace.violation[k] <= 1e-3, at
    # Right after each change the old allocation is no longer PS-DSF for the new set.
    assert trace.violation[int(np.searchsorted(trace.times, 151.0))] > 1e-3

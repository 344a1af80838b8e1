"""One agent step (walras.agent.steps): best response, damping, refill, feasibility.

Oracles: the allocator's own ``fairness.node_update`` (the undamped best response), the node's
TDM/RDM feasibility, and the concurrency formula written out by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.agent import steps
from walras.allocator import fairness


def column(n: int = 3, *, seed: int = 0, eligible: np.ndarray | None = None) -> steps.Column:
    rng = np.random.default_rng(seed)
    return steps.Column(
        node_name="node-0",
        tenant_names=tuple(f"t{k}" for k in range(n)),
        capacity=np.array([8.0, 64.0, 512.0]),
        demand=np.stack(
            [rng.integers(1, 3, n), rng.integers(1, 16, n), rng.integers(1, 64, n)], 1
        ).astype(float),
        weight=rng.choice([1.0, 2.0], n),
        eligible=np.ones(n, bool) if eligible is None else eligible,
        cap=None,
        throughput=rng.uniform(0.5, 3.0, n),
    )


def totals(tasks: dict[str, float], nodes: dict[str, int] | None = None, period: float = 0.1):
    return steps.PublishedTotals(
        tasks=tasks, nodes=nodes or {}, period=period, source_version=1, iteration=1
    )


def time_share(col: steps.Column, tasks: dict[str, float]) -> float:
    gamma = col.gamma()
    return sum(tasks[n] / g for n, g in zip(col.tenant_names, gamma, strict=True) if g > 0)


def test_first_step_is_the_undamped_best_response() -> None:
    col = column()
    published = {"t0": 30.0, "t1": 5.0, "t2": 0.0}
    result = steps.agent_step(col, totals(published), {}, tau=1.0, first=True)
    best = fairness.node_update(
        col.capacity,
        col.demand,
        col.weight,
        col.eligible,
        np.array([30.0, 5.0, 0.0]),
        np.zeros(3),
        throughput_i=col.throughput,
    )
    assert result.damping == 1.0
    np.testing.assert_allclose([result.tasks[n] for n in col.tenant_names], best, rtol=1e-12)
    # TDM: the best response fills the node.
    assert time_share(col, result.tasks) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "nodes", "period", "tau", "expected"),
    [
        ("few nodes: no damping beyond theta0", {"t0": 2}, 0.1, 1.0, 0.5),
        ("20 nodes, 0.1 s publishes: c = 2", {"t0": 20, "t1": 3}, 0.1, 1.0, 0.25),
        ("100 nodes: c = 10", {"t0": 100}, 0.1, 1.0, 0.05),
        ("slow aggregator: c = K", {"t0": 20}, 2.0, 1.0, 0.5 / 20),
        ("tenant not eligible here does not count", {"t0": 1, "t9": 500}, 0.1, 1.0, 0.5),
    ],
)
def test_effective_damping_is_theta0_over_concurrency(
    name: str, nodes: dict[str, int], period: float, tau: float, expected: float
) -> None:
    col = column(n=2, eligible=np.array([True, True]))
    got = steps.effective_damping(0.5, col, totals({}, nodes, period), tau)
    assert got == pytest.approx(expected), name


def test_damped_step_is_a_convex_combination_without_refill() -> None:
    col = column()
    old = {"t0": 10.0, "t1": 1.0, "t2": 2.0}
    published = {"t0": 40.0, "t1": 30.0, "t2": 2.0}
    pt = totals(published, {"t0": 10, "t1": 10, "t2": 10}, period=0.2)  # c = 2
    undamped = steps.agent_step(col, pt, old, tau=1.0, first=True)
    damped = steps.agent_step(col, pt, old, tau=1.0, base_damping=0.5, refill=False)
    assert damped.damping == pytest.approx(0.25)
    for n in col.tenant_names:
        want = old[n] + 0.25 * (undamped.tasks[n] - old[n])
        assert damped.tasks[n] == pytest.approx(want, rel=1e-12)


def test_refill_uses_capacity_a_departed_tenant_left() -> None:
    col = column(n=2)
    best_alone = steps.agent_step(col, totals({}), {}, tau=1.0, first=True).tasks
    # t2 held half the node and left: the remaining tenants are refilled to a full node at once,
    # in the damped split.
    old = {"t0": best_alone["t0"] / 2, "t1": best_alone["t1"] / 2, "t2": 5.0}
    pt = totals({"t0": 100.0, "t1": 100.0}, {"t0": 50, "t1": 50}, period=0.1)
    result = steps.agent_step(col, pt, old, tau=1.0, base_damping=0.5)
    assert result.damping < 0.2
    assert time_share(col, result.tasks) == pytest.approx(1.0, rel=1e-9)
    assert "t2" not in result.tasks
    assert result.residual > 0


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(["tdm", "rdm"]),
    count=st.integers(1, 200),
)
def test_every_step_is_feasible_on_the_node(n: int, seed: int, mode: str, count: int) -> None:
    rng = np.random.default_rng(seed)
    col = column(n, seed=seed, eligible=rng.random(n) < 0.8)
    if mode == "rdm":
        # fairness.node_update's RDM fill counts x as pods (reported to its owner), so RDM is
        # checked without throughput tables, where work units and pods coincide.
        col = dataclasses.replace(col, throughput=np.ones(n))
    gamma = col.gamma()
    # A feasible previous allocation: random time shares summing to at most 1.
    shares = rng.dirichlet(np.ones(n)) * rng.uniform(0.0, 1.0)
    old_vec = np.where(col.eligible, shares * gamma, 0.0)
    if mode == "rdm":  # scale into the resource box
        per_work = col.demand / col.throughput[:, None]
        use = old_vec @ per_work
        old_vec = old_vec / max(1.0, float(np.max(use / col.capacity)))
    old = {
        t: float(v) for t, v, ok in zip(col.tenant_names, old_vec, col.eligible, strict=True) if ok
    }
    published = {t: float(v + rng.uniform(0, 100)) for t, v in old.items()}
    pt = totals(published, {t: count for t in col.tenant_names}, period=rng.uniform(0.01, 2.0))
    result = steps.agent_step(col, pt, old, tau=1.0, mode=mode)
    x = np.array([result.tasks.get(t, 0.0) for t in col.tenant_names])
    assert (x >= 0).all()
    assert (x[~col.eligible] == 0).all()
    if mode == "tdm":
        live = gamma > 0
        assert float(np.sum(x[live] / gamma[live])) <= 1.0 + 1e-9
    else:
        use = x @ (col.demand / col.throughput[:, None])
        assert (use <= col.capacity * (1 + 1e-9)).all()
    assert 0.0 < result.damping <= 1.0


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 100_000), n=st.integers(1, 8))
def test_max_scale_matches_bisection(seed: int, n: int) -> None:
    """The exact break-point walk of the refill against a plain bisection oracle."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 2.0, n) * (rng.random(n) < 0.9)
    ceiling = x * rng.uniform(1.0, 4.0, n)
    cost = rng.uniform(0.0, 1.0, n)
    budget = float(np.sum(x * cost)) * rng.uniform(1.0, 3.0)

    def value(s: float) -> float:
        return float(np.sum(np.minimum(s * x, ceiling) * cost))

    got = steps._max_scale(x, ceiling, cost, budget)
    s_hi = float(np.max(np.where(x > 0, ceiling / np.where(x > 0, x, 1.0), 1.0)))
    if value(s_hi) <= budget * (1 + 1e-12):
        assert got == float("inf") or value(got) <= budget * (1 + 1e-9)
        return
    lo, hi = 1.0, s_hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if value(mid) <= budget else (lo, mid)
    assert got == pytest.approx(lo, rel=1e-9)

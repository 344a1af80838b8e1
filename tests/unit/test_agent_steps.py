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
    damped = steps.agent_step(
        col, pt, old, tau=1.0, base_damping=0.5, refill=False, method="waterfill"
    )
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
    result = steps.agent_step(col, pt, old, tau=1.0, base_damping=0.5, method="waterfill")
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
    method=st.sampled_from(steps.METHODS),
)
def test_every_step_is_feasible_on_the_node(
    n: int, seed: int, mode: str, count: int, method: str
) -> None:
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
    result = steps.agent_step(col, pt, old, tau=1.0, mode=mode, method=method)
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


def _scaled_by_bisection(
    col: steps.Column, published: np.ndarray, old: np.ndarray, c: np.ndarray
) -> np.ndarray:
    """The scaled best response (TDM) written out: raise ℓ until the node's time is used, with
    x_n(ℓ) = max(0, ℓ φ_n γ_n − b'_n) / c_n and b'_n = x_n − c_n x_{n,i}; plain bisection."""
    gamma = col.gamma()
    live = col.eligible & (gamma > 0)
    b = published - c * old
    if not live.any():
        return np.zeros(len(gamma))

    def x_of(level: float) -> np.ndarray:
        return np.where(live, np.maximum(0.0, level * col.weight * gamma - b) / c, 0.0)

    def used(level: float) -> float:
        return float(np.sum(x_of(level)[live] / gamma[live]))

    lo, hi = 0.0, 1.0
    while used(hi) < 1.0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if used(mid) < 1.0 else (lo, mid)
    return x_of(hi)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 6), count=st.integers(1, 300))
def test_scaled_step_is_the_water_fill_of_concurrent_nodes(seed: int, n: int, count: int) -> None:
    """Oracle: the predicted-total water-fill by bisection, with c_n from the published node
    counts and period (τ = 1 s) capped at x_n / x_{n,i}."""
    rng = np.random.default_rng(seed)
    col = column(n, seed=seed, eligible=rng.random(n) < 0.8)
    gamma = col.gamma()
    old_vec = np.where(col.eligible, rng.dirichlet(np.ones(n)) * gamma, 0.0)
    published_vec = old_vec + rng.uniform(0.0, 50.0, n) * col.eligible
    names = col.tenant_names
    old = {t: float(v) for t, v, ok in zip(names, old_vec, col.eligible, strict=True) if ok}
    counts = {t: int(rng.integers(1, count + 1)) for t in names}
    period = float(rng.uniform(0.01, 1.5))
    pt = totals(dict(zip(names, published_vec.tolist(), strict=True)), counts, period=period)
    result = steps.agent_step(col, pt, old, tau=1.0, method="scaled")
    c = np.array([max(1.0, counts[t] * min(1.0, period)) for t in names])
    held = old_vec > 0
    c = np.maximum(
        1.0, np.where(held, np.minimum(c, published_vec / np.where(held, old_vec, 1)), c)
    )
    want = _scaled_by_bisection(col, published_vec, old_vec, c)
    got = np.array([result.tasks.get(t, 0.0) for t in names])
    scale = float(np.max(gamma[col.eligible], initial=1.0))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale)
    assert result.method == "scaled" and result.damping == 1.0


def test_scaled_step_keeps_the_central_solution() -> None:
    """The central PS-DSF allocation (fairness.solve) is a fixed point of every node's scaled
    step, whatever the concurrency: the agents converge to the central answer."""
    rng = np.random.default_rng(3)
    n_nodes, n = 6, 4
    capacity = np.stack(
        [
            rng.choice([4.0, 8.0], n_nodes),
            rng.choice([32.0, 64.0], n_nodes),
            np.full(n_nodes, 512.0),
        ],
        1,
    )
    demand = np.stack([np.ones(n), rng.integers(2, 16, n), rng.integers(8, 64, n)], 1).astype(float)
    weight = rng.choice([1.0, 2.0], n)
    eligible = rng.random((n, n_nodes)) < 0.8
    eligible[:, 0] = True
    throughput = rng.uniform(0.5, 3.0, (n, n_nodes))
    problem = fairness.FairnessProblem(
        capacity=capacity, demand=demand, weight=weight, eligible=eligible, throughput=throughput
    )
    solved = fairness.solve(problem, mode="tdm")
    assert solved.converged
    x = solved.tasks
    names = tuple(f"t{k}" for k in range(n))
    published = {t: float(v) for t, v in zip(names, x.sum(axis=1), strict=True)}
    for i in range(n_nodes):
        col = steps.Column(
            node_name=f"node-{i}",
            tenant_names=names,
            capacity=capacity[i],
            demand=demand,
            weight=weight,
            eligible=eligible[:, i],
            cap=None,
            throughput=throughput[:, i],
        )
        old = {t: float(x[k, i]) for k, t in enumerate(names) if eligible[k, i]}
        for count in (1, 10, 500):
            pt = totals(published, {t: count for t in names}, period=0.5)
            result = steps.agent_step(col, pt, old, tau=1.0, method="scaled")
            for t, v in old.items():
                assert result.tasks[t] == pytest.approx(v, rel=1e-6, abs=1e-6 * max(old.values()))


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

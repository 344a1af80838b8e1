"""The agents' write rule and pace (walras.agent.steps.negligible, Pace) and the simulator's
write latency.

Oracles: the rule's own bound written out by hand (ε x_n / K_n per node), the pace's update
rule written out by hand, ``fairness.solve`` (centralised Gauss–Seidel) for the fixed point and
the converged totals, and the simulator's event order for the latency.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from test_agent_dynamics import instance as dynamics_instance

from walras.agent import aggregator, runner, steps
from walras.agent import simulate as sim
from walras.allocator import fairness

TOL = 1e-3


def column(n: int = 3) -> steps.Column:
    rng = np.random.default_rng(0)
    return steps.Column(
        node_name="node-0",
        tenant_names=tuple(f"t{k}" for k in range(n)),
        capacity=np.array([8.0, 64.0, 512.0]),
        demand=np.stack(
            [rng.integers(1, 3, n), rng.integers(1, 16, n), rng.integers(1, 64, n)], 1
        ).astype(float),
        weight=np.ones(n),
        eligible=np.ones(n, bool),
        cap=None,
        throughput=rng.uniform(0.5, 3.0, n),
    )


def published(tasks: dict[str, float], nodes: dict[str, int]) -> steps.PublishedTotals:
    return steps.PublishedTotals(
        tasks=tasks, nodes=nodes, period=0.1, source_version=1, iteration=1
    )


def moved(old: dict[str, float], new: dict[str, float]) -> steps.StepResult:
    return steps.StepResult(
        tasks=new, pods=dict(new), eligible=tuple(sorted(new)), residual=0.0, damping=1.0
    )


def test_a_move_within_the_per_node_share_of_the_tolerance_is_not_written() -> None:
    col = column()
    totals = published({"t0": 400.0, "t1": 100.0, "t2": 50.0}, {"t0": 200, "t1": 50, "t2": 10})
    old = {"t0": 2.0, "t1": 1.0, "t2": 3.0}
    eps = steps.WRITE_TOLERANCE
    # Per node ε x_n / K_n (2ε, 2ε and 5ε here); the 200 nodes of t0 together hold back at
    # most ε x_0, a relative ε of its total.
    bound = {"t0": eps * 400.0 / 200, "t1": eps * 100.0 / 50, "t2": eps * 50.0 / 10}
    just_inside = {t: old[t] + 0.99 * bound[t] * (-1) ** k for k, t in enumerate(old)}
    assert steps.negligible(col, totals, old, moved(old, just_inside))
    for t in old:
        outside = dict(old)
        outside[t] = old[t] + 1.01 * bound[t]
        assert not steps.negligible(col, totals, old, moved(old, outside)), t


def test_a_tenant_that_comes_or_goes_is_always_written() -> None:
    col = column()
    totals = published({"t0": 400.0, "t1": 100.0, "t2": 50.0}, {"t0": 1, "t1": 1, "t2": 1})
    old = {"t0": 2.0, "t1": 1.0}
    assert not steps.negligible(col, totals, old, moved(old, {**old, "t2": 0.0}))
    assert not steps.negligible(col, totals, {**old, "t2": 0.0}, moved(old, old))


def test_a_new_tenant_with_no_total_yet_is_moved_at_any_size() -> None:
    """x_n = 0 gives a bound of 0: the first tasks of a tenant that just arrived are written."""
    col = column()
    totals = published({"t0": 400.0, "t1": 100.0}, {"t0": 1, "t1": 1, "t2": 1})
    old = {"t0": 2.0, "t1": 1.0, "t2": 0.0}
    assert not steps.negligible(col, totals, old, moved(old, {**old, "t2": 1e-9}))


def test_pace_follows_its_rule() -> None:
    """Same direction: m / 1.25; reversal: m · 2; no move: unchanged; within [1/4, 4]."""
    names = ("a", "b", "c", "d")
    pace = steps.Pace({"a": 1.0, "b": 1.0, "c": 0.3, "d": 3.0}, {"a": 1, "b": 1, "c": -1, "d": 1})
    old = np.array([1.0, 1.0, 1.0, 1.0])
    new = np.array([2.0, 0.5, 0.5, 0.5])  # a same, b reversed, c same (at the floor), d reversed
    after = steps._next_pace(pace, names, old, new)
    assert after.factor["a"] == pytest.approx(1.0 / steps.PACE_FASTER)
    assert after.factor["b"] == pytest.approx(steps.PACE_SLOWER)
    assert after.factor["c"] == pytest.approx(max(steps.PACE_MIN, 0.3 / steps.PACE_FASTER))
    assert after.factor["d"] == pytest.approx(min(steps.PACE_MAX, 3.0 * steps.PACE_SLOWER))
    assert dict(after.direction) == {"a": 1, "b": -1, "c": -1, "d": -1}
    still = steps._next_pace(after, names, new, new)
    assert still == after


def test_pace_never_moves_the_central_solution() -> None:
    """The pace only rescales c_n, and x̂ = x does not depend on c_n: the central PS-DSF
    allocation (fairness.solve) stays a fixed point of every node's step at any pace."""
    rng = np.random.default_rng(5)
    n_nodes, n = 5, 4
    capacity = np.stack(
        [rng.choice([4.0, 8.0], n_nodes), np.full(n_nodes, 64.0), np.full(n_nodes, 512.0)], 1
    )
    demand = np.stack([np.ones(n), rng.integers(2, 16, n), rng.integers(8, 64, n)], 1).astype(float)
    eligible = rng.random((n, n_nodes)) < 0.8
    eligible[:, 0] = True
    throughput = rng.uniform(0.5, 3.0, (n, n_nodes))
    problem = fairness.FairnessProblem(
        capacity=capacity,
        demand=demand,
        weight=np.ones(n),
        eligible=eligible,
        throughput=throughput,
    )
    solved = fairness.solve(problem, mode="tdm")
    assert solved.converged
    x = solved.tasks
    names = tuple(f"t{k}" for k in range(n))
    totals = published(
        {t: float(v) for t, v in zip(names, x.sum(axis=1), strict=True)}, {t: 50 for t in names}
    )
    for i in range(n_nodes):
        col = steps.Column(
            node_name=f"node-{i}",
            tenant_names=names,
            capacity=capacity[i],
            demand=demand,
            weight=np.ones(n),
            eligible=eligible[:, i],
            cap=None,
            throughput=throughput[:, i],
        )
        old = {t: float(x[k, i]) for k, t in enumerate(names) if eligible[k, i]}
        for factor in (steps.PACE_MIN, 1.0, steps.PACE_MAX):
            pace = steps.Pace({t: factor for t in names}, {t: 1 for t in names})
            result = steps.agent_step(col, totals, old, tau=1.0, pace=pace)
            for t, v in old.items():
                assert result.tasks[t] == pytest.approx(v, rel=1e-6, abs=1e-6 * max(old.values()))


def instance(n_nodes: int, seed: int) -> dict[str, np.ndarray]:
    """3 GPU types, 5 tenants, some restricted: test_agent_dynamics's instance."""
    return dynamics_instance(n_nodes, seed, tenants=5)


@pytest.mark.parametrize("seed", [1, 2])
def test_converged_agents_stop_writing_and_stay_within_the_tolerance(seed: int) -> None:
    """With the write rule, a converged simulation makes no more writes (every move is within
    ε x_n / K_n) and its totals stay within 1e-3 = 100 ε of fairness.solve (the docstring's
    bound e_n ≤ ε x_n plus its margin for the exchange modes)."""
    inst = instance(30, seed)
    solved = fairness.solve(fairness.FairnessProblem(**inst), mode="tdm")
    assert solved.converged
    ref = {f"t{k}": float(v) for k, v in enumerate(solved.totals)}
    cols = sim.columns_from_arrays(**inst)
    config = sim.SimConfig(horizon=40.0, latency=0.1)
    early = sim.simulate(cols, config)
    late = sim.simulate(cols, dataclasses.replace(config, horizon=60.0))
    # Seeded and event-driven: the 60 s run repeats the 40 s run, then continues.
    assert late.writes >= early.writes and late.steps > early.steps
    assert sim.convergence_time(early, ref, tol=TOL) is not None
    assert late.writes == early.writes  # nothing written in the last 20 s
    want = np.array([ref[t] for t in late.tenant_names])
    assert sim.relative_error(late.totals[-1], want) <= TOL


def test_simulated_writes_land_after_the_latency() -> None:
    """No publish counts a write before ``latency`` seconds after the first step could have
    read the totals (steps start at t ≥ 0, so nothing is summed before t = latency)."""
    inst = instance(6, 3)
    cols = sim.columns_from_arrays(**inst)
    latency = 0.7
    result = sim.simulate(cols, sim.SimConfig(horizon=5.0, latency=latency, aggregate_period=0.05))
    nonzero = result.totals.sum(axis=1) > 0
    assert nonzero.any()
    assert float(result.times[nonzero][0]) >= latency


def test_back_off_lengthens_the_period_while_writes_queue() -> None:
    """A write slower than LATENCY_SHARE · τ multiplies the period by BACKOFF_STEP, up to
    MAX_BACKOFF · τ; fast writes bring it back to τ, never below."""
    config = runner.AgentConfig(node_name="n", tau=2.0, jitter=0.0)
    # No API calls here: the back-off only reads the agent's own latency.
    agent = runner.Agent(kube=None, config=config, reads=object())
    agent.latency = 1.01 * runner.LATENCY_SHARE * config.tau
    periods = []
    for _ in range(20):
        agent._back_off()
        periods.append(agent.next_delay())
    assert periods[0] == pytest.approx(config.tau * runner.BACKOFF_STEP)
    assert periods[-1] == pytest.approx(config.tau * runner.MAX_BACKOFF)
    agent.latency = 0.99 * runner.LATENCY_SHARE * config.tau
    for _ in range(20):
        agent._back_off()
    assert agent.next_delay() == pytest.approx(config.tau)


class _CountingKube:
    def __init__(self) -> None:
        self.lists = 0

    def node_names(self) -> set[str]:
        self.lists += 1
        return {f"n{self.lists}"}


class _StopAfterOneWait(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        self.set()
        return True


def test_aggregator_node_names_are_listed_off_the_publish_path() -> None:
    """Watching, a publish reads the cached names (the background refresh lists them); the
    first read lists once when nothing is cached; inline mode lists again once they are older
    than NODE_LIST_SECONDS."""
    kube = _CountingKube()
    names = aggregator._NodeNames(kube)  # type: ignore[arg-type]  # a fake with node_names only
    assert names.get(inline=False) == {"n1"} and kube.lists == 1
    assert names.get(inline=False) == {"n1"} and kube.lists == 1
    names._at -= aggregator.NODE_LIST_SECONDS + 1.0  # as if the last LIST were that old
    assert names.get(inline=False) == {"n1"} and kube.lists == 1
    assert names.get(inline=True) == {"n2"} and kube.lists == 2
    names.refresh(_StopAfterOneWait())  # one LIST, then its wait stops the loop
    assert names.get(inline=False) == {"n3"} and kube.lists == 3

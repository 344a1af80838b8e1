"""Per-job targets from tenants' node times (``walras.allocator.fairness.handout``).

Oracles, each checked directly on the output by brute force over every node and job (never by
calling the module again): feasibility (rows ≤ 1, node GPUs, only usable pairs), the per-job form
of Theorem 2 (the PS-DSF paper: a node with GPUs left has no usable job whose row is not full), each
tenant's own time handed to its own jobs before any other tenant's (own < budget only when all
of its usable jobs are full), the fill using only what the own phase left, equal time inside a
tenant's node budget, and a job's faster nodes offered first. The module docstring's worked
example is checked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.handout import _levels, hand_out

SETTINGS = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
# The water-fill is exact arithmetic on a few dozen numbers; 1e-9 covers its rounding.
TOL = 1e-9


def instance(seed: int, n_tenants: int, n_jobs: int, n_nodes: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    node_gpus = rng.choice([0, 2, 4, 8], size=n_nodes).astype(float)
    gang = rng.choice([1, 1, 2, 4], size=n_jobs).astype(float)
    usable = (rng.random((n_jobs, n_nodes)) < 0.6) & (gang[:, None] <= node_gpus[None, :])
    # Tenant times: a random split of each node, some of it unassigned (satisfied tenants).
    raw = rng.random((n_tenants, n_nodes)) * (rng.random((n_tenants, n_nodes)) < 0.7)
    col = raw.sum(axis=0) + rng.random(n_nodes) * 0.5
    tenant_time = np.where(col > 0, raw / np.maximum(col, 1e-300), 0.0)
    return {
        "tenant_time": tenant_time,
        "job_tenant": rng.integers(0, n_tenants, size=n_jobs),
        "usable": usable,
        "gang_gpus": gang,
        "node_gpus": node_gpus,
        # A few GPU types: speeds repeat across nodes, as they do on real clusters.
        "preference": rng.choice([1.0, 2.0, 3.5], size=(n_jobs, n_nodes)),
    }


@st.composite
def instances(draw: st.DrawFn) -> dict[str, np.ndarray]:
    return instance(
        draw(st.integers(0, 2**31 - 1)),
        draw(st.integers(1, 4)),
        draw(st.integers(0, 12)),
        draw(st.integers(1, 6)),
    )


@SETTINGS
@given(inst=instances())
def test_feasible_and_only_on_usable_pairs(inst: dict[str, np.ndarray]) -> None:
    out = hand_out(**inst)
    t, g, cap = out.targets, inst["gang_gpus"], inst["node_gpus"]
    assert (t >= 0).all()
    assert (t[~inst["usable"]] == 0).all()
    assert (t.sum(axis=1) <= 1 + TOL).all()
    assert ((t * g[:, None]).sum(axis=0) <= cap + TOL).all()
    # Targets are the two phases added (rounding dust below 1e-12 dropped).
    np.testing.assert_allclose(t, out.own + out.fill, atol=1e-12)


@SETTINGS
@given(inst=instances())
def test_no_gpu_idles_while_a_usable_job_waits(inst: dict[str, np.ndarray]) -> None:
    """Theorem 2's condition per job, checked node by node and job by job."""
    out = hand_out(**inst)
    t, g, cap = out.targets, inst["gang_gpus"], inst["node_gpus"]
    for k in range(cap.shape[0]):
        left = cap[k] - sum(t[j, k] * g[j] for j in range(g.shape[0]))
        if left <= TOL:
            continue
        for j in range(g.shape[0]):
            if inst["usable"][j, k]:
                assert t[j].sum() >= 1 - TOL, f"node {k} has {left} GPUs left, job {j} waits"
        assert out.idle[k] == pytest.approx(left, abs=1e-7)


@SETTINGS
@given(inst=instances())
def test_each_tenant_gets_its_own_time_first(inst: dict[str, np.ndarray]) -> None:
    out = hand_out(**inst)
    g, cap, owner = inst["gang_gpus"], inst["node_gpus"], inst["job_tenant"]
    rows = out.targets.sum(axis=1)
    for n in range(inst["tenant_time"].shape[0]):
        for k in range(cap.shape[0]):
            budget = inst["tenant_time"][n, k] * cap[k]
            mine = [j for j in range(g.shape[0]) if owner[j] == n]
            own = sum(out.own[j, k] * g[j] for j in mine)
            assert own <= budget + TOL
            if own < budget - 1e-7:
                # Its budget went unused only because all its jobs usable here are full.
                assert all(rows[j] >= 1 - TOL for j in mine if inst["usable"][j, k])
    # The fill hands out only what the tenants' own phases left.
    own_gpus = (out.own * g[:, None]).sum(axis=0)
    fill_gpus = (out.fill * g[:, None]).sum(axis=0)
    assert (fill_gpus <= np.maximum(cap - own_gpus, 0) + TOL).all()


def test_own_time_goes_to_own_jobs_only() -> None:
    # Tenant 0 owns all of the node; its only job needs 1 of the 4 GPUs full time. Tenant 1's job
    # gets nothing from tenant 0's budget in the own phase, only the fill.
    out = hand_out([[1.0], [0.0]], [0, 1], [[True], [True]], [1.0, 2.0], [4.0])
    assert out.own[:, 0].tolist() == [1.0, 0.0]
    assert out.fill[:, 0].tolist() == [0.0, 1.0]


def test_docstring_example() -> None:
    """One 4-GPU node, tenants A, B at y = 0.5; A has one 1-GPU job, B two."""
    out = hand_out([[0.5], [0.5]], [0, 1, 1], [[True]] * 3, [1.0, 1.0, 1.0], [4.0])
    np.testing.assert_allclose(out.own[:, 0], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(out.fill[:, 0], [0.0, 0.0, 0.0])
    assert out.idle[0] == pytest.approx(1.0)


def test_equal_time_inside_a_tenant_budget() -> None:
    # 8-GPU node, one tenant owning a quarter of it (2 GPUs); gangs of 1, 1 and 2 GPUs would
    # take 4 GPUs at full rows, so each runs the same time τ with τ·(1 + 1 + 2) = 2: τ = 0.5.
    out = hand_out([[0.25]], [0, 0, 0], [[True]] * 3, [1.0, 1.0, 2.0], [8.0])
    np.testing.assert_allclose(out.own[:, 0], [0.5, 0.5, 0.5])


def test_a_job_is_offered_its_faster_nodes_first() -> None:
    # Two 1-GPU nodes wholly owned by one tenant whose one job runs 3x faster on node 1: its
    # whole row goes there, none to the slower node 0 (then the fill has nobody left to give to).
    out = hand_out([[1.0, 1.0]], [0], [[True, True]], [1.0], [1.0, 1.0], preference=[[1.0, 3.0]])
    np.testing.assert_allclose(out.targets, [[0.0, 1.0]])
    np.testing.assert_allclose(out.idle, [1.0, 0.0])


def test_over_booked_nodes_are_scaled_back() -> None:
    # Unconverged agents may publish Σ_n y > 1; the node is still handed out at most once.
    out = hand_out([[0.9], [0.9]], [0, 1], [[True], [True]], [4.0, 4.0], [4.0])
    np.testing.assert_allclose(out.own[:, 0], [0.5, 0.5])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tenant_time": [[-0.1]]}, "tenant_time"),
        ({"job_tenant": [3]}, "job_tenant"),
        ({"gang_gpus": [0.0]}, "gang_gpus"),
        ({"node_gpus": [np.nan]}, "node_gpus"),
        ({"usable": [[True, False]]}, "usable"),
        ({"preference": [[np.inf]]}, "preference"),
    ],
)
def test_malformed_inputs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    base: dict[str, object] = {
        "tenant_time": [[0.5]],
        "job_tenant": [0],
        "usable": [[True]],
        "gang_gpus": [1.0],
        "node_gpus": [4.0],
    }
    with pytest.raises(InvalidProblem) as err:
        hand_out(**{**base, **kwargs})
    assert err.value.field == field


@SETTINGS
@given(st.integers(0, 10_000), st.integers(0, 8), st.integers(1, 8))
def test_speed_levels_count_the_distinct_faster_speeds(
    seed: int, n_jobs: int, n_nodes: int
) -> None:
    # A node's level for a job is how many distinct speeds of the job's usable nodes are faster
    # (0: among its fastest), -1 where the job cannot use it: counted here node by node.
    rng = np.random.default_rng(seed)
    ok = rng.random((n_jobs, n_nodes)) < 0.7
    pref = rng.choice([0.0, 0.5, 1.0, 2.0, 3.5], size=(n_jobs, n_nodes))  # ties on purpose
    level = _levels(ok, pref)
    for j in range(n_jobs):
        usable = {float(pref[j, k]) for k in range(n_nodes) if ok[j, k]}
        for k in range(n_nodes):
            want = sum(1 for v in usable if v > pref[j, k]) if ok[j, k] else -1
            assert level[j, k] == want

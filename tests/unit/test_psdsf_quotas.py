"""Tenant quotas in PS-DSF (``walras.allocator.fairness.quota_nodes``) and the ``psdsf`` policy.

Oracles, independent of the pieces-of-nodes construction:

- a cvxpy Eisenberg–Gale model with the quota rows written directly over the time shares ``y``:
  per node ``Σ_n max(y_{n,i} − a_{n,i}, 0) ≤ 1 − Σ_n a_{n,i}`` with ``a_{n,i} = c_ng / R_ng``
  recomputed here, and per tenant and type ``Σ_{i of g} C_i y_{n,i} ≤ M_ng``. With guarantees
  alone the solver's objective must lie within the oracle's error bound of the model's, and its
  tenant totals within the distance that bound allows by strong concavity (both derived in the
  test); the
  instances have no caps (PS-DSF places a capped tenant by its own rule, not the program's, with
  or without quotas), and a share is lent (smaller than ``a``) only by a tenant at its cap
  (checked on instances with caps). With maximums the construction is a restriction of the
  program (module docstring), so its objective can only be lower: checked, with the
  same bound on the oracle's error, plus every maximum;
- the admin's numbers: a tenant holds ``c_ng`` GPUs of a type unless it is at its cap.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.allocator.fairness import FairnessProblem, monopoly_tasks, quota_nodes


def instance(
    seed: int, *, maximums: bool, caps: bool = True, one_node_per_type: bool = False
) -> dict[str, Any]:
    """2-4 tenants on 2-5 nodes of 1-2 GPU types, 2 resources (GPUs, cpu). A tenant can use all
    nodes of a type or none (so no node's shares overlap over 1 and ``c`` is carved in full);
    guarantees leave room (Σ_n c_ng ≤ R_g − 1); maximums ≥ guarantees; some caps (``caps``);
    ``one_node_per_type``: a single node of each type (the other draws unchanged)."""
    rng = np.random.default_rng(seed)
    K, N, m = int(rng.integers(2, 6)), int(rng.integers(2, 5)), int(rng.integers(1, 3))
    if one_node_per_type:
        K = m
    node_type = rng.integers(0, m, K).astype(np.int64)
    node_type[:m] = np.arange(m)
    gpus = rng.integers(2, 9, K).astype(float)
    capacity = np.column_stack([gpus, rng.uniform(16, 64, K)])
    demand = np.column_stack([rng.integers(1, 3, N).astype(float), rng.uniform(1, 8, N)])
    type_ok = rng.random((N, m)) < 0.8
    type_ok[np.arange(N), rng.integers(0, m, N)] = True
    eligible = type_ok[:, node_type]
    throughput = rng.uniform(0.5, 2.0, (N, K))
    cap = np.where(rng.random(N) < 0.4, rng.uniform(0.5, 6.0, N), np.inf) if caps else None
    problem = FairnessProblem(
        capacity=capacity,
        demand=demand,
        weight=rng.choice([1.0, 2.0], N),
        eligible=eligible,
        cap=cap,
        throughput=throughput,
    )
    R = np.bincount(node_type, weights=gpus, minlength=m)
    carve = np.zeros((N, m))
    maximum = np.full((N, m), np.inf)
    for g in range(m):
        room = R[g] - 1
        for n in rng.permutation(N).tolist():
            if type_ok[n, g] and rng.random() < 0.7:
                carve[n, g] = float(rng.integers(0, int(room // N) + 1))
            if maximums and rng.random() < 0.5:
                maximum[n, g] = float(rng.integers(max(int(carve[n, g]), 1), int(R[g]) + 1))
    return {"problem": problem, "node_type": node_type, "carve": carve, "maximum": maximum}


def shares(inst: dict[str, Any]) -> np.ndarray[Any, Any]:
    """``a_{n,i} = c_ng / R_ng`` from the definition."""
    p, node_type, carve = inst["problem"], inst["node_type"], inst["carve"]
    gamma = np.asarray(monopoly_tasks(p))
    gpus = p.capacity[:, 0]
    a = np.zeros(gamma.shape)
    for n in range(gamma.shape[0]):
        for i in range(gamma.shape[1]):
            g = node_type[i]
            on = (node_type == g) & (gamma[n] > 0)
            if gamma[n, i] > 0 and gpus[on].sum() > 0:
                a[n, i] = carve[n, g] / gpus[on].sum()
    return a


def confinements(inst: dict[str, Any], barred: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The node shares once the ``barred`` pairs are confined, from the definition: ``M_ng /
    R_ng`` (at most 1) on each node of ``g`` a barred tenant can use, ``R_ng`` its GPUs there;
    ``c_ng / R_ng`` for the other guarantees; a node whose shares add up to more than 1 scaled
    down to 1."""
    p, node_type, maximum = inst["problem"], inst["node_type"], inst["maximum"]
    gamma = np.asarray(monopoly_tasks(p))
    gpus = p.capacity[:, 0]
    a = shares(inst)
    for n, g in zip(*np.nonzero(barred), strict=True):
        on = (node_type == g) & (gamma[n] > 0)
        a[n, on] = min(maximum[n, g] / gpus[on].sum(), 1.0)
    total = a.sum(axis=0)
    return np.where(total > 1, a / np.maximum(total, 1.0), a)


def cvxpy_model(
    inst: dict[str, Any], a: np.ndarray[Any, Any], fixed: np.ndarray[Any, Any] | None = None
) -> tuple[float, Any, float]:
    """``(objective, totals, tolerance)`` of the quota-constrained Eisenberg–Gale program (with
    ``y_{n,i} = a_{n,i}`` where ``fixed``): solved to Clarabel gap and feasibility tolerances of
    1e-10, or 1e-8 where 1e-10 is not reached."""
    import cvxpy as cp

    p, node_type, maximum = inst["problem"], inst["node_type"], inst["maximum"]
    gamma = np.asarray(monopoly_tasks(p))
    N, K, _ = p.shape
    y = cp.Variable((N, K), nonneg=True)
    x = cp.sum(cp.multiply(gamma, y), axis=1)
    cons = [cp.sum(cp.pos(y - a), axis=0) <= 1 - a.sum(axis=0)]
    if fixed is not None and fixed.any():
        cons.append(y[fixed] == a[fixed])
    if (gamma <= 0).any():
        cons.append(y[gamma <= 0] == 0)
    finite = np.isfinite(p.caps)
    if finite.any():
        cons.append(x[np.flatnonzero(finite)] <= p.caps[finite])
    for n, g in zip(*np.nonzero(np.isfinite(maximum)), strict=True):
        cons.append(cp.sum(cp.multiply(p.capacity[:, 0] * (node_type == g), y[n])) <= maximum[n, g])
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(p.phi, cp.log(x)))), cons)
    tol = 0.0
    for tol in (1e-10, 1e-8):
        with warnings.catch_warnings():  # a tolerance not reached is retried looser, not hidden
            warnings.simplefilter("ignore", UserWarning)
            prob.solve(solver=cp.CLARABEL, tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol)
        if prob.status == cp.OPTIMAL:
            break
    assert prob.status == cp.OPTIMAL, prob.status
    totals = np.asarray(gamma * y.value).sum(axis=1)
    return float(prob.value), totals, tol


def objective(inst: dict[str, Any], totals: np.ndarray[Any, Any]) -> float:
    return float((inst["problem"].phi * np.log(totals)).sum())


def held(inst: dict[str, Any], tasks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    p, node_type = inst["problem"], inst["node_type"]
    gamma = np.asarray(monopoly_tasks(p))
    y = np.where(gamma > 0, tasks / np.where(gamma > 0, gamma, 1.0), 0.0)
    out = np.zeros(inst["carve"].shape)
    for i in range(len(node_type)):
        out[:, node_type[i]] += p.capacity[i, 0] * y[:, i]
    return out


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), mode=st.sampled_from(["tdm", "rdm"]))
def test_guarantees_are_met_unless_the_tenant_is_at_its_cap(seed: int, mode: str) -> None:
    inst = instance(seed, maximums=True)
    sol = quota_nodes.solve(
        inst["problem"],
        inst["node_type"],
        inst["carve"],
        inst["maximum"],
        mode=mode,  # type: ignore[arg-type]
    )
    h = held(inst, sol.tasks)
    np.testing.assert_allclose(sol.held, h, atol=1e-9)
    assert (h <= inst["maximum"] + 1e-6).all()
    totals = sol.tasks.sum(axis=1)
    at_cap = totals >= inst["problem"].caps * (1 - 1e-6)
    for n, g in zip(*np.nonzero(h < inst["carve"] - 1e-6), strict=True):
        assert at_cap[n], (n, g, h[n, g], inst["carve"][n, g])
    # Time per node within 1 (TDM) and every tenant within its cap.
    gamma = np.asarray(monopoly_tasks(inst["problem"]))
    if mode == "tdm":
        y = np.where(gamma > 0, sol.tasks / np.where(gamma > 0, gamma, 1.0), 0.0)
        assert (y.sum(axis=0) <= 1 + 1e-6).all()
    assert (totals <= inst["problem"].caps * (1 + 1e-6)).all()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_tdm_with_guarantees_is_the_quota_constrained_eisenberg_gale_optimum(seed: int) -> None:
    # Without caps: PS-DSF with a binding cap places the capped tenant by its own rule, which is
    # not the Eisenberg–Gale program's (the unconstrained solver differs from it there too), and
    # with no cap every tenant fills the piece only it may use, so nothing is lent.
    inst = instance(seed, maximums=False, caps=False)
    sol = quota_nodes.solve(inst["problem"], inst["node_type"], inst["carve"], inst["maximum"])
    assert sol.result.certificate_violation <= 1e-6
    np.testing.assert_allclose(sol.share, shares(inst), atol=1e-12)
    totals = sol.tasks.sum(axis=1)
    value, oracle, tol = cvxpy_model(inst, shares(inst))
    phi = inst["problem"].phi
    # How far the model's optimum may be from the oracle's value: Clarabel tests its gap and
    # residuals on its equilibrated problem (row/column scalings within [1e-4, 1e4], its
    # defaults) with log written as exponential cones, so on the program as written here a
    # tolerance ``tol`` bounds the error by 1e4·tol relative, not tol (at 1e-8 the oracle was
    # seen 1.2e-7 below the certified solver).
    eps = 1e4 * tol * max(1.0, abs(value))
    f = objective(inst, totals)
    assert abs(f - value) <= eps
    # Totals: the objective is strongly concave in x, so a feasible point ε below the optimum is
    # close to it: f(x*) − f(x) ≥ Σ_n φ_n (x_n − x*_n)² / (2 ξ_n²), ξ_n the largest x_n on the
    # segment (the first-order term is ≥ 0 at a constrained optimum). Both points are within
    # ε of f* (above), so |x_n − x*_n| ≤ ξ_n √(2ε/φ_n) each and they differ by at most twice
    # that: 0.3% at tol = 1e-10.
    xi = np.maximum(totals, oracle) * 1.01  # the bound is < 1% relative, so ξ ≤ 1.01·max
    bound = 2 * xi * np.sqrt(2 * eps / phi)
    assert (np.abs(totals - oracle) <= bound).all(), (totals, oracle, bound)


def test_an_idle_piece_is_lent_only_by_a_tenant_at_its_cap() -> None:
    for seed in range(40):
        inst = instance(seed, maximums=False)
        sol = quota_nodes.solve(inst["problem"], inst["node_type"], inst["carve"], inst["maximum"])
        full = shares(inst)
        assert (sol.share <= full + 1e-9).all()
        totals = sol.tasks.sum(axis=1)
        lent = (sol.share < full - 1e-9).any(axis=1)
        assert (totals[lent] >= inst["problem"].caps[lent] * (1 - 1e-6)).all()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_tdm_with_maximums_is_feasible_for_the_model_and_never_above_it(seed: int) -> None:
    inst = instance(seed, maximums=True, caps=False)
    sol = quota_nodes.solve(inst["problem"], inst["node_type"], inst["carve"], inst["maximum"])
    totals = sol.tasks.sum(axis=1)
    assert (sol.held <= inst["maximum"] + 1e-6).all()
    value, _, tol = cvxpy_model(inst, shares(inst))
    assert objective(inst, totals) <= value + 1e4 * tol * max(1.0, abs(value))


def within_oracle(
    inst: dict[str, Any], totals: np.ndarray[Any, Any], value: float, tol: float
) -> bool:
    """The solver's objective within the oracle's error bound of the model's (derived in
    ``test_tdm_with_guarantees_is_the_quota_constrained_eisenberg_gale_optimum``)."""
    return abs(objective(inst, totals) - value) <= 1e4 * tol * max(1.0, abs(value))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_tdm_with_maximums_is_the_optimum_with_each_confinement_fixed(seed: int) -> None:
    # With a binding maximum: the program with each barred pair's time on every node of its type
    # fixed at its confinement (a tenant alone on a piece with no cap fills it, and the pieces
    # are then exactly those rows). No caps: nothing is lent, so the shares are the definition's.
    inst = instance(seed, maximums=True, caps=False)
    sol = quota_nodes.solve(inst["problem"], inst["node_type"], inst["carve"], inst["maximum"])
    assert (sol.held <= inst["maximum"] + 1e-6).all()
    a = confinements(inst, sol.barred)
    np.testing.assert_allclose(sol.share, a, atol=1e-12)
    fixed = sol.barred[:, inst["node_type"]] & (a > 0)
    value, _, tol = cvxpy_model(inst, a, fixed)
    assert within_oracle(inst, sol.tasks.sum(axis=1), value, tol)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_tdm_with_maximums_on_one_node_per_type_is_the_quota_constrained_optimum(
    seed: int,
) -> None:
    # One node per type: a confinement is the maximum row itself (held with equality), so the
    # allocation is the program's optimum wherever the confined rows bind there; confining one
    # pair per pass, largest excess first, makes them (module docstring: checked, not proven).
    inst = instance(seed, maximums=True, caps=False, one_node_per_type=True)
    sol = quota_nodes.solve(inst["problem"], inst["node_type"], inst["carve"], inst["maximum"])
    assert (sol.held <= inst["maximum"] + 1e-6).all()
    value, _, tol = cvxpy_model(inst, shares(inst))
    assert within_oracle(inst, sol.tasks.sum(axis=1), value, tol)


def test_a_guarantee_is_carved_from_every_node_of_its_type() -> None:
    # Two 4-GPU nodes of one type; tenant 0 (weight 1) is guaranteed 6 GPUs, tenant 1 has
    # weight 10: without the guarantee tenant 0 would get 1/11 of each node; with it, 3/4.
    problem = FairnessProblem(
        capacity=np.array([[4.0, 64.0], [4.0, 64.0]]),
        demand=np.array([[1.0, 1.0], [1.0, 1.0]]),
        weight=np.array([1.0, 10.0]),
    )
    sol = quota_nodes.solve(
        problem, np.zeros(2, dtype=np.int64), np.array([[6.0], [0.0]]), np.full((2, 1), np.inf)
    )
    np.testing.assert_allclose(sol.held[:, 0], [6.0, 2.0], atol=1e-6)
    np.testing.assert_allclose(sol.share[0], [0.75, 0.75])


@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_a_maximum_confines_a_tenant_and_the_others_share_the_rest(mode: str) -> None:
    problem = FairnessProblem(
        capacity=np.array([[8.0, 64.0]]),
        demand=np.array([[1.0, 1.0], [1.0, 1.0]]),
        weight=np.array([10.0, 1.0]),
    )
    sol = quota_nodes.solve(
        problem,
        np.zeros(1, dtype=np.int64),
        np.zeros((2, 1)),
        np.array([[2.0], [np.inf]]),
        mode=mode,  # type: ignore[arg-type]
    )
    np.testing.assert_allclose(sol.held[:, 0], [2.0, 6.0], atol=1e-6)
    assert sol.barred[0, 0]


@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_the_psdsf_policy_gives_a_guarantee_and_keeps_a_maximum(mode: str) -> None:
    # One 8-GPU v100 node and one 8-GPU k80 node. Tenant "a" (guaranteed 6 v100) runs three
    # 2-GPU jobs that only v100 runs; "b" (at most 2 k80) and "c" run four 4-GPU jobs each that
    # are 3× faster on v100. Without quotas "a" would get about a third of the v100 node.
    from tests.unit.test_quotas import _cluster, _held_by_tenant, _job

    snap = _cluster(
        [
            {"metadata": {"name": "a"}, "spec": {"quotas": {"v100": {"guaranteed": 6}}}},
            {"metadata": {"name": "b"}, "spec": {"quotas": {"k80": {"maximum": 2}}}},
        ],
        [
            *(_job(f"a{i}", "a", {"v100": 1.0}, replicas=2) for i in range(3)),
            *(_job(f"b{i}", "b", {"v100": 3.0, "k80": 1.0}, replicas=4) for i in range(4)),
            *(_job(f"c{i}", "c", {"v100": 3.0, "k80": 1.0}, replicas=4) for i in range(4)),
        ],
    )
    h = _held_by_tenant("psdsf", {"mode": mode}, snap)
    assert h.get(("a", "v100"), 0.0) >= 6.0 - 1e-6
    assert h.get(("b", "k80"), 0.0) <= 2.0 + 1e-6

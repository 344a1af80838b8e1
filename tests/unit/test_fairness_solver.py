"""PS-DSF solver: Eisenberg–Gale oracle (cvxpy), Theorem 1/2 certificates, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.fairness_helpers import eisenberg_gale_totals, random_problem

from walras.allocator import fairness
from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness import FairnessProblem, certificate, monopoly_tasks, solve
from walras.allocator.fairness.certificates import feasibility_violation
from walras.allocator.fairness.waterfill import rdm_fill, tdm_fill

EG_CASES = [  # (seed, K, N, caps): modest count so the file stays around a minute
    (1, 3, 5, False),
    (2, 6, 10, False),
    (3, 10, 12, True),
    (4, 20, 30, False),
    (5, 15, 25, True),
]


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "K", "N", "caps"), EG_CASES)
def test_tdm_totals_equal_eisenberg_gale(seed: int, K: int, N: int, caps: bool) -> None:
    problem = random_problem(seed, K, N, p_eligible=0.5, caps=caps)
    result = solve(problem, mode="tdm")
    assert result.converged
    oracle = eisenberg_gale_totals(problem)
    np.testing.assert_allclose(result.totals, oracle, rtol=1e-4)


@pytest.mark.parametrize("mode", ["tdm", "rdm"])
@pytest.mark.parametrize("seed", range(6))
def test_certificates_hold_with_placement_weights_and_caps(mode: str, seed: int) -> None:
    problem = random_problem(100 + seed, K=5, N=7, p_eligible=0.5, caps=seed % 2 == 0)
    result = solve(problem, mode=mode)
    assert result.converged
    assert result.certificate_violation <= 1e-7
    assert feasibility_violation(problem, np.asarray(result.tasks), mode) <= 1e-9
    gamma = monopoly_tasks(problem)
    assert (result.tasks[gamma <= 0] == 0).all()
    assert (result.totals <= problem.caps * (1 + 1e-9)).all()


def test_certificate_detects_an_unfair_and_an_infeasible_allocation() -> None:
    problem = random_problem(7, K=4, N=5)
    fair = np.asarray(solve(problem, mode="tdm").tasks)
    gamma = monopoly_tasks(problem)
    # Move half of one served tenant's time on its first node to nobody: node not fully used.
    n, i = np.argwhere(fair > 0)[0]
    skewed = fair.copy()
    skewed[n, i] *= 0.5
    assert certificate(problem, skewed, "tdm") >= 0.5 * fair[n, i] / gamma[n, i] - 1e-12
    assert certificate(problem, fair * 1.1, "tdm") >= 0.1 - 1e-9


def test_tdm_fill_matches_a_brute_force_level_search() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        U = int(rng.integers(1, 12))
        gamma = rng.uniform(1, 50, U)
        phi = rng.uniform(0.5, 3, U)
        b = np.where(rng.random(U) < 0.5, 0.0, rng.uniform(0, 30, U))
        upper = np.where(rng.random(U) < 0.3, rng.uniform(0, 10, U), np.inf)
        x, _ = tdm_fill(gamma, phi, b, upper)
        # Oracle: bisection on the level (independent of the break-point sort).
        lo_l, hi_l = 0.0, 1e6

        def used(
            lv: float,
            phi: np.ndarray = phi,
            gamma: np.ndarray = gamma,
            b: np.ndarray = b,
            upper: np.ndarray = upper,
        ) -> float:
            return float((np.clip(lv * phi * gamma - b, 0, upper) / gamma).sum())

        if used(hi_l) <= 1:
            np.testing.assert_allclose(x, np.where(np.isfinite(upper), upper, 0.0))
            continue
        for _ in range(200):
            mid = 0.5 * (lo_l + hi_l)
            lo_l, hi_l = (mid, hi_l) if used(mid) <= 1 else (lo_l, mid)
        np.testing.assert_allclose(x, np.clip(lo_l * phi * gamma - b, 0, upper), atol=1e-7)
        assert abs((x / gamma).sum() - 1.0) <= 1e-12


def test_rdm_fill_gives_every_tenant_a_saturated_bottleneck() -> None:
    rng = np.random.default_rng(1)
    for _ in range(30):
        U, M = int(rng.integers(1, 8)), 3
        demand = rng.uniform(0.1, 3, (U, M)) * (rng.random((U, M)) < 0.7)
        demand[np.arange(U), rng.integers(0, M, U)] += 0.5
        capacity = rng.uniform(5, 20, M)
        with np.errstate(divide="ignore"):
            gamma = np.where(demand > 0, capacity[None, :] / demand, np.inf).min(axis=1)
        phi = rng.uniform(0.5, 2, U)
        b = np.where(rng.random(U) < 0.5, 0.0, rng.uniform(0, 5, U))
        x, _ = rdm_fill(gamma, phi, b, np.full(U, np.inf), demand, capacity)
        use = demand.T @ x
        assert (use <= capacity * (1 + 1e-12)).all()
        vds = (b + x) / (phi * gamma)
        for n in range(U):
            ok = False
            for r in np.flatnonzero(demand[n] > 0):
                served = (x > 1e-12) & (demand[:, r] > 0)
                if use[r] >= capacity[r] * (1 - 1e-9) and (vds[served] <= vds[n] + 1e-9).all():
                    ok = True
            assert ok, f"tenant {n} has no bottleneck"


# --- bad input: which raise, which become ineligible -------------------------------------------


def _base(**kw: object) -> dict[str, object]:
    args: dict[str, object] = {
        "capacity": np.array([[8.0, 64.0], [4.0, 32.0]]),
        "demand": np.array([[1.0, 8.0], [2.0, 4.0]]),
        "tenant_names": ["alice", "bob"],
        "node_names": ["n1", "n2"],
        "resource_names": ["gpu", "cpu"],
    }
    args.update(kw)
    return args


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"capacity": np.array([[8.0, -1.0], [4.0, 32.0]])}, ["n1", "cpu"]),
        ({"capacity": np.array([[8.0, 64.0], [np.nan, 32.0]])}, ["n2", "gpu"]),
        ({"demand": np.array([[1.0, 8.0], [np.nan, 4.0]])}, ["bob", "gpu"]),
        ({"demand": np.array([[-1.0, 8.0], [2.0, 4.0]])}, ["alice", "gpu"]),
        ({"demand": np.array([[0.0, 0.0], [2.0, 4.0]])}, ["alice", "nothing"]),
        ({"weight": np.array([1.0, 0.0])}, ["bob", "weight"]),
        ({"cap": np.array([np.nan, 1.0])}, ["alice", "cap"]),
        ({"throughput": np.array([[1.0, -2.0], [1.0, 1.0]])}, ["alice", "n2"]),
        ({"demand": np.array([[1.0, 8.0, 1.0]])}, ["demand"]),
    ],
)
def test_malformed_input_raises_naming_the_culprit(
    change: dict[str, object], words: list[str]
) -> None:
    with pytest.raises(InvalidProblem) as info:
        FairnessProblem(**_base(**change))  # type: ignore[arg-type]
    for word in words:
        assert word in str(info.value)


def test_no_eligible_node_raises_when_strict_and_is_ineligible_otherwise() -> None:
    problem = FairnessProblem(**_base(eligible=np.array([[True, True], [False, False]])))  # type: ignore[arg-type]
    with pytest.raises(InvalidProblem, match="bob"):
        solve(problem)
    result = solve(problem, strict=False)
    assert [n for n, _ in result.ineligible] == [1]
    assert "no eligible node" in result.ineligible[0][1]
    assert (result.tasks[1] == 0).all() and result.totals[0] > 0
    assert result.certificate_violation <= 1e-9


def test_demand_on_a_resource_no_node_has() -> None:
    args = _base(
        capacity=np.array([[8.0, 64.0, 0.0], [4.0, 32.0, 0.0]]),
        demand=np.array([[1.0, 8.0, 0.0], [2.0, 4.0, 1.0]]),
        resource_names=["gpu", "cpu", "infiniband"],
    )
    problem = FairnessProblem(**args)  # type: ignore[arg-type]
    with pytest.raises(InvalidProblem, match=r"bob.*infiniband"):
        solve(problem)
    result = solve(problem, mode="rdm", strict=False)
    assert result.ineligible[0][0] == 1 and "infiniband" in result.ineligible[0][1]
    assert (result.tasks[1] == 0).all()


@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_cap_zero_is_ineligible_not_an_error(mode: str) -> None:
    problem = FairnessProblem(**_base(cap=np.array([0.0, np.inf])))  # type: ignore[arg-type]
    result = solve(problem, mode=mode)
    assert result.ineligible == ((0, "cap is 0 (no active tasks)"),)
    assert (result.tasks[0] == 0).all()
    assert result.certificate_violation <= 1e-9


def test_result_is_immutable() -> None:
    result = solve(FairnessProblem(**_base()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="read-only"):
        result.tasks[0, 0] = 1.0


def test_throughput_extension_counts_work() -> None:
    # One GPU node type twice as fast for alice: γ doubles, tasks in pods = x / throughput.
    tput = np.array([[2.0, 1.0], [1.0, 1.0]])
    problem = FairnessProblem(**_base(throughput=tput))  # type: ignore[arg-type]
    gamma = monopoly_tasks(problem)
    plain = monopoly_tasks(FairnessProblem(**_base()))  # type: ignore[arg-type]
    np.testing.assert_allclose(gamma, plain * tput)
    result = solve(problem)
    assert result.certificate_violation <= 1e-9
    np.testing.assert_allclose(result.totals, eisenberg_gale_totals(problem), rtol=1e-4)


@pytest.mark.parametrize("mode", ["tdm", "rdm"])
def test_warm_start_from_the_answer_or_a_perturbed_one(mode: str) -> None:
    problem = random_problem(21, K=6, N=8, p_eligible=0.5)
    cold = solve(problem, mode=mode)
    again = solve(problem, mode=mode, warm_start=np.asarray(cold.tasks))
    assert again.sweeps <= 2 and again.certificate_violation <= 1e-9
    rng = np.random.default_rng(0)
    noisy = np.asarray(cold.tasks) * rng.uniform(0.5, 2.0, cold.tasks.shape) - 0.1
    warm = solve(problem, mode=mode, warm_start=noisy)
    assert warm.certificate_violation <= 1e-7
    if mode == "tdm":  # TDM totals are unique (Eisenberg–Gale); RDM PS-DSF need not be
        np.testing.assert_allclose(warm.totals, cold.totals, rtol=1e-6)
    with pytest.raises(InvalidProblem, match="warm_start"):
        solve(problem, mode=mode, warm_start=np.zeros((2, 2)))


def test_rdm_with_throughput_respects_capacity_in_pods() -> None:
    """With the GPU extension x counts work; RDM must charge resources per pod (x / throughput)."""
    rng = np.random.default_rng(7)
    N, K = 5, 4
    capacity = rng.uniform(4, 16, size=(K, 3)).round()
    demand = rng.uniform(0.5, 4, size=(N, 3)).round(1)
    throughput = rng.uniform(0.3, 3.0, size=(N, K))
    problem = fairness.FairnessProblem(capacity=capacity, demand=demand, throughput=throughput)
    result = fairness.solve(problem, mode="rdm")
    pods = result.tasks / throughput
    use = pods.T @ demand
    assert (use <= capacity * (1 + 1e-9) + 1e-9).all()
    assert result.certificate_violation <= 1e-6
    # every node has some saturated resource (RDM bottlenecks exist), measured in pods
    assert (np.isclose(use, capacity, rtol=1e-6).any(axis=1)).all()


def test_rdm_node_update_with_throughput_fits_the_node() -> None:
    """The agents' one-node update charges pods, not work units (regression: 0.86 work/pod)."""
    x = fairness.node_update(
        np.array([8.0, 64.0, 512.0]),
        np.array([[1.0, 8.0, 48.0]]),
        np.array([1.0]),
        np.array([True]),
        np.array([0.0]),
        np.array([0.0]),
        throughput_i=np.array([0.86]),
        mode="rdm",
    )
    pods = x[0] / 0.86
    assert pods == pytest.approx(8.0)

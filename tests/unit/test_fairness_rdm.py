"""RDM PS-DSF's exact finish (``fairness.rdm_crossover``) and the fill's bottleneck structure.

Oracles: a hand-solved instance (module docstring of ``rdm_crossover``), Theorem 1's certificate
(``fairness.certificates``, an independent check of the bottleneck condition) and a brute-force
bottleneck check of the fill written here.
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.fairness_helpers import random_problem

from walras.allocator.fairness import FairnessProblem, certificate, monopoly_tasks, solve
from walras.allocator.fairness.certificates import feasibility_violation
from walras.allocator.fairness.rdm_crossover import rdm_crossover
from walras.allocator.fairness.waterfill import rdm_fill_levels
from walras.core import policies


def _classed(seed: int, K: int, N: int) -> FairnessProblem:
    """Nodes drawn from a few classes (many ties between nodes: what makes sweeps crawl)."""
    rng = np.random.default_rng(seed)
    capacity = np.column_stack(
        [np.full(K, 8.0), rng.choice([32.0, 64.0], K), rng.choice([256.0, 512.0], K)]
    )
    demand = np.column_stack(
        [rng.choice([1.0, 2.0], N), rng.uniform(1, 16, N), rng.uniform(8, 128, N)]
    )
    eligible = rng.random((N, K)) < 0.5
    eligible[np.arange(N), rng.integers(0, K, N)] = True
    return FairnessProblem(
        capacity=capacity, demand=demand, weight=rng.choice([1.0, 2.0], N), eligible=eligible
    )


def test_worked_example_by_hand() -> None:
    # Two identical nodes c = 4, tenants d = 1 and 2: x = (4L, 2L) with 4L + 4L = 8, so L = 1.
    problem = FairnessProblem(capacity=[[4.0], [4.0]], demand=[[1.0], [2.0]])
    gamma = monopoly_tasks(problem)
    # Near the answer but not on it (node 0 over capacity): the finish needs the structure (all
    # four pairs tight), not the numbers.
    start = np.array([[2.002, 1.999], [1.0005, 0.9995]])
    exact = rdm_crossover(problem, gamma, np.ones(2, dtype=bool), start)
    assert exact is not None
    np.testing.assert_allclose(exact.sum(axis=1), [4.0, 2.0], rtol=1e-12)
    np.testing.assert_allclose(exact.T @ problem.demand[:, 0], [4.0, 4.0], rtol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_rdm_solve_on_tied_nodes_certifies_exactly(seed: int) -> None:
    problem = _classed(seed, K=30, N=25)
    result = solve(problem, mode="rdm")
    assert result.converged
    # Theorem 1 holds to rounding (the crossover solves the conditions' linear system).
    assert result.certificate_violation <= 1e-9
    assert feasibility_violation(problem, np.asarray(result.tasks), "rdm") <= 1e-9


def test_rdm_solve_with_binding_caps_certifies_exactly() -> None:
    base = _classed(7, K=30, N=25)
    free = np.asarray(solve(base, mode="rdm").totals)
    # Every third tenant capped at half of what it gets uncapped (so most of these caps bind).
    cap = np.where(np.arange(25) % 3 == 0, 0.5 * free, np.inf)
    problem = FairnessProblem(
        capacity=base.capacity,
        demand=base.demand,
        weight=base.weight,
        eligible=base.eligible,
        cap=cap,
    )
    result = solve(problem, mode="rdm")
    assert result.converged
    assert result.certificate_violation <= 1e-9
    # The instance exercises capped tenants (those at their cap need no bottleneck).
    assert np.isclose(result.totals[::3], cap[::3], rtol=1e-9).any()


@pytest.mark.parametrize("seed", range(4))
def test_crossover_from_a_few_sweeps_is_certified_or_declines(seed: int) -> None:
    problem = random_problem(300 + seed, K=8, N=10, p_eligible=0.6)
    rough = np.asarray(solve(problem, mode="rdm", max_sweeps=30, method="sweeps").tasks)
    exact = rdm_crossover(problem, monopoly_tasks(problem), np.ones(10, dtype=bool), rough)
    # A guess is never trusted by the solver; when one is returned here it must be exact.
    if exact is not None:
        assert certificate(problem, exact, "rdm") <= 1e-9


def test_fill_levels_give_each_tenant_its_bottleneck() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        U, M = int(rng.integers(1, 9)), 3
        demand = rng.uniform(0.1, 3, (U, M)) * (rng.random((U, M)) < 0.7)
        demand[np.arange(U), rng.integers(0, M, U)] += 0.5
        capacity = rng.uniform(5, 20, M)
        with np.errstate(divide="ignore"):
            gamma = np.where(demand > 0, capacity[None, :] / demand, np.inf).min(axis=1)
        phi = rng.uniform(0.5, 2, U)
        b = np.where(rng.random(U) < 0.5, 0.0, rng.uniform(0, 5, U))
        x, levels, frozen = rdm_fill_levels(gamma, phi, b, demand, capacity)
        use = demand.T @ x
        vds = (b + x) / (phi * gamma)
        for r in np.flatnonzero(np.isfinite(levels)):
            assert use[r] >= capacity[r] * (1 - 1e-9)  # a level belongs to a full resource
        for n in range(U):
            r = frozen[n]
            assert r >= 0 and demand[n, r] > 0
            if x[n] > 1e-12:
                assert vds[n] == pytest.approx(levels[r], rel=1e-9)
            else:
                assert vds[n] >= levels[r] * (1 - 1e-9)


def test_psdsf_policy_rejects_an_unknown_mode() -> None:
    with pytest.raises(
        policies.PolicyArgError, match=r"psdsf\.mode: 'both' is not one of tdm, rdm"
    ):
        policies.create("psdsf", {"mode": "both"})


def test_psdsf_policy_in_rdm_mode_solves_the_tenant_model_under_rdm() -> None:
    from tests.unit.snapshot_helpers import cluster, job, workload

    from walras.allocator import fairness
    from walras.core import snapshot
    from walras.core.tenants import fairness_problem, tenant_model

    jobs = [*workload()[:6], job("t2", {"k80": 2.0}, replicas=2, tenant="t2")]
    snap = cluster(jobs).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("psdsf", {"mode": "rdm"}).solve(snap, view)
    problem = fairness_problem(tenant_model(list(sol.jobs), view.nodes, snap.pools))
    rdm = fairness.solve(problem, mode="rdm")
    # The policy's tenant totals are an allocation that satisfies Theorem 1 (RDM).
    assert rdm.certificate_violation <= 1e-6
    assert list(sol.tenant_tasks.values()) == pytest.approx(np.asarray(rdm.totals).tolist())


def test_psdsf_rdm_hands_out_gpus_not_time() -> None:
    from tests.unit.snapshot_helpers import cluster, job

    from walras.allocator import fairness
    from walras.core import snapshot
    from walras.core.tenants import fairness_problem, tenant_model

    # On a v100 node (8 GPUs, 32 cores) a 1-GPU/16-core tenant and a 4-GPU/1-core tenant have
    # different dominant resources, so RDM gives their time shares x/γ a sum above 1 there.
    jobs = [
        *(
            job(f"cpu-{k}", {"v100": 1.0}, replicas=2, tenant="a", gpus=1, cpu="16")
            for k in range(4)
        ),
        *(
            job(f"gpu-{k}", {"v100": 1.0}, replicas=2, tenant="b", gpus=4, cpu="1")
            for k in range(4)
        ),
    ]
    snap = cluster(jobs).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("psdsf", {"mode": "rdm"}).solve(snap, view)
    problem = fairness_problem(tenant_model(list(sol.jobs), view.nodes, snap.pools))
    tasks = np.asarray(fairness.solve(problem, mode="rdm").tasks)
    gamma = fairness.monopoly_tasks(problem)
    y = np.where(gamma > 0, tasks / np.where(gamma > 0, gamma, 1.0), 0.0)
    assert y.sum(axis=0).max() > 1.0 + 1e-6  # the case that needs GPU budgets, not time
    gpus = np.array([j.replicas * int(g) for j, g in zip(sol.jobs, sol.gpus_per_pod, strict=True)])
    gpu_share = (sol.targets * gpus[:, None]).sum(axis=0) / view.node_gpus
    assert np.all(gpu_share <= 1 + 1e-9)
    # Each tenant's jobs get at least the GPUs its RDM pods hold on every node (4 jobs × 2 pods
    # can absorb a whole node): pods = x / throughput, times the tenant's GPUs per pod.
    pods = tasks / np.where(problem.throughput > 0, problem.throughput, 1.0)
    entitled = pods * problem.demand[:, :1] / problem.capacity[None, :, 0]
    for n, tenant in enumerate(problem.tenants):
        mine = np.array([j.namespace == tenant for j in sol.jobs])
        got = (sol.targets[mine] * gpus[mine, None]).sum(axis=0) / view.node_gpus
        assert np.all(got >= entitled[n] - 1e-9), tenant

"""POP (docs/algorithms.md#pop): partition, capacity split, merged feasibility, bounds.

Oracles: hand-derived splits and repair example, capacity/time feasibility checked directly on
the arrays, weak duality against the exact solver's dual bound, and lower bounds on the sharded
objective derived from the exact optimum restricted to each shard (derivations in the tests).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pricing_helpers import assert_feasible, random_problem, utility

from walras.allocator import fairness, gavel, pop, pricing
from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.certificates import feasibility_violation
from walras.allocator.gavel.max_min_fairness import MaxMinFairness
from walras.allocator.pricing.instances import paper_problem

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOLVES = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

uid_lists = st.lists(
    st.text(alphabet="abcdefghij-/0123456789", min_size=1, max_size=12), unique=True, max_size=60
)


# ---------------------------------------------------------------- partition


@FAST
@given(uid_lists, uid_lists, st.integers(1, 16))
def test_shard_of_a_job_ignores_unrelated_jobs_coming_and_going(
    base: list[str], others: list[str], k: int
) -> None:
    before = pop.assign_shards(base, k)
    mixed = [u for u in others if u not in set(base)]
    # Unrelated jobs arrive (interleaved) and half of the original jobs leave.
    after_uids = [u for pair in zip(base[::2], mixed, strict=False) for u in pair]
    after_uids += [u for u in base[::2] if u not in after_uids]
    after = dict(zip(after_uids, pop.assign_shards(after_uids, k).tolist(), strict=True))
    for uid, shard in zip(base, before.tolist(), strict=True):
        assert 0 <= shard < k
        if uid in after:
            assert after[uid] == shard


def test_shard_is_the_same_in_another_process_with_another_hash_seed() -> None:
    uids = [f"team-{i}/job-{i * 7}" for i in range(50)]
    here = pop.assign_shards(uids, 8).tolist()
    code = f"from walras.allocator import pop;print(pop.assign_shards({uids!r}, 8).tolist())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(out.stdout) == here


def test_bad_partition_inputs_are_named() -> None:
    with pytest.raises(InvalidProblem, match="k must be"):
        pop.assign_shards(["a"], 0)
    with pytest.raises(InvalidProblem, match="job 2: UID 'a' repeats job 0"):
        pop.assign_shards(["a", "b", "a"], 2)
    with pytest.raises(InvalidProblem, match="job 1: UID must be a non-empty"):
        pop.assign_shards(["a", ""], 2)


# ---------------------------------------------------------------- capacity split


def test_split_docstring_example() -> None:
    parts = pop.split_capacity([10, 7], 4)
    assert parts[:, 0].tolist() == [3, 3, 2, 2]
    assert parts[:, 1].tolist() == [1, 2, 2, 2]


def test_spare_units_go_to_the_shards_with_most_demand() -> None:
    parts = pop.split_capacity([10], 4, demand=[1, 5, 9, 2])
    assert parts[:, 0].tolist() == [2, 3, 3, 2]


@FAST
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=6),
    st.integers(1, 16),
    st.lists(st.floats(0.0, 10.0), min_size=16, max_size=16),
)
def test_integral_split_sums_exactly_and_rounds_each_share(
    cap: list[int], k: int, w: list[float]
) -> None:
    weights = np.array(w[:k]) + 1e-3
    parts = pop.split_capacity(np.array(cap, dtype=float), k, weights=weights)
    assert parts.shape == (k, len(cap))
    assert np.all(parts == np.round(parts)) and parts.min() >= 0
    assert parts.sum(axis=0).tolist() == [float(c) for c in cap]  # exact, whole units
    share = np.array(cap)[None, :] * (weights / weights.sum())[:, None]
    # Largest-remainder rounding: every part is its share rounded down or up.
    assert np.all(parts >= np.floor(share) - 1e-9) and np.all(parts <= np.ceil(share) + 1e-9)


@FAST
@given(
    st.lists(st.floats(1e-6, 1e6), min_size=1, max_size=6),
    st.integers(1, 16),
)
def test_fractional_split_never_exceeds_and_loses_at_most_rounding(
    cap: list[float], k: int
) -> None:
    parts = pop.split_capacity(np.array(cap), k, integral=False)
    for j, c in enumerate(cap):
        total = math.fsum(parts[:, j].tolist())
        assert total <= c
        # Each part c/k is within half an ulp of exact; at most k of them are nudged down.
        assert c - total <= 4 * k * math.ulp(c)


def test_empty_shards_get_no_capacity() -> None:
    plan = pop.make_plan(["only-job"], [8.0, 4.0], 4)
    s = int(plan.assignment[0])
    assert plan.capacity[s].tolist() == [8.0, 4.0]
    assert plan.capacity.sum() == 12.0


# ---------------------------------------------------------------- client splitting


def test_client_splitting_halves_the_largest() -> None:
    vc = pop.split_clients([8.0, 1.0, 1.0, 1.0], ["a", "b", "c", "d"], 0.5)
    # ⌊0.5·4⌋ = 2 splits: 8 → 4 + 4, then one 4 → 2 + 2 (smaller UID first on ties).
    assert vc.splits == 2
    assert vc.uids == ("a#00", "a#01", "a#1", "b", "c", "d")
    assert vc.fraction.tolist() == [0.25, 0.25, 0.5, 1.0, 1.0, 1.0]
    assert vc.owner.tolist() == [0, 0, 0, 1, 2, 3]
    x = np.array([[1.0], [0.0], [0.5], [0.2], [0.3], [0.4]])
    merged = pop.merge_virtual(vc, x, 4, weighted=True)
    assert merged[:, 0].tolist() == [0.5, 0.2, 0.3, 0.4]


def test_pricing_with_client_splitting_is_feasible_and_beats_its_virtual_objective() -> None:
    rng = np.random.default_rng(5)
    n = 300
    demand = np.ones(n)
    demand[:3] = 40.0  # three jobs far larger than the rest
    problem = pricing.PricingProblem(
        throughput=rng.uniform(0.1, 1.0, (n, 3)), capacity=[120.0, 90.0, 60.0], demand=demand
    )
    res = pop.solve_pricing(problem, 4, client_split=0.05, workers=1)
    assert res.run.splits == 15 and res.run.sharded
    assert_feasible(problem, np.asarray(res.allocation))
    # Jensen (pop.clients): u(Σ f_v t_v) ≥ Σ f_v u(t_v), so the real utility is at least the
    # sum of the shards' (virtual) objectives.
    virtual = math.fsum(s.objective for s in res.run.shards)
    assert res.utility >= virtual - 1e-9 * abs(virtual)
    assert res.utility == pytest.approx(utility(problem, np.asarray(res.throughput)))


# ---------------------------------------------------------------- price discovery


@pytest.mark.slow
@SOLVES
@given(
    st.integers(0, 10_000),
    st.integers(20, 160),
    st.integers(1, 4),
    st.integers(1, 8),
    st.sampled_from(["log", "linear", "alpha", "target"]),
    st.booleans(),
)
def test_pricing_merged_allocation_is_feasible(
    seed: int, n: int, m: int, k: int, kind: str, per_type: bool
) -> None:
    p0 = random_problem(np.random.default_rng(seed), n, m, kind, per_type_demand=per_type)
    # Every shard must fit every job's demand (else solve_pricing rightly raises, tested below).
    R = np.maximum(np.asarray(p0.capacity), k * p0.demand_matrix().max(axis=0))
    problem = pricing.PricingProblem(
        p0.throughput, R, p0.demand, p0.kind, p0.weight, p0.target, p0.alpha
    )
    res = pop.solve_pricing(problem, k, repair=True, workers=1)
    assert_feasible(problem, np.asarray(res.allocation))
    assert res.run.k == k and res.run.sharded == (k > 1)
    # Weak duality for the full problem: the merged allocation never beats g(p̄).
    assert res.utility <= res.dual_bound + 1e-9 * max(1.0, abs(res.dual_bound))
    assert res.utility == pytest.approx(
        utility(problem, np.asarray(res.throughput)), rel=1e-9, abs=1e-9
    )
    if res.repair is not None:
        assert res.repair.utility >= res.repair.utility_plain
        assert res.repair.recovered == res.repair.utility - res.repair.utility_plain


def test_k1_is_the_exact_solver() -> None:
    problem = random_problem(np.random.default_rng(3), 400, 4, "log")
    exact = pricing.solve(problem)
    res = pop.solve_pricing(problem, 1)
    assert not res.run.sharded and res.run.k == 1
    np.testing.assert_array_equal(res.allocation, exact.allocation)
    np.testing.assert_array_equal(res.prices, exact.prices)
    assert (res.utility, res.dual_bound, res.gap) == (exact.utility, exact.dual_bound, exact.gap)


def test_repair_never_lowers_utility_against_plain_pop() -> None:
    problem = random_problem(np.random.default_rng(11), 3000, 4, "log")
    plain = pop.solve_pricing(problem, 8, workers=1)
    repaired = pop.solve_pricing(problem, 8, repair=True, workers=1)
    assert repaired.repair is not None
    assert repaired.repair.utility_plain == plain.utility  # same shards, same first solves
    assert repaired.utility >= plain.utility
    assert_feasible(problem, np.asarray(repaired.allocation))


def _uids_in_shards(counts: list[int], k: int) -> list[str]:
    out: list[str] = []
    for s, c in enumerate(counts):
        names = (f"job-{i}" for i in range(10_000))
        out += [u for u in names if pop.shard_of(u, k) == s][:c]
    return out


def test_repair_reaches_the_hand_derived_optimum() -> None:
    # repair.py's docstring example: one type, R = 4, log utility, throughput 1, 6 jobs in
    # shard 0 and 4 in shard 1. Plain POP: R_s = 2, prices 6/2 = 3 and 4/2 = 2, utility
    # 6 log(1/3) + 4 log(1/2). Repair: capacities (2.4, 1.6), prices 2.5, utility 10 log(0.4).
    uids = _uids_in_shards([6, 4], 2)
    problem = pricing.PricingProblem(throughput=np.ones((10, 1)), capacity=[4.0])
    plain = pop.solve_pricing(problem, 2, uids=uids, eps=1e-9, max_iter=300, workers=1)
    np.testing.assert_allclose(plain.shard_prices[:, 0], [3.0, 2.0], rtol=1e-6)
    assert plain.utility == pytest.approx(6 * math.log(1 / 3) + 4 * math.log(1 / 2))
    res = pop.solve_pricing(problem, 2, uids=uids, eps=1e-9, max_iter=300, repair=True, workers=1)
    assert res.repair is not None and res.repair.within_tolerance
    np.testing.assert_allclose([s.capacity[0] for s in res.run.shards], [2.4, 1.6], rtol=1e-6)
    assert res.utility == pytest.approx(10 * math.log(0.4), abs=1e-6)
    assert res.repair.recovered == pytest.approx(
        10 * math.log(0.4) - 6 * math.log(1 / 3) - 4 * math.log(1 / 2), abs=1e-6
    )


@pytest.mark.slow
def test_sharded_utility_between_derived_bound_and_exact_dual() -> None:
    problem = paper_problem(20_000, seed=2)
    exact = pricing.solve(problem, eps=1e-5, max_iter=300)
    k = 4
    res = pop.solve_pricing(problem, k, eps=1e-5, max_iter=300, workers=1)
    # Weak duality: every feasible allocation, POP's included, is ≤ U* ≤ g(p) for any p.
    assert res.utility <= exact.dual_bound
    # Lower bound. Restrict the exact allocation x* to shard s: it uses r_s = Σ_{i∈s} d_i x*_i,
    # so c_s x* with c_s = min(1, min_j R_sj / r_sj) is feasible for the shard (row sums only
    # shrink). For log utility (weight 1) its utility is Σ_{i∈s} log(c_s t*_i) =
    # Σ_{i∈s} log t*_i − n_s log(1/c_s) ≤ U_s*. The shard solver returns U_s ≥ U_s* − gap_s.
    # Summing: U_POP ≥ U(x*) − Σ_s n_s log(1/c_s) − Σ_s gap_s.
    X = np.asarray(exact.allocation)
    D = problem.demand_matrix()
    plan = pop.make_plan([str(i) for i in range(problem.n)], problem.capacity, k)
    bound = utility(problem, np.asarray(exact.throughput))
    for s, rows in enumerate(plan.members):
        use = (D[rows] * X[rows]).sum(axis=0)
        cap = np.asarray(res.run.shards[s].capacity)
        c_s = min(1.0, float(np.min(cap / use)))
        bound -= len(rows) * math.log(1.0 / c_s) + res.run.shards[s].certificate
    assert res.utility >= bound
    # And the merged certificate brackets the true loss: U* − U_POP ≤ g(p̄) − U_POP = gap.
    assert exact.utility - res.utility <= res.gap


def test_pricing_job_that_fits_no_shard_is_named() -> None:
    problem = pricing.PricingProblem(
        throughput=np.ones((4, 1)), capacity=[8.0], demand=[1.0, 1.0, 6.0, 1.0]
    )
    uids = ["a", "b", "c", "d"]
    with pytest.raises(InvalidProblem, match=r"job 2 \('c'\).*client_split"):
        pop.solve_pricing(problem, 4, uids=uids, workers=1)


def test_worker_processes_give_the_in_process_answer() -> None:
    problem = random_problem(np.random.default_rng(8), 600, 3, "log")
    one = pop.solve_pricing(problem, 4, repair=True, workers=1)
    two = pop.solve_pricing(problem, 4, repair=True, workers=2)
    assert two.run.workers == 2 and one.run.workers == 1
    np.testing.assert_array_equal(one.allocation, two.allocation)
    assert one.utility == two.utility


# ---------------------------------------------------------------- PS-DSF


def _fair_problem(seed: int, K: int, N: int) -> fairness.FairnessProblem:
    rng = np.random.default_rng(seed)
    capacity = np.column_stack([np.full(K, 8.0), rng.choice([32.0, 64.0], K)])
    demand = np.column_stack([rng.choice([1.0, 2.0], N), rng.uniform(1, 8, N)])
    eligible = rng.random((N, K)) < 0.5
    eligible[np.arange(N), rng.integers(0, K, N)] = True
    return fairness.FairnessProblem(
        capacity=capacity, demand=demand, weight=rng.choice([1.0, 2.0], N), eligible=eligible
    )


@pytest.mark.slow
@SOLVES
@given(st.integers(0, 1000), st.integers(2, 12), st.integers(2, 30), st.integers(1, 6))
def test_fairness_merged_is_feasible_and_each_shard_is_ps_dsf(
    seed: int, K: int, N: int, k: int
) -> None:
    problem = _fair_problem(seed, K, N)
    for mode in ("tdm", "rdm"):
        res = pop.solve_fairness(problem, k, mode=mode, workers=1)
        assert feasibility_violation(problem, np.asarray(res.tasks), mode) <= 1e-9
        assert res.certificate_violation == pytest.approx(
            fairness.certificate(problem, np.asarray(res.tasks), mode)
        )
        if mode == "tdm":  # TDM is solved exactly per shard: Theorem 2 holds in every shard.
            assert res.shard_violation <= 1e-6


def test_fairness_shard_certificates_hold_on_the_shard_problems() -> None:
    problem = _fair_problem(4, 10, 40)
    k = 4
    res = pop.solve_fairness(problem, k, mode="tdm", workers=1)
    plan = pop.make_plan(problem.tenants, problem.capacity, k, integral=False)
    tasks = np.asarray(res.tasks)
    for s, rows in enumerate(plan.members):
        if len(rows) == 0:
            continue
        shard = fairness.FairnessProblem(
            capacity=plan.capacity[s],
            demand=problem.demand[rows],
            weight=problem.phi[rows],
            eligible=problem.delta[rows],
        )
        assert fairness.certificate(shard, tasks[rows], "tdm") <= 1e-6


def test_fairness_k1_is_the_exact_solver() -> None:
    problem = _fair_problem(1, 6, 12)
    for mode in ("tdm", "rdm"):
        exact = fairness.solve(problem, mode=mode)
        res = pop.solve_fairness(problem, 1, mode=mode)
        assert not res.run.sharded
        np.testing.assert_array_equal(res.tasks, exact.tasks)
        assert res.certificate_violation == exact.certificate_violation


# ---------------------------------------------------------------- Gavel (any row-wise policy)


def _vertex_policy() -> MaxMinFairness:
    # Gavel's max-min LP solved by HiGHS alone (a vertex of the optimal face). These tests are
    # about POP's partition and merge, not about which optimum the policy picks, and the LP
    # is the part of the policy the bounds below are derived from.
    return MaxMinFairness(aware=True, central=False)


def _gavel_inputs(seed: int, J: int, per_type: int) -> gavel.GavelInputs:
    rng = np.random.default_rng(seed)
    return gavel.GavelInputs(
        throughputs=rng.uniform(0.5, 5.0, (J, 3)),
        scale_factors=rng.choice([1, 1, 1, 2, 4], J),
        capacity=np.full(3, float(per_type)),
        job_ids=np.arange(J),
    )


@pytest.mark.slow
@SOLVES
@given(
    st.integers(0, 1000),
    st.integers(4, 40),
    st.integers(1, 6),
    st.sampled_from(["equal", "demand"]),
)
def test_gavel_merged_allocation_is_feasible(seed: int, J: int, k: int, balance: str) -> None:
    inputs = _gavel_inputs(seed, J, 12)
    res = pop.solve_gavel(inputs, k, _vertex_policy(), balance=balance, workers=1)  # type: ignore[arg-type]
    x = np.asarray(res.allocation)
    assert x.shape == (J, 3) and x.min() >= 0
    assert x.sum(axis=1).max() <= 1 + 1e-9
    use = (inputs.scale_factors[:, None] * x).sum(axis=0)
    assert np.all(use <= inputs.capacity * (1 + 1e-9))


def test_gavel_k1_is_the_policy() -> None:
    inputs = _gavel_inputs(2, 30, 8)
    exact = _vertex_policy().allocate(inputs)
    res = pop.solve_gavel(inputs, 1, _vertex_policy())
    assert not res.run.sharded
    np.testing.assert_array_equal(res.allocation, exact)


def test_gavel_max_min_per_shard_is_above_the_derived_bound() -> None:
    # Equal split with every type's GPUs divisible by k: each shard has the same type mix, so
    # Gavel's normalisation prop_j = Σ_t thr_jt cap_t / Σ cap (hence the objective's
    # coefficients) is the same in every shard as in the full problem. Restrict the exact
    # optimum x* (value s*) to shard s: it uses u_st = Σ_{j∈s} k_j x*_jt GPUs of type t;
    # c_s x* with c_s = min(1, min_t cap_st / u_st) is feasible there and has value c_s s*
    # (linear objective). So the shard's max-min value, hence every job's value in it, is at
    # least c_s s* (HiGHS's optimality tolerance is far below the 1e-6 allowed here).
    k, J = 4, 160
    inputs = _gavel_inputs(6, J, 32)
    thr, sf, cap = inputs.throughputs, inputs.scale_factors.astype(float), inputs.capacity
    coef = thr * sf[:, None] / (thr @ (cap / cap.sum()))[:, None]
    x_star = _vertex_policy().allocate(inputs)
    s_star = float((coef * x_star).sum(axis=1).min())
    res = pop.solve_gavel(inputs, k, _vertex_policy(), balance="equal", workers=1)
    value = (coef * np.asarray(res.allocation)).sum(axis=1)
    plan = pop.make_plan(pop.gavel_uids(inputs.job_ids), cap, k, sizes=sf)
    for s, rows in enumerate(plan.members):
        used = (sf[rows, None] * x_star[rows]).sum(axis=0)
        c_s = min(1.0, float(np.min(plan.capacity[s] / used)))
        assert value[rows].min() >= c_s * s_star * (1 - 1e-6)


def test_worker_count_is_bounded_by_shards_and_cores() -> None:
    from walras.allocator.pop import shards

    assert shards.choose_workers(8, 1) == 1
    assert shards.choose_workers(3, 16) == 3  # never more processes than shards
    assert 1 <= shards.choose_workers(8, None) <= min(8, len(os.sched_getaffinity(0)))
    with pytest.raises(InvalidProblem, match="workers must be"):
        shards.choose_workers(4, 0)

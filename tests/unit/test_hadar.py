"""Tests for Hadar/HadarE (``walras.allocator.hadar``, docs/algorithms.md#hadar-and-hadare).

Oracles, not stored numbers: the price formula's endpoints and worked example, payoffs recomputed
from the utility formula, FIND_ALLOC against enumerating every node-level allocation, the queue's
choice against enumerating every subset (with an independent brute-force best response), the
restart rule at its exact break-even point, the HadarE split recomputed from the gangs, the
competitive ratio against a brute-force optimum, and structural invariants under hypothesis.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.hadar_helpers import RunResult, Workload, run, small_cluster

from walras.allocator.errors import InvalidProblem
from walras.allocator.hadar import (
    HadarInputs,
    HadarPlan,
    Horizon,
    Hyperbolic,
    InverseSlowdown,
    LinearDecay,
    competitive_ratio,
    default_bounds,
    make_inputs,
    plan_round,
    price,
)
from walras.allocator.hadar.find_alloc import find_alloc, layout

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

L = 360.0
RESTART = 10.0


# ---------------------------------------------------------------------------------------------
# Independent oracles
# ---------------------------------------------------------------------------------------------


def utility(
    weight: float, gang: int, total: float, best_speed: float, tau: float, power: float = 1.0
) -> float:
    """The default utility written out: ``weight · W · (ideal / τ)^p``, ideal = total / best."""
    return weight * gang * ((total / best_speed) / tau) ** power


def compositions(total: int, caps: list[int]) -> Iterator[tuple[int, ...]]:
    """Every vector ``w`` with ``0 <= w_i <= caps[i]`` and ``sum(w) == total``."""
    for w in itertools.product(*(range(c + 1) for c in caps)):
        if sum(w) == total:
            yield w


def brute_best_nodes(
    speed: FloatArray,
    gang: int,
    node_type: IntArray,
    node_free: IntArray,
    type_price: FloatArray,
    value: Callable[[float], float],
) -> float:
    """Max payoff over every node-level allocation of the gang (``-inf`` if none fits)."""
    best = -math.inf
    for n in compositions(gang, [int(f) for f in node_free]):
        used = [int(node_type[k]) for k in range(len(n)) if n[k] > 0]
        rate = min(float(speed[t]) for t in used)
        if rate <= 0:
            continue
        cost = sum(n[k] * float(type_price[node_type[k]]) for k in range(len(n)))
        best = max(best, value(rate) - cost)
    return best


def brute_best_types(
    speed: FloatArray,
    gang: int,
    free: list[int],
    type_price: FloatArray,
    value: Callable[[float], float],
) -> tuple[float, tuple[int, ...] | None]:
    """Max payoff over every type-count vector within pooled ``free``, and that vector."""
    best, arg = -math.inf, None
    for w in compositions(gang, free):
        used = [t for t in range(len(w)) if w[t] > 0]
        rate = min(float(speed[t]) for t in used)
        if rate <= 0:
            continue
        pay = value(rate) - sum(w[t] * float(type_price[t]) for t in used)
        if pay > best:
            best, arg = pay, w
    return best, arg


def pooled_price(
    gamma: FloatArray, cap: FloatArray, u_min: FloatArray, u_max: FloatArray
) -> FloatArray:
    """Eq. 5 with pooled capacity, written out independently of ``prices.price``."""
    out = np.empty(len(cap))
    for r in range(len(cap)):
        out[r] = u_min[r] * (u_max[r] / u_min[r]) ** (gamma[r] / cap[r]) if cap[r] > 0 else np.inf
    return out


def check_plan_invariants(inputs: HadarInputs, plan: HadarPlan) -> None:
    """Capacity, whole gangs, rates and forking rules, recomputed from the plan."""
    used = np.zeros(inputs.n_nodes, dtype=np.int64)
    for jp in plan.jobs:
        j = jp.job
        W = int(inputs.replicas[j])
        assert jp.gangs, "a placed job has a gang"
        if not (inputs.forkable[j]):
            assert len(jp.gangs) == 1, f"non-forkable job {j} was forked"
        row = np.zeros(inputs.n_nodes, dtype=np.int64)
        seen_nodes: set[int] = set()
        for g in jp.gangs:
            assert sum(p for _, p in g.nodes) == W, f"job {j}: gang is not whole"
            assert all(p > 0 for _, p in g.nodes)
            nodes = {k for k, _ in g.nodes}
            assert not (nodes & seen_nodes), f"job {j}: two gangs share a node"
            seen_nodes |= nodes
            if len(jp.gangs) > 1 and g is not jp.gangs[0]:
                assert len(g.nodes) == 1, "a copy is packed on one node"
            slowest = min(float(inputs.throughput[j, inputs.node_type[k]]) for k in nodes)
            assert g.rate == pytest.approx(slowest), "a gang runs at its slowest member's rate"
            for k, p in g.nodes:
                row[k] += p
        assert tuple((int(k), int(row[k])) for k in np.flatnonzero(row)) == jp.placement
        assert jp.rate == pytest.approx(sum(g.rate for g in jp.gangs))
        assert jp.kept == bool((row == inputs.current[j]).all())
        used += row
    assert (used <= inputs.node_free).all(), "a node is over capacity"
    placed = {jp.job for jp in plan.jobs}
    active = (inputs.remaining > 0) & (inputs.throughput.max(axis=1) > 0)
    assert set(plan.waiting) == {int(j) for j in np.flatnonzero(active)} - placed


# ---------------------------------------------------------------------------------------------
# Price function and bounds
# ---------------------------------------------------------------------------------------------


def test_price_endpoints_and_worked_example() -> None:
    cap = np.array([4.0])
    lo, hi = np.array([0.01]), np.array([1.0])
    got = [float(price(np.array([g]), cap, lo, hi)[0]) for g in range(5)]
    # 0.01 · 100^(γ/4): 0.01, 0.01·√10, 0.1, 0.1·√10, 1 (the module docstring's example).
    assert got == pytest.approx([0.01, 0.01 * math.sqrt(10), 0.1, 0.1 * math.sqrt(10), 1.0])


@given(
    cap=st.integers(1, 64),
    lo=st.floats(1e-6, 10.0),
    ratio=st.floats(1.0, 1e6),
)
@settings(max_examples=60, deadline=None)
def test_price_monotone_with_endpoints(cap: int, lo: float, ratio: float) -> None:
    c, u_min, u_max = np.array([float(cap)]), np.array([lo]), np.array([lo * ratio])
    ks = np.array([float(price(np.array([g]), c, u_min, u_max)[0]) for g in range(cap + 1)])
    assert ks[0] == pytest.approx(lo)
    assert ks[-1] == pytest.approx(lo * ratio)
    assert (np.diff(ks) >= -1e-12 * ks[1:]).all()
    if ratio > 1.0 + 1e-9:
        assert (np.diff(ks) > 0).all()


def test_price_of_a_type_without_capacity_is_infinite() -> None:
    out = price(np.zeros(2), np.array([0.0, 2.0]), np.ones(2), np.full(2, 4.0))
    assert out[0] == math.inf and out[1] == pytest.approx(1.0)


def test_default_bounds_follow_their_definition() -> None:
    thr = np.array([[4.0, 1.0], [2.0, 2.0]])
    inputs = make_inputs(
        thr,
        [1, 2],
        [400.0, 800.0],
        [0, 1, 1],
        [2, 1, 1],
        elapsed=[100.0, 0.0],
        total_work=[800.0, 800.0],
    )
    u_min, u_max = default_bounds(inputs)
    ideal = [800.0 / 4.0, 800.0 / 2.0]

    def per_gpu(j: int, t: int, restart: float) -> float:
        tau = [100.0, 0.0][j] + restart + [400.0, 800.0][j] / thr[j, t]
        return ideal[j] / tau  # weight 1, and U / W = shape

    for t in range(2):
        assert u_max[t] == pytest.approx(max(per_gpu(0, t, 0.0), per_gpu(1, t, 0.0)))
    # Worst utility (slowest type, restart paid) over 2 × (4 pooled GPUs).
    worst = min(1 * per_gpu(0, 1, RESTART), 2 * per_gpu(1, 0, RESTART))
    assert u_min == pytest.approx(np.full(2, worst / 8.0))


# ---------------------------------------------------------------------------------------------
# Payoff and FIND_ALLOC
# ---------------------------------------------------------------------------------------------


def test_payoff_of_a_lone_job_is_utility_minus_price() -> None:
    thr = np.array([[3.0, 1.5]])
    inputs = make_inputs(
        thr,
        [2],
        [900.0],
        [0, 1],
        [4, 4],
        total_work=[1200.0],
        u_min=[0.05, 0.05],
        u_max=[2.0, 2.0],
    )
    plan = plan_round(inputs)
    jp = plan.job(0)
    assert jp is not None and jp.placement == ((0, 2),)
    # Both GPUs priced at γ = 0 (U_min); utility at τ = restart + rem / rate.
    u = utility(1.0, 2, 1200.0, 3.0, RESTART + 900.0 / 3.0)
    assert jp.utility == pytest.approx(u)
    assert jp.cost == pytest.approx(2 * 0.05)
    assert jp.payoff == pytest.approx(u - 0.1)
    # After the job, type 0 has 2 of 4 GPUs taken: U_min (U_max/U_min)^(1/2).
    assert plan.type_prices[0] == pytest.approx(0.05 * 40**0.5)


def random_market(
    rng: np.random.Generator,
) -> tuple[FloatArray, int, IntArray, IntArray, FloatArray]:
    T = int(rng.integers(1, 4))
    K = int(rng.integers(1, 5))
    speed = rng.uniform(0.5, 5.0, T) * (rng.random(T) < 0.85)
    node_type = rng.integers(0, T, K)
    node_free = rng.integers(0, 4, K)
    gang = int(rng.integers(1, 5))
    type_price = rng.uniform(0.0, 2.0, T)
    return speed, gang, node_type, node_free, type_price


def test_find_alloc_matches_enumerating_every_node_allocation() -> None:
    rng = np.random.default_rng(7)
    feasible_cases = 0
    for _ in range(400):
        speed, gang, node_type, node_free, type_price = random_market(rng)
        T = speed.shape[0]
        rem, ela = float(rng.uniform(10, 5000)), float(rng.uniform(0, 3000))

        def value_scalar(
            rate: float, rem: float = rem, ela: float = ela, gang: int = gang
        ) -> float:
            return gang * 3.0 * 100.0 / (ela + RESTART + rem / rate)

        def value(
            rate: FloatArray, rem: float = rem, ela: float = ela, gang: int = gang
        ) -> FloatArray:
            return gang * 3.0 * 100.0 / (ela + RESTART + rem / rate)

        pooled = np.bincount(node_type, weights=node_free, minlength=T).astype(np.int64)
        best = find_alloc(speed, gang, pooled[None, :], type_price[None, :], value)
        want = brute_best_nodes(speed, gang, node_type, node_free, type_price, value_scalar)
        if want == -math.inf:
            assert best.payoff[0] == -math.inf
            continue
        feasible_cases += 1
        assert best.payoff[0] == pytest.approx(want, rel=1e-9, abs=1e-12)
        # The returned counts realise the payoff, and the layout puts them on real nodes.
        counts = best.counts[0]
        used = np.flatnonzero(counts)
        rate = float(speed[used].min())
        assert best.rate[0] == pytest.approx(rate)
        assert value_scalar(rate) - float(counts @ type_price) == pytest.approx(want)
        free = node_free.astype(np.int64).copy()
        nodes = layout(counts, free, node_type)
        assert sum(p for _, p in nodes) == gang and (free >= 0).all()
        per_type = np.zeros(T, dtype=np.int64)
        for k, p in nodes:
            per_type[node_type[k]] += p
        assert (per_type == counts).all()
    assert feasible_cases > 150  # the sample exercises the search, not just infeasibility


def test_layout_packs_a_gang_on_one_node_when_one_can_hold_it() -> None:
    node_type = np.array([0, 0, 0, 1])
    free = np.array([2, 3, 1, 4])
    assert layout(np.array([3, 0]), free.copy(), node_type) == ((1, 3),)  # best fit
    # Four type-0 GPUs need two nodes: largest first (3), then the best fit for 1 (node 2).
    assert layout(np.array([4, 0]), free.copy(), node_type) == ((1, 3), (2, 1))


def test_mixed_type_gang_runs_at_its_slowest_members_rate() -> None:
    # Two V100 and two K80 free: a gang of 3 must mix types.
    thr = np.array([[5.0, 2.0]])
    inputs = make_inputs(thr, [3], [1000.0], [0, 1], [2, 2], u_min=[0.01] * 2, u_max=[1.0] * 2)
    plan = plan_round(inputs)
    jp = plan.job(0)
    assert jp is not None
    assert {inputs.node_type[k] for k, _ in jp.placement} == {0, 1}
    assert jp.rate == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------
# The queue's choice
# ---------------------------------------------------------------------------------------------


def brute_queue(
    thr: FloatArray,
    gangs: list[int],
    rem: list[float],
    cap: FloatArray,
    u_min: FloatArray,
    u_max: FloatArray,
) -> float:
    """Max total payoff over subsets, admitted in index order at their best response."""
    n = thr.shape[0]
    best_total = 0.0
    for subset in itertools.product((False, True), repeat=n):
        free = [int(c) for c in cap]
        total = 0.0
        ok = True
        for j in range(n):
            if not subset[j]:
                continue
            gamma = cap - np.array(free, dtype=np.float64)
            prices = pooled_price(gamma, cap, u_min, u_max)

            def value(rate: float, j: int = j) -> float:
                return utility(1.0, gangs[j], rem[j], float(thr[j].max()), RESTART + rem[j] / rate)

            pay, w = brute_best_types(thr[j], gangs[j], free, prices, value)
            if w is None or not pay > 0:
                ok = False
                break
            total += pay
            free = [f - x for f, x in zip(free, w, strict=True)]
        if ok:
            best_total = max(best_total, total)
    return best_total


def test_queue_choice_maximises_total_payoff_over_subsets() -> None:
    rng = np.random.default_rng(11)
    beat_greedy = 0
    for _ in range(40):
        n = int(rng.integers(2, 6))
        T = 2
        thr = rng.uniform(0.5, 4.0, (n, T))
        gangs = [int(g) for g in rng.integers(1, 4, n)]
        rem = [float(r) for r in rng.uniform(100.0, 5000.0, n)]
        node_type = np.array([0, 0, 1, 1])
        node_free = rng.integers(0, 3, 4)
        # A narrow price range makes jobs compete: admitting one can cost the others more.
        # Bounds differ per type so that no two allocations tie in payoff (on a tie FIND_ALLOC
        # and the enumeration may pick different, equally good, allocations).
        u_min = rng.uniform(0.05, 0.3, T)
        u_max = u_min * rng.uniform(2.0, 20.0, T)
        inputs = make_inputs(thr, gangs, rem, node_type, node_free, u_min=u_min, u_max=u_max)
        cap = np.bincount(node_type, weights=node_free, minlength=T)
        want = brute_queue(thr, gangs, rem, cap, u_min, u_max)
        dp = plan_round(inputs, method="dp")
        greedy = plan_round(inputs, method="greedy")
        assert dp.method == "dp" and greedy.method == "greedy"
        assert dp.total_payoff == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert greedy.total_payoff <= want + 1e-9
        beat_greedy += greedy.total_payoff < want - 1e-9
        check_plan_invariants(inputs, dp)
    assert beat_greedy > 0  # the sample contains cases where maximising payoff matters


def test_auto_falls_back_to_greedy_above_the_cell_budget() -> None:
    inputs = make_inputs(np.ones((3, 1)), [1, 1, 1], [10.0] * 3, [0], [4])
    assert plan_round(inputs, dp_max_cells=15).method == "dp"  # 3 jobs × 5 states
    assert plan_round(inputs, dp_max_cells=14).method == "greedy"


# ---------------------------------------------------------------------------------------------
# Incremental: keep unless moving gains more than the restart
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("margin", [-1.0, 1.0])
def test_running_job_moves_only_when_the_time_saved_exceeds_the_restart(margin: float) -> None:
    # Equal flat prices on both types: the cost of keeping and of moving is the same, so moving
    # pays iff the projected completion improves, i.e. rem/slow - rem/fast > restart.
    fast, slow = 2.0, 1.0
    rem = (RESTART + margin) / (1.0 / slow - 1.0 / fast)
    thr = np.array([[fast, slow]])
    current = np.array([[0, 1]])
    inputs = make_inputs(
        thr,
        [1],
        [rem],
        [0, 1],
        [1, 1],
        current=current,
        total_work=[1000.0],
        elapsed=[50.0],
        u_min=[0.1, 0.1],
        u_max=[0.1, 0.1],
    )
    jp = plan_round(inputs).job(0)
    assert jp is not None
    if margin > 0:
        assert jp.moved and not jp.kept and jp.placement == ((0, 1),)
    else:
        assert jp.kept and not jp.moved and jp.placement == ((1, 1),)


def test_backfill_gives_idle_gpus_to_jobs_with_no_positive_payoff() -> None:
    # Flat prices above any per-GPU utility (shape ≤ 1, weight 1): no payoff is positive.
    thr = np.array([[1.0], [2.0]])
    inputs = make_inputs(thr, [1, 2], [100.0, 100.0], [0, 0], [2, 1], u_min=[5.0], u_max=[5.0])
    assert plan_round(inputs).jobs == ()
    plan = plan_round(inputs, backfill=True)
    check_plan_invariants(inputs, plan)
    assert [jp.job for jp in plan.jobs] == [0, 1]  # queue order, both fit in 3 GPUs
    assert all(jp.backfilled and jp.payoff <= 0 for jp in plan.jobs)


def test_running_jobs_are_not_preempted_for_waiting_jobs() -> None:
    thr = np.array([[1.0], [1.0], [50.0]])
    current = np.array([[2, 0], [0, 2], [0, 0]])
    inputs = make_inputs(
        thr,
        [2, 2, 2],
        [1e5, 1e5, 1e5],
        [0, 0],
        [2, 2],
        current=current,
        weight=[1.0, 1.0, 100.0],
    )
    plan = plan_round(inputs)
    assert [jp.job for jp in plan.jobs] == [0, 1]
    assert all(jp.kept for jp in plan.jobs)
    assert plan.waiting == (2,)


# ---------------------------------------------------------------------------------------------
# HadarE
# ---------------------------------------------------------------------------------------------


def forked_inputs(remaining: float, forkable: bool = True, **kw: object) -> HadarInputs:
    thr = np.array([[3.0, 2.0, 1.0]])
    return make_inputs(
        thr,
        [1],
        [remaining],
        [0, 1, 2],
        [1, 1, 1],
        forkable=[forkable],
        total_work=[1e6],
        **kw,  # type: ignore[arg-type]  # the remaining keywords are typed
    )


def test_hadare_splits_remaining_steps_in_proportion_to_throughput() -> None:
    plan = plan_round(forked_inputs(1e5), fork_jobs=True)
    jp = plan.job(0)
    assert jp is not None and jp.forked and not jp.last_round
    assert sorted(k for k, _ in jp.placement) == [0, 1, 2]  # one copy per node with room
    steps = {g.nodes[0][0]: g.steps for g in jp.gangs}
    assert sum(steps.values()) == pytest.approx(1e5)
    # Every copy is new (same restart), so the shares follow the rates 3 : 2 : 1.
    assert steps[0] == pytest.approx(1e5 * 3 / 6)
    assert steps[1] == pytest.approx(1e5 * 2 / 6)
    assert steps[2] == pytest.approx(1e5 * 1 / 6)
    assert jp.rate == pytest.approx(6.0)


def test_hadare_last_round_gives_the_slower_copies_to_another_job() -> None:
    # Job 0 can finish this round on its fastest copy alone (3 × 350 ≥ 1049); job 1, with a
    # million steps left, takes the other two nodes (the Hadar paper: the fastest β nodes).
    remaining = 3.0 * (L - RESTART) - 1.0
    thr = np.array([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    inputs = make_inputs(thr, [1, 1], [remaining, 1e6], [0, 1, 2], [1, 1, 1], forkable=[True, True])
    plan = plan_round(inputs, fork_jobs=True)
    first, second = plan.job(0), plan.job(1)
    assert first is not None and first.last_round
    assert [k for k, _ in first.placement] == [0]
    assert first.gangs[0].steps == pytest.approx(remaining)
    assert second is not None and not second.last_round
    assert [k for k, _ in second.placement] == [1, 2]


@pytest.mark.parametrize(
    "remaining",
    [
        3.0 * (L - RESTART) - 1.0,  # the fastest copy alone could finish
        5.0 * (L - RESTART) - 1.0,  # the two fastest could
        6.0 * (L - RESTART) - 1.0,  # only all three can, just
    ],
)
def test_hadare_last_round_alone_keeps_every_copy_and_they_finish_together(
    remaining: float,
) -> None:
    # No other job wants the slower nodes, so dropping copies would only leave GPUs idle: every
    # copy stays (all new, same restart) and the shares follow the rates 3 : 2 : 1, so each copy
    # ends at RESTART + remaining / 6, within the round.
    plan = plan_round(forked_inputs(remaining), fork_jobs=True)
    jp = plan.job(0)
    assert jp is not None and jp.last_round
    assert sorted(k for k, _ in jp.placement) == [0, 1, 2]
    assert sum(g.steps for g in jp.gangs) == pytest.approx(remaining)
    end = RESTART + remaining / 6.0
    assert end <= L
    for g in jp.gangs:
        assert RESTART + g.steps / g.rate == pytest.approx(end)


def test_hadare_never_forks_non_forkable_jobs_and_hadar_never_forks() -> None:
    assert len(plan_round(forked_inputs(1e5, forkable=False), fork_jobs=True).jobs[0].gangs) == 1
    assert len(plan_round(forked_inputs(1e5), fork_jobs=False).jobs[0].gangs) == 1


def test_hadare_copies_only_on_nodes_that_hold_a_whole_gang() -> None:
    thr = np.array([[2.0, 2.0]])
    inputs = make_inputs(thr, [2], [1e5], [0, 1, 1], [2, 1, 1], forkable=[True])
    jp = plan_round(inputs, fork_jobs=True).job(0)
    assert jp is not None
    # Nodes 1 and 2 have one GPU each: they can hold no 2-GPU copy (a spread gang is no copy).
    assert len(jp.gangs) == 1


def test_hadare_keeps_a_copy_in_place() -> None:
    current = np.array([[0, 1, 1]])
    inputs = forked_inputs(1e5, current=current)
    jp = plan_round(inputs, fork_jobs=True).job(0)
    assert jp is not None
    kept = {g.nodes[0][0] for g in jp.gangs if g.kept}
    assert kept == {1, 2}


@pytest.fixture(scope="module")
def hadare_run() -> tuple[Workload, RunResult]:
    work = small_cluster()
    return work, run(work, fork_jobs=True)


def test_hadare_leaves_no_gpu_idle_that_a_copy_could_use(
    hadare_run: tuple[Workload, RunResult],
) -> None:
    # Hadar's corollary, for multi-GPU nodes: a GPU stays idle only if every job that is not
    # in its last round already has a copy on that node (one copy per node) or cannot fit there.
    work, result = hadare_run
    for plan in result.plans:
        used = np.zeros(len(work.node_free), dtype=np.int64)
        on: dict[int, set[int]] = {}
        for jp in plan.jobs:
            on[jp.job] = {k for k, _ in jp.placement}
            for k, p in jp.placement:
                used[k] += p
        open_jobs = [jp.job for jp in plan.jobs if not jp.last_round] + list(plan.waiting)
        for k in np.flatnonzero(used < work.node_free):
            room = int(work.node_free[k] - used[k])
            for j in open_jobs:
                assert k in on.get(j, set()) or work.replicas[j] > room
    assert math.isfinite(result.ttd)


def test_hadare_progress_of_copies_sums_to_total_work(
    hadare_run: tuple[Workload, RunResult],
) -> None:
    work, result = hadare_run
    # The helper completes a job only when its gangs' summed progress reaches its total work;
    # every job completes, no later than the makespan, and not faster than alone on all 20 GPUs.
    assert np.isfinite(result.completion).all()
    assert result.completion.max() == pytest.approx(result.ttd)
    best_alone = work.total_work / (work.throughput[:, work.node_type].sum(axis=1) * 4)
    assert (result.completion >= best_alone).all()


# ---------------------------------------------------------------------------------------------
# Competitive ratio (paper Theorem 2, assumptions in prices.py)
# ---------------------------------------------------------------------------------------------


def brute_opt(thr: FloatArray, gangs: list[int], rem: list[float], cap: list[int]) -> float:
    """Max total utility of the one-round problem: every subset and type-count allocation."""
    n = len(gangs)
    options: list[list[tuple[float, tuple[int, ...]]]] = []
    for j in range(n):
        opts = [(0.0, tuple(0 for _ in cap))]
        for w in compositions(gangs[j], cap):
            used = [t for t in range(len(w)) if w[t] > 0]
            rate = min(float(thr[j, t]) for t in used)
            tau = RESTART + rem[j] / rate
            opts.append((utility(1.0, gangs[j], rem[j], float(thr[j].max()), tau), w))
        options.append(opts)
    best = 0.0
    for combo in itertools.product(*options):
        load = np.sum([w for _, w in combo], axis=0)
        if (load <= np.array(cap)).all():
            best = max(best, sum(u for u, _ in combo))
    return best


def test_greedy_is_within_the_competitive_ratio_of_the_optimum() -> None:
    rng = np.random.default_rng(5)
    for _ in range(12):
        n = int(rng.integers(3, 6))
        thr = rng.uniform(0.5, 4.0, (n, 2))
        gangs = [int(g) for g in rng.integers(1, 3, n)]
        rem = [float(r) for r in rng.uniform(100.0, 5000.0, n)]
        node_type = np.array([0, 0, 0, 1, 1, 1])
        node_free = np.full(6, 2)
        inputs = make_inputs(thr, gangs, rem, node_type, node_free)
        plan = plan_round(inputs, method="greedy")
        opt = brute_opt(thr, gangs, rem, [6, 6])
        u_min, u_max = default_bounds(inputs)
        # Assumption D_0 = Σ_r U_min^r c^r ≤ OPT / 2 (the optimum runs at least one job).
        assert float(u_min @ np.array([6.0, 6.0])) <= opt / 2 + 1e-12
        alpha, alpha_eff = competitive_ratio(u_min, u_max, np.array([6.0, 6.0]), max(gangs))
        assert (plan.alpha, plan.alpha_eff) == pytest.approx((alpha, alpha_eff))
        alg = sum(jp.utility for jp in plan.jobs)
        assert alg >= opt / (2 * alpha_eff)


def test_competitive_ratio_constants() -> None:
    u_min, u_max = np.array([0.01, 0.1]), np.array([1.0, 1.0])
    alpha, alpha_eff = competitive_ratio(u_min, u_max, np.array([20.0, 10.0]), 2)
    assert alpha == pytest.approx(math.log(100.0))
    x = alpha * 2 / 10.0
    assert alpha_eff == pytest.approx(alpha * math.expm1(x) / x)
    assert competitive_ratio(np.ones(1), np.ones(1), np.array([4.0]), 1)[0] == 1.0


# ---------------------------------------------------------------------------------------------
# Utilities
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape", [InverseSlowdown(), InverseSlowdown(2.0), LinearDecay(), Hyperbolic()]
)
def test_utility_shapes_are_positive_and_non_increasing(shape: object) -> None:
    tau = np.linspace(100.0, 5000.0, 50)
    ideal = np.full(50, 100.0)
    vals = shape(tau, ideal)  # type: ignore[operator]  # every shape is callable
    assert (vals > 0).all() and (np.diff(vals) <= 0).all()
    assert shape(np.array([np.inf]), np.array([100.0]))[0] == 0.0  # type: ignore[operator]


def test_hyperbolic_worked_example_and_order() -> None:
    shape = Hyperbolic(horizon=3600.0)
    # h / (h + τ): τ = 3 h gives 1/4, whatever the job's own ideal time.
    got = shape(np.array([3 * 3600.0, 3 * 3600.0]), np.array([60.0, 36000.0]))
    assert got == pytest.approx([0.25, 0.25])


def test_linear_decay_endpoints() -> None:
    shape = LinearDecay(horizon=5.0, floor=0.1)
    got = shape(np.array([100.0, 300.0, 500.0, 900.0]), np.full(4, 100.0))
    # 1 at ideal, halfway (τ = 3·ideal of 5) 0.5, floor from 5·ideal on.
    assert got == pytest.approx([1.0, 0.5, 0.1, 0.1])


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def base(**kw: object) -> dict[str, object]:
    args: dict[str, object] = {
        "throughput": np.ones((2, 2)),
        "replicas": [1, 2],
        "remaining": [10.0, 10.0],
        "node_type": [0, 1, 1],
        "node_free": [2, 2, 2],
    }
    args.update(kw)
    return args


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"throughput": [[1.0, np.nan], [1.0, 1.0]]}, "throughput", "job 0, type 1"),
        ({"replicas": [1, 0]}, "replicas", "job 1"),
        ({"remaining": [10.0, -1.0]}, "remaining", "job 1"),
        ({"node_type": [0, 2, 1]}, "node_type", "node 1"),
        ({"node_free": [2, -1, 2]}, "node_free", "node 1"),
        ({"current": [[3, 0, 0], [0, 0, 0]]}, "current", "node 0"),
        ({"total_work": [5.0, 10.0]}, "total_work", "job 0"),
        ({"weight": [1.0, 0.0]}, "weight", "job 1"),
        ({"restart_seconds": 400.0}, "restart_seconds", "restart_seconds"),
        ({"u_min": [2.0, 1.0], "u_max": [1.0, 1.0]}, "u_min", "type 0"),
    ],
)
def test_invalid_inputs_name_the_culprit(change: dict[str, object], field: str, words: str) -> None:
    args = base(**change)
    with pytest.raises(InvalidProblem, match=words) as info:
        make_inputs(**args)  # type: ignore[arg-type]  # deliberately malformed values
    assert info.value.field == field


def test_a_partial_gang_is_replanned_not_rejected() -> None:
    # During pod churn a running 2-pod gang may show one pod: the job is re-planned as waiting,
    # and its surviving pod's node is reused first.
    inputs = make_inputs(**base(current=[[0, 0, 0], [0, 1, 0]]))  # type: ignore[arg-type]
    plan = plan_round(inputs)
    check_plan_invariants(inputs, plan)
    jp = plan.job(1)
    assert jp is not None and 1 in {k for k, _ in jp.placement}


def test_inputs_are_read_only() -> None:
    inputs = make_inputs(**base())  # type: ignore[arg-type]  # plain lists are array-like
    with pytest.raises(ValueError, match="read-only"):
        inputs.remaining[0] = 1.0


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@st.composite
def instances(draw: st.DrawFn) -> HadarInputs:
    J = draw(st.integers(1, 6))
    T = draw(st.integers(1, 3))
    K = draw(st.integers(1, 5))
    thr = np.array(
        draw(
            st.lists(
                st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=T, max_size=T),
                min_size=J,
                max_size=J,
            )
        )
    )
    replicas = np.array(draw(st.lists(st.integers(1, 4), min_size=J, max_size=J)))
    remaining = np.array(
        draw(st.lists(st.sampled_from([0.0, 50.0, 500.0, 5e4]), min_size=J, max_size=J))
    )
    node_type = np.array(draw(st.lists(st.integers(0, T - 1), min_size=K, max_size=K)))
    node_free = np.array(draw(st.lists(st.integers(0, 4), min_size=K, max_size=K)))
    forkable = np.array(draw(st.lists(st.booleans(), min_size=J, max_size=J)))
    # Current placement: some jobs hold a whole gang, packed greedily in a drawn node order.
    current = np.zeros((J, K), dtype=np.int64)
    room = node_free.copy()
    for j in range(J):
        if draw(st.booleans()):
            need = int(replicas[j])
            row = np.zeros(K, dtype=np.int64)
            for k in draw(st.permutations(list(range(K)))):
                take = min(need, int(room[k]))
                row[k] += take
                need -= take
            if need == 0:
                current[j] = row
                room -= row
    elapsed = np.array(
        draw(st.lists(st.sampled_from([0.0, 360.0, 3600.0]), min_size=J, max_size=J))
    )
    return make_inputs(
        thr,
        replicas,
        remaining,
        node_type,
        node_free,
        elapsed=elapsed,
        current=current,
        forkable=forkable,
        total_work=remaining + 100.0,
    )


@given(
    inputs=instances(),
    fork_jobs=st.booleans(),
    method=st.sampled_from(["dp", "greedy"]),
    backfill=st.booleans(),
    preempt=st.booleans(),
    horizon=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_plan_invariants(
    inputs: HadarInputs,
    fork_jobs: bool,
    method: str,
    backfill: bool,
    preempt: bool,
    horizon: bool,
) -> None:
    plan = plan_round(
        inputs,
        fork_jobs=fork_jobs,
        method=method,  # type: ignore[arg-type]  # drawn from the two literal values
        backfill=backfill,
        preempt=preempt,
        horizon=Horizon() if horizon else None,
    )
    check_plan_invariants(inputs, plan)
    for jp in plan.jobs:
        if jp.forked:
            assert sum(g.steps for g in jp.gangs) == pytest.approx(float(inputs.remaining[jp.job]))
    if not fork_jobs:
        # Hadar admits a waiting job only at a positive payoff.
        running = (inputs.current.sum(axis=1) == inputs.replicas) & (inputs.remaining > 0)
        for jp in plan.jobs:
            if not running[jp.job] and not jp.backfilled:
                assert jp.payoff > 0

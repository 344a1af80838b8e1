"""Gavel's baseline policies (``walras.allocator.gavel``) against independent oracles.

Oracles: cvxpy (CLARABEL, an interior-point solver unrelated to HiGHS) with Gavel's problems
written out directly from Gavel's ``scheduler/policies/*.py``; hand-derived tiny cases; brute
force over vertices where small; and a plain re-statement of Gavel's FIFO rules. LP optima are
often not unique, so LPs are compared on objective value and feasibility, never on the matrix.
"""

from __future__ import annotations

import random

import cvxpy as cp
import numpy as np
import pytest

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import POLICY_NAMES, GavelInputs, center, lp, make_policy
from walras.allocator.gavel.finish_time_fairness import FinishTimeFairness
from walras.allocator.gavel.max_min_fairness import MaxMinFairness
from walras.allocator.gavel.min_total_duration import MinTotalDuration

FEAS_TOL = 1e-9  # lp.finish rescales solver overshoot, so outputs are feasible to rounding
OBJ_RTOL = 1e-5  # central optima stop at a 1e-6 relative gap (center.GAP_REL); CLARABEL ~1e-8


def assert_feasible(x: np.ndarray, inp: GavelInputs) -> None:
    assert x.shape == inp.throughputs.shape
    assert np.all(np.isfinite(x))
    assert x.min() >= 0.0
    assert np.all(x.sum(axis=1) <= 1.0 + FEAS_TOL)
    assert np.all(inp.scale_factors @ x <= inp.capacity + FEAS_TOL)


def random_inputs(rng: np.random.Generator, J: int, T: int, **extra: object) -> GavelInputs:
    thr = rng.uniform(0.5, 10.0, (J, T)) * (rng.random((J, T)) < 0.85)
    thr[np.arange(J), rng.integers(0, T, J)] += 1.0  # every job runs somewhere
    names = extra.get("type_names")
    if isinstance(names, tuple) and "v100" in names:
        thr[:, names.index("v100")] += 1.0  # as in Gavel's table, where v100 always runs a job
    return GavelInputs(
        throughputs=thr,
        scale_factors=rng.choice(np.array([1, 2, 4]), J),
        capacity=rng.integers(1, 6, T).astype(float),
        job_ids=rng.permutation(J) * 3 + 5,
        priority_weights=rng.choice(np.array([1.0, 2.0, 0.5]), J),
        **extra,  # type: ignore[arg-type]  # test helper forwards optional fields
    )


# --- max-min fairness -----------------------------------------------------------------------


def gavel_mmf_coefficients(inp: GavelInputs, aware: bool) -> np.ndarray:
    """Gavel's objective weights, restated from max_min_fairness.py + proportional.py."""
    J, T = inp.throughputs.shape
    thr = inp.throughputs if aware else np.ones((J, T))
    # ProportionalPolicy: x[i, t] = cap[t] / m, divided by the largest row sum.
    x_prop = np.tile(inp.capacity / J, (J, 1))
    x_prop /= x_prop.sum(axis=1).max()
    prop = (thr * x_prop).sum(axis=1)
    w = 1.0 / inp.weights()
    return thr * (w / prop)[:, None] * inp.scale_factors[:, None]


def cvxpy_mmf(inp: GavelInputs, aware: bool) -> float:
    coef = gavel_mmf_coefficients(inp, aware)
    x = cp.Variable(coef.shape)
    sf = np.tile(inp.scale_factors[:, None], (1, coef.shape[1])).astype(float)
    prob = cp.Problem(
        cp.Maximize(cp.min(cp.sum(cp.multiply(coef, x), axis=1))),
        [x >= 0, cp.sum(cp.multiply(sf, x), axis=0) <= inp.capacity, cp.sum(x, axis=1) <= 1],
    )
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return float(prob.value)


def mmf_value(x: np.ndarray, inp: GavelInputs, aware: bool) -> float:
    return float((gavel_mmf_coefficients(inp, aware) * x).sum(axis=1).min())


def test_mmf_two_jobs_two_types_by_hand() -> None:
    # Module docstring: prop = 2 for both jobs, coefficients (1.5, 0.5) and (0.5, 1.5).
    # Each job alone on its fast type reaches 1.5; no allocation does better, because job 0's
    # value 1.5 x0A + 0.5 x0B ≤ 1.5 (row sum ≤ 1), so s* = 1.5 with x = I exactly.
    inp = GavelInputs(
        np.array([[3.0, 1.0], [1.0, 3.0]]), np.array([1, 1]), np.ones(2), np.arange(2)
    )
    x = make_policy("max_min_fairness_perf").allocate(inp)
    # The central point stops at a duality gap of center.GAP_REL (1e-6) times s*, so it is
    # within ~1e-6 of the unique optimum.
    np.testing.assert_allclose(x, np.eye(2), atol=1e-5)
    # Agnostic: every coefficient is 1, so each job is worth at most 1 (row sum): s* = 1.
    xa = make_policy("max_min_fairness").allocate(inp)
    assert mmf_value(xa, inp, aware=False) == pytest.approx(1.0, rel=OBJ_RTOL)
    assert_feasible(xa, inp)


def test_mmf_scale_factors_count_gpu_time() -> None:
    # One type, 2 GPUs, jobs of 1, 1, 2 GPUs: k[j] x[j] ≥ s and Σ k[j] x[j] ≤ 2 give s = 2/3,
    # and x = (2/3, 2/3, 1/3) is the only optimum (all k[j] x[j] = 2/3 to use 2 GPUs).
    inp = GavelInputs(
        np.array([[5.0], [1.0], [7.0]]), np.array([1, 1, 2]), np.array([2.0]), np.arange(3)
    )
    for name in ("max_min_fairness_perf", "max_min_fairness"):
        x = make_policy(name).allocate(inp)
        np.testing.assert_allclose(x[:, 0], [2 / 3, 2 / 3, 1 / 3], atol=1e-5)


def test_mmf_priority_weight_doubles_share() -> None:
    # One type, 1 GPU, two 1-GPU jobs, weights 1 and 2: x0 / 1 = x1 / 2... Gavel divides the
    # objective by the weight, so the weight-2 job needs twice the time for the same value:
    # x0 = s, x1 = 2 s, x0 + x1 ≤ 1  →  x = (1/3, 2/3).
    inp = GavelInputs(
        np.array([[2.0], [2.0]]),
        np.array([1, 1]),
        np.array([1.0]),
        np.arange(2),
        np.array([1.0, 2.0]),
    )
    x = make_policy("max_min_fairness_perf").allocate(inp)
    np.testing.assert_allclose(x[:, 0], [1 / 3, 2 / 3], atol=1e-5)


@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_mmf_matches_cvxpy(seed: int, aware: bool) -> None:
    rng = np.random.default_rng(seed)
    inp = random_inputs(rng, int(rng.integers(1, 9)), int(rng.integers(1, 4)))
    name = "max_min_fairness_perf" if aware else "max_min_fairness"
    x = make_policy(name).allocate(inp)
    assert_feasible(x, inp)
    want = cvxpy_mmf(inp, aware)
    assert mmf_value(x, inp, aware) == pytest.approx(want, rel=OBJ_RTOL, abs=1e-9)


# --- registry and validation ----------------------------------------------------------------


def test_unknown_policy_lists_known_names() -> None:
    with pytest.raises(InvalidProblem) as err:
        make_policy("max_min_fairness_packed")
    for name in POLICY_NAMES:
        assert name in str(err.value)


def test_every_policy_handles_no_jobs() -> None:
    inp = GavelInputs(
        np.zeros((0, 3)),
        np.zeros(0, dtype=int),
        np.ones(3),
        np.zeros(0, dtype=int),
        num_steps_remaining=np.zeros(0),
        times_since_start=np.zeros(0),
        type_names=("k80", "p100", "v100"),
    )
    for name in POLICY_NAMES:
        assert make_policy(name).allocate(inp).shape == (0, 3)


@pytest.mark.parametrize(
    ("kwargs", "field", "needle"),
    [
        ({"throughputs": np.array([[1.0, np.nan]])}, "throughputs", "job 7, type 1"),
        ({"throughputs": np.array([[1.0, -1.0]])}, "throughputs", "negative"),
        ({"scale_factors": np.array([0])}, "scale_factors", ">= 1"),
        ({"capacity": np.array([1.0])}, "capacity", "shape"),
        ({"capacity": np.array([1.0, -2.0])}, "capacity", "type 1"),
        ({"job_ids": np.array([1.5])}, "job_ids", "integer"),
        ({"priority_weights": np.array([0.0])}, "priority_weights", "job 7"),
        ({"num_steps_remaining": np.array([np.inf])}, "num_steps_remaining", "job 7"),
        ({"type_names": ("v100",)}, "type_names", "2 throughput columns"),
    ],
)
def test_invalid_inputs_name_the_field(kwargs: dict[str, object], field: str, needle: str) -> None:
    base: dict[str, object] = {
        "throughputs": np.array([[1.0, 2.0]]),
        "scale_factors": np.array([1]),
        "capacity": np.array([1.0, 1.0]),
        "job_ids": np.array([7]),
    }
    base.update(kwargs)
    with pytest.raises(InvalidProblem) as err:
        GavelInputs(**base)  # type: ignore[arg-type]  # deliberately malformed
    assert err.value.field == field
    assert needle in str(err.value)


def test_duplicate_job_ids_rejected() -> None:
    with pytest.raises(InvalidProblem, match="job id 4"):
        GavelInputs(np.ones((2, 1)), np.ones(2, dtype=int), np.ones(1), np.array([4, 4]))


def test_job_without_throughput_is_named() -> None:
    inp = GavelInputs(np.array([[1.0], [0.0]]), np.ones(2, dtype=int), np.ones(1), np.array([3, 9]))
    with pytest.raises(InvalidProblem, match="job 9"):
        make_policy("max_min_fairness_perf").allocate(inp)


# --- central optimum (analytic center) ------------------------------------------------------


def test_center_two_jobs_one_type_by_hand() -> None:
    # center.py docstring: one type with 4 GPUs, two 1-GPU jobs, no throughput rows. By symmetry
    # x0 = x1 = y maximising 2 log y + 2 log(1 − y) + log(4 − 2y): 5y² − 11y + 4 = 0.
    k, cap = np.array([1, 1]), np.array([4.0])
    x = center.analytic_center(np.full((2, 1), 0.25), np.zeros((2, 1)), -np.ones(2), k, cap)
    np.testing.assert_allclose(x[:, 0], (11 - np.sqrt(41)) / 10, rtol=1e-9)


def cvxpy_center(coef: np.ndarray, lower: np.ndarray, k: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """The analytic center written directly as a cvxpy log-barrier problem (exp cones)."""
    x = cp.Variable(coef.shape)
    terms = [
        cp.sum(cp.log(x)),
        cp.sum(cp.log(1 - cp.sum(x, axis=1))),
        cp.sum(cp.log(cap - k @ x)),
        cp.sum(cp.log(cp.sum(cp.multiply(coef, x), axis=1) - lower)),
    ]
    prob = cp.Problem(cp.Maximize(sum(terms)))
    # Exponential cones: CLARABEL's default tolerances (1e-8 on the gap) leave x off by ~1e-5.
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert prob.status == cp.OPTIMAL
    return np.asarray(x.value)


@pytest.mark.parametrize("seed", range(6))
def test_center_matches_cvxpy_log_barrier(seed: int) -> None:
    # The analytic center is unique (strictly concave barrier), so here x itself is compared.
    rng = np.random.default_rng(100 + seed)
    J, T = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    k = rng.choice(np.array([1, 2, 4]), J)
    cap = rng.integers(2, 9, T).astype(float)
    coef = rng.uniform(0.5, 3.0, (J, T))
    inside = lp.strictly_inside(k, cap)
    lower = 0.5 * (coef * inside).sum(axis=1)  # the start keeps half its throughput slack
    x = center.analytic_center(inside, coef, lower, k, cap)
    np.testing.assert_allclose(x, cvxpy_center(coef, lower, k, cap), atol=1e-6)
    # Certificate: the barrier's gradient vanishes at its (unique) maximiser. Written out here
    # from the barrier's definition: 1/x − 1/row − k/cap_slack + C/throughput_slack.
    grad = (
        1 / x
        - (1 / (1 - x.sum(axis=1)))[:, None]
        - k[:, None] * (1 / (cap - k @ x))[None, :]
        + coef * (1 / ((coef * x).sum(axis=1) - lower))[:, None]
    )
    # Newton stops at decrement² < 1e-12; the gradient is then ≲ 1e-6 times the Hessian's scale.
    assert np.abs(grad).max() < 1e-5


@pytest.mark.parametrize("aware", [True, False])
def test_central_and_vertex_optima_have_equal_value(aware: bool) -> None:
    # Both are optima of the same LP; the center is strictly inside every non-tight inequality.
    rng = np.random.default_rng(7)
    inp = random_inputs(rng, 12, 3)
    name = "max_min_fairness_perf" if aware else "max_min_fairness"
    central = MaxMinFairness(aware=aware, central=True).allocate(inp)
    vertex = MaxMinFairness(aware=aware, central=False).allocate(inp)
    assert make_policy(name).allocate(inp) == pytest.approx(central)  # central is the default
    assert_feasible(central, inp)
    want = cvxpy_mmf(inp, aware)
    # The central point's gap is at most center.GAP_REL = 1e-6 relative; HiGHS's is ~1e-9.
    assert mmf_value(central, inp, aware) == pytest.approx(want, rel=OBJ_RTOL)
    assert mmf_value(vertex, inp, aware) == pytest.approx(want, rel=1e-6)
    assert central.min() > 0.0  # the analytic center leaves every x ≥ 0 strictly


# --- min-total-duration ---------------------------------------------------------------------


def cvxpy_feasible(thr: np.ndarray, inp: GavelInputs, need: np.ndarray) -> bool:
    """Gavel's get_allocation_helper: is there x with thr·x ≥ need (maximise 1)?"""
    x = cp.Variable(thr.shape)
    sf = np.tile(inp.scale_factors[:, None], (1, thr.shape[1])).astype(float)
    cons = [
        x >= 0,
        cp.sum(cp.multiply(sf, x), axis=0) <= inp.capacity,
        cp.sum(x, axis=1) <= 1,
        cp.sum(cp.multiply(thr, x), axis=1) >= need,
    ]
    prob = cp.Problem(cp.Maximize(1), cons)
    prob.solve(solver=cp.CLARABEL)
    return bool(prob.status == cp.OPTIMAL)


def gavel_bisection(thr: np.ndarray, inp: GavelInputs) -> float:
    """Gavel's MinTotalDurationPolicyWithPerf loop, restated, one cvxpy solve per tested T."""
    n = inp.num_steps_remaining
    assert n is not None
    max_T, min_T, last_max_T = 1e6, 100.0, 1e6
    last_T = None
    while last_T is None:
        while 1.05 * min_T < max_T:
            T = (min_T + max_T) / 2.0
            if cvxpy_feasible(thr, inp, n / T):
                last_T, max_T = T, T
            else:
                min_T = T
        max_T, min_T, last_max_T = last_max_T * 10.0, last_max_T, last_max_T * 10
    return last_T


def test_mtd_two_jobs_by_hand() -> None:
    # Module docstring: 1 GPU, two 1-GPU jobs with 100 steps at 1 step/s: T* = 200, and the
    # bisection stops with the smallest feasible tested T, hi ≤ 1.05·lo < 1.05·200 = 210.
    inp = GavelInputs(
        np.ones((2, 1)),
        np.ones(2, dtype=int),
        np.ones(1),
        np.arange(2),
        num_steps_remaining=np.array([100.0, 100.0]),
    )
    policy = MinTotalDuration(aware=True)
    x = policy.allocate(inp)
    assert policy.last_horizon is not None
    assert 200.0 <= policy.last_horizon < 210.0
    assert np.all(x[:, 0] >= 100.0 / policy.last_horizon - 1e-9)
    assert_feasible(x, inp)


@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_mtd_matches_gavel_bisection_in_cvxpy(seed: int, aware: bool) -> None:
    rng = np.random.default_rng(200 + seed)
    J, T = int(rng.integers(1, 7)), 3
    names = ("k80", "p100", "v100")
    inp = random_inputs(
        rng,
        J,
        T,
        num_steps_remaining=rng.uniform(1e4, 5e6, J) * (rng.random(J) < 0.9),
        type_names=names,
    )
    thr = inp.throughputs if aware else np.repeat(inp.throughputs[:, 2:3], T, axis=1)
    policy = MinTotalDuration(aware=aware)
    x = policy.allocate(inp)
    assert_feasible(x, inp)
    T_gavel = gavel_bisection(thr, inp)
    assert policy.last_horizon == pytest.approx(T_gavel, rel=1e-12)
    n = inp.num_steps_remaining
    assert n is not None
    # Every job finishes within the horizon at this allocation (Gavel's constraint).
    assert np.all((thr * x).sum(axis=1) >= n / T_gavel * (1 - 1e-7))


def test_agnostic_policies_need_the_v100_column() -> None:
    inp = GavelInputs(
        np.ones((1, 2)),
        np.ones(1, dtype=int),
        np.ones(2),
        np.arange(1),
        num_steps_remaining=np.ones(1),
        times_since_start=np.zeros(1),
    )
    for name in ("min_total_duration", "finish_time_fairness"):
        with pytest.raises(InvalidProblem, match="v100"):
            make_policy(name).allocate(inp)


# --- FIFO -----------------------------------------------------------------------------------


def fifo_inputs(
    thr: list[list[float]], cap: list[float], ids: list[int], k: list[int] | None = None
) -> GavelInputs:
    J = len(ids)
    return GavelInputs(
        np.array(thr, dtype=float).reshape(J, len(cap)),
        np.array(k if k is not None else [1] * J),
        np.array(cap, dtype=float),
        np.array(ids),
        type_names=("k80", "p100", "v100")[: len(cap)],
    )


def test_fifo_perf_worked_example() -> None:
    # fifo.py docstring: job 0 takes v100, job 1 p100 (v100 is full), job 2 k80.
    inp = fifo_inputs([[1, 2, 3], [1, 2, 3], [5, 1, 1]], [1, 1, 1], [0, 1, 2])
    x = make_policy("fifo_perf").allocate(inp)
    np.testing.assert_array_equal(x, np.eye(3)[[2, 1, 0]])


def test_fifo_perf_skips_a_head_that_does_not_fit_and_stops() -> None:
    # Gavel pops the head before checking fit and stops at the first job that fits nowhere:
    # job 0 (4 GPUs) fits nowhere with 2 + 2 GPUs, so job 1 is not considered either.
    inp = fifo_inputs([[1, 1], [1, 1]], [2, 2], [0, 1], k=[4, 1])
    assert make_policy("fifo_perf").allocate(inp).sum() == 0.0


def test_fifo_agnostic_uses_the_last_listed_type_and_can_overbook() -> None:
    # fifo.py docstring: free (k80 2, p100 2, v100 1), a 2-GPU job: fits = [k80, p100], but
    # Gavel assigns types[-1] = v100, which has 1 GPU. Whatever the random draw.
    inp = fifo_inputs([[1, 1, 1]], [2, 2, 1], [0], k=[2])
    for seed in range(4):
        x = make_policy("fifo", seed=seed).allocate(inp)
        np.testing.assert_array_equal(x, [[0.0, 0.0, 1.0]])


@pytest.mark.parametrize("seed", [5, 6, 10, 17])
def test_fifo_agnostic_draws_decide_which_type_is_dropped(seed: int) -> None:
    # One GPU per type, three 1-GPU jobs. These seeds draw i0 = 2 first (random.Random(seed)):
    # job 0 takes v100 (types[-1]); v100 is full, so types.pop(fits[2]) removes v100.
    # Job 1: types [k80, p100], it takes p100, which fills up; the draw i1 ∈ {0, 1} removes
    # fits[i1]: i1 = 1 removes p100 and job 2 takes k80; i1 = 0 removes k80, leaving only the
    # full p100, so job 2 fits nowhere and gets nothing.
    rng = random.Random(seed)
    assert rng.randrange(3) == 2
    i1 = rng.randrange(2)
    inp = fifo_inputs([[1, 1, 1]] * 3, [1, 1, 1], [0, 1, 2])
    x = make_policy("fifo", seed=seed).allocate(inp)
    want = np.zeros((3, 3))
    want[0, 2] = want[1, 1] = 1.0
    if i1 == 1:
        want[2, 0] = 1.0
    np.testing.assert_array_equal(x, want)


def test_fifo_agnostic_keeps_types_until_jobs_finish() -> None:
    # v100 only (1 GPU). Call 1: job 0 takes it. Call 2: job 0 keeps it even though a probe
    # throughput of 0 would now forbid a new assignment there. Call 3: job 0 has finished; the
    # queue head (job 1) takes its slot in the completion pass; job 2 waits.
    policy = make_policy("fifo", seed=0)
    x1 = policy.allocate(fifo_inputs([[0, 0, 1], [0, 0, 1]], [0, 0, 1], [0, 1]))
    np.testing.assert_array_equal(x1[:, 2], [1, 0])
    x2 = policy.allocate(fifo_inputs([[0, 0, 0], [0, 0, 1]], [0, 0, 1], [0, 1]))
    np.testing.assert_array_equal(x2[:, 2], [1, 0])
    x3 = policy.allocate(fifo_inputs([[0, 0, 1], [0, 0, 1]], [0, 0, 1], [1, 2]))
    np.testing.assert_array_equal(x3[:, 2], [1, 0])
    # fifo_perf forgets: with the same probe, call 2 gives job 0 nothing and job 1 the GPU.
    perf = make_policy("fifo_perf")
    perf.allocate(fifo_inputs([[0, 0, 1], [0, 0, 1]], [0, 0, 1], [0, 1]))
    y2 = perf.allocate(fifo_inputs([[0, 0, 0], [0, 0, 1]], [0, 0, 1], [0, 1]))
    np.testing.assert_array_equal(y2[:, 2], [0, 1])


@pytest.mark.parametrize("seed", range(6))
def test_fifo_perf_is_feasible_and_in_arrival_order(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    inp = random_inputs(rng, 10, 3, type_names=("k80", "p100", "v100"))
    x = make_policy("fifo_perf").allocate(inp)
    assert_feasible(x, inp)
    assert set(np.unique(x)) <= {0.0, 1.0}
    # FIFO: scheduled jobs form a prefix of the queue in job-id order, except jobs whose
    # best fitting type has throughput 0 (skipped, not blocking).
    order = np.argsort(inp.job_ids)
    placed = x.sum(axis=1)[order] > 0
    first_gap = int(np.argmin(placed)) if not placed.all() else len(placed)
    # After the first job that found no fitting type, nothing later is placed.
    sf = inp.scale_factors[order]
    free = inp.capacity - (inp.scale_factors @ x)
    blocked = [j for j in range(first_gap, len(placed)) if not placed[j] and (free < sf[j]).all()]
    if blocked:
        assert not placed[blocked[0] :].any()


# --- finish-time fairness -------------------------------------------------------------------


def gavel_isolated(thr: np.ndarray, inp: GavelInputs) -> np.ndarray:
    """Gavel's IsolatedPolicy.get_throughputs, restated."""
    J = thr.shape[0]
    y = np.array([[inp.capacity[t] / J for t in range(thr.shape[1])] for _ in range(J)])
    y = y / inp.scale_factors[:, None]
    y = y / np.maximum(y.sum(axis=1), np.ones(J))[:, None]
    return (thr * y).sum(axis=1)


def cvxpy_ftf(thr: np.ndarray, inp: GavelInputs, iso_time: np.ndarray) -> float:
    """Gavel's FinishTimeFairnessPolicyWithPerf objective, with cp.inv_pos as in Gavel."""
    n, age = inp.num_steps_remaining, inp.times_since_start
    assert n is not None and age is not None
    iso = gavel_isolated(thr, inp)
    x = cp.Variable(thr.shape)
    sf = np.tile(inp.scale_factors[:, None], (1, thr.shape[1])).astype(float)
    fr = [
        (age[i] + n[i] * cp.inv_pos(cp.sum(cp.multiply(thr[i], x[i]))))
        / (iso_time[i] + n[i] / iso[i])
        for i in range(thr.shape[0])
    ]
    obj = cp.Minimize(fr[0] if len(fr) == 1 else cp.maximum(*fr))
    cons = [x >= 0, cp.sum(cp.multiply(sf, x), axis=0) <= inp.capacity, cp.sum(x, axis=1) <= 1]
    prob = cp.Problem(obj, cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return float(prob.value)


def ftf_value(x: np.ndarray, thr: np.ndarray, inp: GavelInputs, iso_time: np.ndarray) -> float:
    n, age = inp.num_steps_remaining, inp.times_since_start
    assert n is not None and age is not None
    E = iso_time + n / gavel_isolated(thr, inp)
    return float(((age + n / (thr * x).sum(axis=1)) / E).max())


def test_ftf_worked_example() -> None:
    # Module docstring: 2 GPUs, two new 1-GPU jobs, 100 and 300 steps at 1 step/s: ρ* = 1.
    inp = GavelInputs(
        np.ones((2, 1)),
        np.ones(2, dtype=int),
        np.array([2.0]),
        np.arange(2),
        num_steps_remaining=np.array([100.0, 300.0]),
        times_since_start=np.zeros(2),
    )
    policy = FinishTimeFairness(aware=True)
    x = policy.allocate(inp)
    assert policy.last_rho == pytest.approx(1.0, rel=1e-9)
    np.testing.assert_allclose(x[:, 0], 1.0, atol=1e-6)


@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize("seed", range(5))
def test_ftf_matches_cvxpy_over_two_calls(seed: int, aware: bool) -> None:
    rng = np.random.default_rng(400 + seed)
    J, T = int(rng.integers(1, 6)), 3
    names = ("k80", "p100", "v100")
    n1 = rng.uniform(1e4, 1e6, J)
    age1 = rng.uniform(0, 1e4, J)
    first = random_inputs(
        rng, J, T, num_steps_remaining=n1, times_since_start=age1, type_names=names
    )
    thr = first.throughputs if aware else np.repeat(first.throughputs[:, 2:3], T, axis=1)
    policy = FinishTimeFairness(aware=aware)
    x1 = policy.allocate(first)
    assert_feasible(x1, first)
    want1 = cvxpy_ftf(thr, first, np.zeros(J))
    assert ftf_value(x1, thr, first, np.zeros(J)) == pytest.approx(want1, rel=1e-5)
    # Second call: some progress; Gavel adds (n_prev − n) / iso_prev to each job's isolated time.
    n2 = n1 * rng.uniform(0.3, 0.9, J)
    second = GavelInputs(
        first.throughputs,
        first.scale_factors,
        first.capacity,
        first.job_ids,
        first.priority_weights,
        num_steps_remaining=n2,
        times_since_start=age1 + 3600.0,
        type_names=names,
    )
    iso_time = (n1 - n2) / gavel_isolated(thr, first)
    x2 = policy.allocate(second)
    assert_feasible(x2, second)
    want2 = cvxpy_ftf(thr, second, iso_time)
    assert ftf_value(x2, thr, second, iso_time) == pytest.approx(want2, rel=1e-5)
    assert policy.last_rho == pytest.approx(want2, rel=1e-5)


# --- every policy ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_is_feasible_on_random_inputs(name: str) -> None:
    rng = np.random.default_rng(500)
    for _ in range(3):
        J = int(rng.integers(1, 12))
        inp = random_inputs(
            rng,
            J,
            3,
            num_steps_remaining=rng.uniform(1e3, 1e6, J),
            times_since_start=rng.uniform(0, 1e4, J),
            type_names=("v100", "p100", "k80"),  # not sorted: policies must not care
        )
        x = make_policy(name).allocate(inp)
        if name == "fifo":  # may overbook, as Gavel's (test above); rows are still 0/1
            assert np.all(x.sum(axis=1) <= 1.0)
            continue
        assert_feasible(x, inp)


def test_reference_type_replaces_v100_for_agnostic_policies() -> None:
    # Types "a", "b": with reference_type="b", the agnostic min-total-duration sees b's
    # throughput (2 steps/s) on both types. 1 job, 1,000 steps, a row sum ≤ 1: T* = 500 s, and
    # Gavel's bisection ends in [500, 525); with "a" (1 step/s), T* = 1,000 s, in [1000, 1050).
    for ref, t_star in (("b", 500.0), ("a", 1000.0)):
        inp = GavelInputs(
            np.array([[1.0, 2.0]]),
            np.ones(1, dtype=int),
            np.ones(2),
            np.arange(1),
            num_steps_remaining=np.array([1000.0]),
            type_names=("a", "b"),
            reference_type=ref,
        )
        policy = MinTotalDuration(aware=False)
        policy.allocate(inp)
        assert policy.last_horizon is not None
        assert t_star <= policy.last_horizon < 1.05 * t_star

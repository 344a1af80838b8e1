"""Gavel's baseline policies (``walras.allocator.gavel``) against independent oracles.

Oracles: cvxpy (CLARABEL, an interior-point solver unrelated to HiGHS) with Gavel's problems
written out directly from Gavel's ``scheduler/policies/*.py``; hand-derived tiny cases; brute
force over vertices where small; and a plain re-statement of Gavel's FIFO rules. LP optima are
often not unique, so LPs are compared on objective value and feasibility, never on the matrix.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import POLICY_NAMES, GavelInputs, center, lp, make_policy
from walras.allocator.gavel.max_min_fairness import MaxMinFairness

FEAS_TOL = 1e-9  # lp.finish rescales solver overshoot, so outputs are feasible to rounding
OBJ_RTOL = 1e-5  # CLARABEL's default accuracy is ~1e-8 relative; HiGHS's 1e-7 primal/dual


def assert_feasible(x: np.ndarray, inp: GavelInputs) -> None:
    assert x.shape == inp.throughputs.shape
    assert np.all(np.isfinite(x))
    assert x.min() >= 0.0
    assert np.all(x.sum(axis=1) <= 1.0 + FEAS_TOL)
    assert np.all(inp.scale_factors @ x <= inp.capacity + FEAS_TOL)


def random_inputs(rng: np.random.Generator, J: int, T: int, **extra: object) -> GavelInputs:
    thr = rng.uniform(0.5, 10.0, (J, T)) * (rng.random((J, T)) < 0.85)
    thr[np.arange(J), rng.integers(0, T, J)] += 1.0  # every job runs somewhere
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
    np.testing.assert_allclose(x, np.eye(2), atol=1e-7)
    # Agnostic: every coefficient is 1, so each job is worth at most 1 (row sum): s* = 1.
    xa = make_policy("max_min_fairness").allocate(inp)
    assert mmf_value(xa, inp, aware=False) == pytest.approx(1.0, rel=1e-7)
    assert_feasible(xa, inp)


def test_mmf_scale_factors_count_gpu_time() -> None:
    # One type, 2 GPUs, jobs of 1, 1, 2 GPUs: k[j] x[j] ≥ s and Σ k[j] x[j] ≤ 2 give s = 2/3,
    # and x = (2/3, 2/3, 1/3) is the only optimum (all k[j] x[j] = 2/3 to use 2 GPUs).
    inp = GavelInputs(
        np.array([[5.0], [1.0], [7.0]]), np.array([1, 1, 2]), np.array([2.0]), np.arange(3)
    )
    for name in ("max_min_fairness_perf", "max_min_fairness"):
        x = make_policy(name).allocate(inp)
        np.testing.assert_allclose(x[:, 0], [2 / 3, 2 / 3, 1 / 3], atol=1e-7)


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
    np.testing.assert_allclose(x[:, 0], [1 / 3, 2 / 3], atol=1e-7)


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
    assert mmf_value(central, inp, aware) == pytest.approx(want, rel=1e-6)
    assert mmf_value(vertex, inp, aware) == pytest.approx(want, rel=1e-6)
    assert central.min() > 0.0  # the analytic center leaves every x ≥ 0 strictly

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
from walras.allocator.gavel import POLICY_NAMES, GavelInputs, make_policy

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

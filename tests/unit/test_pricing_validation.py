"""Input validation and edge cases of price discovery (docs/algorithms.md#price-discovery).

Every malformed input raises ``InvalidProblem`` naming the job or type; ``screen_jobs`` lists
per-job defects so that the operator can drop them; fuzzed inputs give either a named error or
a feasible allocation with a valid gap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pricing_helpers import assert_feasible

from walras.allocator import pricing
from walras.allocator.errors import InvalidProblem

NAN, INF = float("nan"), float("inf")
GOOD_A = [[0.5, 1.0], [0.2, 0.4], [1.0, 0.0]]
TP = "throughput"


def make(**kw: Any) -> pricing.PricingProblem:
    args: dict[str, Any] = {"throughput": GOOD_A, "capacity": [1.0, 1.0]}
    args.update(kw)
    return pricing.PricingProblem(**args)


# (name, keyword overrides, message fragment, field, index); raised by construction or solve.
CASES = [
    ("nan throughput", {"throughput": [[0.5, NAN], [0.2, 0.4], [1, 0]]}, "job 0", "throughput", 0),
    ("inf throughput", {"throughput": [[0.5, 1], [INF, 0.4], [1, 0]]}, "job 1", "throughput", 1),
    (
        "negative throughput",
        {"throughput": [[0.5, 1], [0.2, 0.4], [1, -1]]},
        "job 2",
        "throughput",
        2,
    ),
    ("1-D throughput", {"throughput": [0.5, 1.0]}, "2-D", "throughput", None),
    ("no jobs", {"throughput": np.zeros((0, 2))}, "no jobs", "throughput", None),
    ("capacity shape", {"capacity": [1.0, 1.0, 1.0]}, "capacity must have shape", "capacity", None),
    ("zero capacity", {"capacity": [1.0, 0.0]}, "type 1", "capacity", 1),
    ("nan capacity", {"capacity": [NAN, 1.0]}, "type 0", "capacity", 0),
    ("negative capacity", {"capacity": [1.0, -2.0]}, "type 1", "capacity", 1),
    (
        "log job without throughput",
        {"throughput": [[0.5, 1], [0, 0], [1, 0]]},
        "job 1",
        "throughput",
        1,
    ),
    ("demand above capacity", {"demand": [1.0, 2.0, 1.0]}, "job 1", "demand", 1),
    ("zero demand", {"demand": [1.0, 0.0, 1.0]}, "job 1", "demand", 1),
    ("nan demand", {"demand": [[1, 1], [1, 1], [NAN, 1]]}, "job 2", "demand", 2),
    ("demand shape", {"demand": [1.0, 1.0]}, "demand must have shape", "demand", None),
    ("negative weight", {"weight": [1.0, -1.0, 1.0]}, "job 1", "weight", 1),
    ("nan weight", {"weight": [NAN, 1.0, 1.0]}, "job 0", "weight", 0),
    ("unknown kind", {"kind": ["log", "cubic", "log"]}, "job 1", "kind", 1),
    ("kind count", {"kind": ["log", "log"]}, "kind must name", "kind", None),
    ("target missing", {"kind": "target"}, "target", "target", None),
    ("negative target", {"kind": "target", "target": [0.1, -0.1, 0.1]}, "job 1", "target", 1),
    ("alpha one", {"kind": "alpha", "alpha": [2.0, 1.0, 2.0]}, "job 1", "alpha", 1),
    ("alpha negative", {"kind": "alpha", "alpha": -1.0}, "job 0", "alpha", 0),
]


@pytest.mark.parametrize(
    ("overrides", "fragment", "field", "index"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_invalid_input_raises_named_error(
    overrides: dict[str, Any], fragment: str, field: str, index: int | None
) -> None:
    with pytest.raises(InvalidProblem, match=fragment) as info:
        pricing.solve(make(**overrides))
    assert info.value.field == field
    assert info.value.index == index


def test_solver_options_are_validated() -> None:
    problem = make()
    with pytest.raises(InvalidProblem, match="eps"):
        pricing.solve(problem, eps=0.0)
    with pytest.raises(InvalidProblem, match="max_iter"):
        pricing.solve(problem, max_iter=0)
    with pytest.raises(InvalidProblem, match="type 1") as info:
        pricing.solve(problem, warm_prices=[1.0, -1.0])
    assert info.value.field == "warm_prices"
    with pytest.raises(InvalidProblem, match="shape"):
        pricing.solve(problem, warm_prices=[1.0])
    with pytest.raises(InvalidProblem, match="backend"):
        pricing.solve(problem, backend="cupy")
    with pytest.raises(InvalidProblem, match="numpy backend"):
        pricing.solve(problem, backend="numpy", device="cuda:0")


def test_screen_jobs_lists_every_defect_and_the_rest_solves() -> None:
    A = np.array([[0.5, 1.0], [NAN, 1.0], [0.0, 0.0], [0.3, 0.0], [0.2, 0.2], [0.4, -1.0]])
    problem = pricing.PricingProblem(A, [2.0, 1.5], demand=[1.0, 1.0, 1.0, 3.0, 1.0, 1.0])
    issues = pricing.screen_jobs(problem)
    assert [(i.index, i.field) for i in issues] == [
        (1, "throughput"),
        (2, "throughput"),
        (3, "demand"),
        (5, "throughput"),
    ]
    assert all(isinstance(i, pricing.JobIssue) and i.reason for i in issues)
    keep = np.setdiff1d(np.arange(problem.n), [i.index for i in issues])
    result = pricing.solve(problem.subset(keep))
    assert result.converged
    assert_feasible(problem.subset(keep), result.allocation)


def test_non_strict_masks_types_that_do_not_fit() -> None:
    """d_ij > R_j: strict raises; strict=False treats a_ij as 0 for that job."""
    A = [[1.0, 2.0], [1.0, 1.0], [0.5, 0.5]]
    problem = pricing.PricingProblem(A, [4.0, 2.0], demand=[3.0, 1.0, 1.0])
    with pytest.raises(InvalidProblem, match=r"job 0.*type 1"):
        pricing.solve(problem)
    result = pricing.solve(problem, strict=False)
    assert result.allocation[0, 1] == 0.0
    assert result.allocation[0, 0] > 0.0
    assert_feasible(problem, result.allocation)


def test_zero_throughput_job_is_fine_for_linear_and_target() -> None:
    A = [[0.5, 1.0], [0.0, 0.0], [1.0, 0.2]]
    for kind in ("linear", "target"):
        problem = pricing.PricingProblem(A, [1.0, 1.0], kind=kind, target=0.3)
        result = pricing.solve(problem)
        assert result.converged
        assert result.allocation[1].sum() == 0.0
        assert_feasible(problem, result.allocation)


def test_problem_is_immutable_and_copies_its_input() -> None:
    A = np.array(GOOD_A)
    problem = pricing.PricingProblem(A, [1.0, 1.0])
    A[0, 0] = 99.0
    assert problem.throughput[0, 0] == 0.5
    with pytest.raises(ValueError, match="read-only"):
        problem.throughput[0, 0] = 1.0


# ---- fuzzing ---------------------------------------------------------------------------------

BAD = [NAN, INF, -1.0, 0.0]


@st.composite
def problems(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly valid problems (tiny, huge and zero entries included); some with one bad value."""
    n = draw(st.integers(1, 12))
    m = draw(st.integers(1, 4))
    entry = st.one_of(
        st.floats(min_value=0.0, max_value=2.0),
        st.sampled_from([0.0, 1e-9, 1e-3, 1.0, 1e4]),
    )
    A = np.array(draw(st.lists(entry, min_size=n * m, max_size=n * m))).reshape(n, m)
    R = np.array(
        draw(st.lists(st.floats(min_value=1e-3, max_value=3.0 * n), min_size=m, max_size=m))
    )
    kind = draw(st.sampled_from(["linear", "log", "alpha", "target", "mixed"]))
    kinds: Any = (
        [draw(st.sampled_from(["linear", "log", "alpha", "target"])) for _ in range(n)]
        if kind == "mixed"
        else kind
    )
    per_type = draw(st.booleans())
    demand = np.array(
        draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 8.0]), min_size=n * m, max_size=n * m))
    ).reshape(n, m)
    D = demand if per_type else demand[:, 0].copy()
    corrupt = draw(st.sampled_from(["none", "none", "none", "throughput", "capacity", "demand"]))
    bad = draw(st.sampled_from(BAD))
    if corrupt == "throughput":
        A[draw(st.integers(0, n - 1)), draw(st.integers(0, m - 1))] = bad
    elif corrupt == "capacity":
        R[draw(st.integers(0, m - 1))] = bad
    elif corrupt == "demand":
        D.reshape(-1)[draw(st.integers(0, D.size - 1))] = bad
    return {
        "throughput": A,
        "capacity": R,
        "demand": D,
        "kind": kinds,
        "weight": draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n, max_size=n)),
        "target": draw(st.lists(st.sampled_from([0.0, 0.2, 1.0]), min_size=n, max_size=n)),
        "alpha": draw(st.sampled_from([0.5, 2.0, 3.0])),
        "strict": draw(st.booleans()),
    }


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_fuzz_named_error_or_feasible_allocation_with_valid_gap(data: dict[str, Any]) -> None:
    strict = data.pop("strict")
    try:
        problem = pricing.PricingProblem(**data)
        result = pricing.solve(problem, max_iter=30, strict=strict)
    except InvalidProblem as exc:
        assert str(exc)  # a message that says what is wrong
        return
    assert_feasible(problem, result.allocation)
    assert math.isfinite(result.utility)
    assert math.isfinite(result.dual_bound)
    assert result.gap >= -1e-7 * max(1.0, abs(result.dual_bound))
    for dual, primal in result.history:
        assert primal <= dual + 1e-7 * max(1.0, abs(dual))
    if not strict:
        fits = problem.demand_matrix() <= np.asarray(problem.capacity)[None, :]
        assert (result.allocation[~fits] == 0).all()


def test_read_only_float64_inputs_are_shared_and_writable_ones_copied() -> None:
    A = np.array([[1.0, 2.0], [0.5, 0.25]])
    A.setflags(write=False)
    w = np.array([1.0, 2.0])
    problem = pricing.PricingProblem(A, [1.0, 1.0], weight=w)
    assert problem.throughput is A  # read-only float64: no copy
    assert problem.weight is not w and not problem.weight.flags.writeable
    w[0] = 5.0  # the caller's writable array does not leak into the problem
    assert problem.weight[0] == 1.0
    view = np.ones((2, 2))[:, :]
    view.setflags(write=False)  # read-only view of writable memory: copied
    assert pricing.PricingProblem(view, [1.0, 1.0]).throughput is not view


def test_per_job_kinds_map_to_codes_and_first_unknown_is_named() -> None:
    kinds = ["target", "log", "linear", "alpha", "log"]
    problem = pricing.PricingProblem(np.ones((5, 2)), [1.0, 1.0], kind=kinds, target=0.1)
    assert problem.kinds() == tuple(kinds)
    with pytest.raises(InvalidProblem) as exc:
        pricing.PricingProblem(np.ones((3, 2)), [1.0, 1.0], kind=["log", "zeta", "alpha2"])
    assert exc.value.index == 1 and "zeta" in str(exc.value)
    with pytest.raises(InvalidProblem) as exc:
        pricing.PricingProblem(np.ones((2, 2)), [1.0, 1.0], kind="cubic")
    assert exc.value.field == "kind"

"""Gavel's max-min fairness with space sharing (``gavel.packed``).

Oracles: hand-derived optima (module docstring and below), and an independent cvxpy model
written the way Gavel's ``PolicyWithPacking`` writes it (one row per combination, single jobs
and pairs, a per-job throughput matrix over combinations), solved with Clarabel. The optimal
value ``s*`` is unique, so it is compared; the allocation is a vertex among many optima, so it
is only checked for feasibility and for reaching ``s*``.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import GavelInputs, packed


def _inputs(
    thr: list[list[float]],
    pairs: list[tuple[int, int]],
    pair_thr: list[list[list[float]]],
    cap: list[float],
    scale: list[int] | None = None,
) -> packed.PackedInputs:
    J = len(thr)
    base = GavelInputs(
        throughputs=np.array(thr),
        scale_factors=np.array(scale or [1] * J),
        capacity=np.array(cap),
        job_ids=np.arange(J),
    )
    return packed.PackedInputs(base, np.array(pairs).reshape(-1, 2), np.array(pair_thr))


def _assert_feasible(inp: packed.PackedInputs, a: packed.PackedAllocation) -> None:
    assert (a.single >= 0).all() and (a.pair >= 0).all()
    assert (packed.time_used(inp, a.single, a.pair) <= 1.0 + 1e-12).all()
    assert (packed.gpus_used(inp, a.single, a.pair) <= inp.base.capacity * (1 + 1e-12)).all()


@pytest.mark.parametrize(("together", "expected"), [(0.8, 0.8), (0.4, 0.5)])
def test_docstring_example(together: float, expected: float) -> None:
    inp = _inputs([[1.0], [1.0]], [(0, 1)], [[[together, together]]], [1.0])
    a = packed.allocate(inp)
    assert a.value == pytest.approx(expected, rel=1e-9)
    _assert_feasible(inp, a)
    assert packed.normalised(inp, a.single, a.pair).min() == pytest.approx(expected, rel=1e-9)


def test_a_pair_holds_its_gang_once() -> None:
    """One type with 2 GPUs, two 2-GPU jobs (isolated throughput 1, so prop = 1 and the
    coefficient is k · thr = 2 · thr). Time-sharing: 2q + 2q ≤ 2 gives q = 1/2, value 1.
    Together at 0.8 each, the pair holds 2 GPUs (not 4): 2p ≤ 2, p = 1, value 2 · 0.8 = 1.6."""
    inp = _inputs([[1.0], [1.0]], [(0, 1)], [[[0.8, 0.8]]], [2.0], scale=[2, 2])
    a = packed.allocate(inp)
    assert a.value == pytest.approx(1.6, rel=1e-9)
    assert a.pair[0, 0] == pytest.approx(1.0, rel=1e-9)


def _cvxpy_value(inp: packed.PackedInputs) -> float:
    """Gavel's formulation, built independently: combinations are the singles then the pairs;
    ``m[j, c, t]`` is job ``j``'s throughput in combination ``c`` (0 if not a member)."""
    b = inp.base
    J, T = b.n_jobs, b.n_types
    combos = [(j,) for j in range(J)] + [tuple(int(v) for v in p) for p in inp.pairs]
    m = np.zeros((J, len(combos), T))
    for c, members in enumerate(combos):
        for pos, j in enumerate(members):
            if len(members) == 1:
                m[j, c] = b.throughputs[j]
            else:
                m[j, c] = inp.pair_throughputs[c - J, :, pos]
    k = b.scale_factors.astype(float)
    gang = np.array([k[c[0]] for c in combos])
    prop = b.throughputs @ (b.capacity / b.capacity.sum())
    x = cp.Variable((len(combos), T))
    member = np.array([[1.0 if j in c else 0.0 for c in combos] for j in range(J)])
    w = b.weights()
    values = [cp.sum(cp.multiply(m[j] * k[j] / (w[j] * prop[j]), x)) for j in range(J)]
    problem = cp.Problem(
        cp.Maximize(cp.min(cp.hstack(values))),
        [x >= 0, member @ cp.sum(x, axis=1) <= 1, gang @ x <= b.capacity],
    )
    problem.solve(solver=cp.CLARABEL)
    assert problem.status == cp.OPTIMAL
    return float(problem.value)


@pytest.mark.parametrize("seed", range(6))
def test_value_matches_an_independent_cvxpy_model(seed: int) -> None:
    rng = np.random.default_rng(seed)
    J, T, A = int(rng.integers(3, 8)), int(rng.integers(1, 4)), 4
    single = rng.uniform(0.5, 5.0, (A, T))
    # Co-located throughput: a fraction of the isolated one (sometimes 0: the pair cannot run).
    frac = rng.uniform(0.0, 1.0, (A, A, T, 2)) * (rng.random((A, A, T, 1)) > 0.15)
    pair_table = frac * np.stack(
        [np.broadcast_to(single[:, None], (A, A, T)), np.broadcast_to(single[None], (A, A, T))],
        axis=-1,
    )
    kinds = rng.integers(0, A, J)
    scale = rng.choice([1, 2], J)
    pairs, pair_thr = packed.all_pairs(kinds, scale, single, pair_table)
    base = GavelInputs(
        throughputs=single[kinds],
        scale_factors=scale,
        capacity=rng.integers(1, 4, T).astype(float),
        job_ids=np.arange(J) + 10,
        priority_weights=rng.uniform(0.5, 2.0, J),
    )
    inp = packed.PackedInputs(base, pairs, pair_thr)
    a = packed.allocate(inp)
    expected = _cvxpy_value(inp)
    # Clarabel stops at a relative gap of about 1e-8; HiGHS's vertex is exact to ~1e-9.
    assert a.value == pytest.approx(expected, rel=1e-6)
    _assert_feasible(inp, a)
    # After finish()'s clip-and-scale (moves of ~1e-9), every job still gets s*.
    assert packed.normalised(inp, a.single, a.pair).min() == pytest.approx(expected, rel=1e-6)


def test_all_pairs_joins_only_equal_gangs() -> None:
    single = np.ones((2, 1))
    table = np.arange(8, dtype=float).reshape(2, 2, 1, 2)
    pairs, thr = packed.all_pairs(np.array([0, 1, 1, 0]), np.array([1, 1, 2, 1]), single, table)
    assert pairs.tolist() == [[0, 1], [0, 3], [1, 3]]
    # Pair (0, 1) has job types (0, 1): table[0, 1]; pair (1, 3) has types (1, 0): table[1, 0].
    assert thr[:, 0].tolist() == [[2.0, 3.0], [0.0, 1.0], [4.0, 5.0]]


def test_restrict_keeps_pairs_inside_and_renumbers() -> None:
    inp = _inputs(
        [[1.0]] * 4, [(0, 1), (0, 2), (2, 3)], [[[0.5, 0.5]], [[0.6, 0.6]], [[0.7, 0.7]]], [2.0]
    )
    sub = packed.restrict(inp, np.array([0, 2, 3]), np.array([1.0]))
    assert sub.pairs.tolist() == [[0, 1], [1, 2]]
    assert sub.pair_throughputs[:, 0, 0].tolist() == [0.6, 0.7]
    assert sub.base.job_ids.tolist() == [0, 2, 3]


@pytest.mark.parametrize(
    ("pairs", "pair_thr", "scale", "field"),
    [
        ([(0, 1)], [[[1.0, 1.0]]], [1, 2], "pairs"),  # unequal gangs
        ([(1, 0)], [[[1.0, 1.0]]], [1, 1], "pairs"),  # not i < j
        ([(0, 1), (0, 1)], [[[1.0, 1.0]]] * 2, [1, 1], "pairs"),  # repeated
        ([(0, 1)], [[[1.0, -1.0]]], [1, 1], "pair_throughputs"),  # negative
        ([(0, 1)], [[[1.0]]], [1, 1], "pair_throughputs"),  # wrong shape
    ],
)
def test_bad_inputs_are_named(
    pairs: list[tuple[int, int]], pair_thr: list[list[list[float]]], scale: list[int], field: str
) -> None:
    with pytest.raises(InvalidProblem) as err:
        _inputs([[1.0], [1.0]], pairs, pair_thr, [2.0], scale=scale)
    assert err.value.field == field

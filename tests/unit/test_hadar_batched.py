"""The planner's whole-queue forms are the one-job forms to the last bit, for every utility shape:
stay options (``planner._with_stays`` against ``planner._with_stay``) and projected utilities
(``forking.projected_utilities`` against ``forking.projected_utility``).

Oracle: the one-job form applied job by job (what the planner ran before). Inputs: random rounds
where jobs hold whole gangs, part gangs, nothing, or pods on a type they may no longer use.
"""

from __future__ import annotations

import numpy as np
import pytest

from walras.allocator.hadar import make_inputs
from walras.allocator.hadar.admission import QueueJob
from walras.allocator.hadar.find_alloc import States, best_many
from walras.allocator.hadar.forking import GangState, projected_utilities, projected_utility
from walras.allocator.hadar.planner import _with_stay, _with_stays
from walras.allocator.hadar.utilities import Hyperbolic, InverseSlowdown, LinearDecay


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(
    "utility", [Hyperbolic(), InverseSlowdown(), InverseSlowdown(1.7), LinearDecay()]
)
def test_with_stays_equals_with_stay(seed: int, utility: object) -> None:
    rng = np.random.default_rng(seed)
    J, T, K = int(rng.integers(1, 40)), int(rng.integers(1, 4)), int(rng.integers(1, 12))
    node_type = rng.integers(0, T, K)
    node_type[: min(T, K)] = np.arange(min(T, K))
    thr = rng.uniform(0.1, 3.0, (J, T)) * (rng.random((J, T)) < 0.8)
    thr[:, 0] = np.where(thr.max(axis=1) == 0, 1.0, thr[:, 0])
    replicas = rng.choice([1, 2, 4], J)
    current = np.zeros((J, K), dtype=np.int64)
    for j in range(J):
        # Whole gang (most), part of one, or nothing, on random nodes.
        pods = [int(replicas[j]), max(int(replicas[j]) - 1, 0), 0][int(rng.integers(0, 3))]
        for _ in range(pods):
            current[j, int(rng.integers(0, K))] += 1
    remaining = rng.uniform(1.0, 1e5, J)
    inputs = make_inputs(
        thr,
        replicas,
        remaining,
        node_type,
        np.maximum(current.sum(axis=0), 4),
        elapsed=rng.uniform(0.0, 1e5, J),
        current=current,
        weight=rng.uniform(0.5, 2.0, J),
        total_work=remaining * rng.uniform(1.0, 3.0, J),
        utility=utility,  # type: ignore[arg-type]
    )
    order = rng.permutation(J)
    utils = rng.uniform(0.0, 1.0, (J, T))
    queue = [QueueJob(int(j), thr[j], int(replicas[j]), utils[j]) for j in order]
    forked = rng.random(J) < 0.2
    fast = _with_stays(inputs, queue, forked)
    slow = [q if forked[q.job] else _with_stay(inputs, q) for q in queue]
    for a, b in zip(fast, slow, strict=True):
        assert a.job == b.job and a.gang == b.gang
        assert (a.stay is None) == (b.stay is None)
        if b.stay is not None:
            assert a.stay is not None and np.array_equal(a.stay, b.stay)
            assert a.stay.dtype == b.stay.dtype
        assert a.stay_utility == b.stay_utility
        assert a.stay_rate == b.stay_rate


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("utility", [Hyperbolic(), InverseSlowdown(1.7), LinearDecay()])
def test_projected_utilities_equal_projected_utility(seed: int, utility: object) -> None:
    rng = np.random.default_rng(1000 + seed)
    J = int(rng.integers(1, 30))
    thr = rng.uniform(0.1, 3.0, (J, 2))
    remaining = rng.uniform(1.0, 1e5, J)
    inputs = make_inputs(
        thr,
        np.ones(J, dtype=np.int64),
        remaining,
        np.array([0, 1]),
        np.array([8, 8]),
        elapsed=rng.uniform(0.0, 1e5, J),
        weight=rng.uniform(0.5, 2.0, J),
        total_work=remaining * 2.0,
        utility=utility,  # type: ignore[arg-type]
    )
    gangs = {
        int(j): [
            GangState(((0, 1),), float(rng.choice([0.0, rng.uniform(0.1, 3.0)])), bool(k), 0.0)
            for k in rng.integers(0, 2, int(rng.integers(1, 4)))
        ]
        for j in rng.permutation(J)[: int(rng.integers(1, J + 1))]
    }
    fast = projected_utilities(inputs, gangs)
    assert fast.keys() == gangs.keys()
    for j, job_gangs in gangs.items():
        assert fast[j] == projected_utility(inputs, j, job_gangs)


@pytest.mark.parametrize("seed", range(25))
def test_best_many_payoffs_by_gang_equal_per_job(seed: int) -> None:
    """The queue DP's FIND_ALLOC (``best_many`` without details: fills computed once per gang
    size) against the per-job form (``details=True``), bit-for-bit, with tied speeds on some
    jobs and utilities that differ between tied types (the per-job argmin then decides)."""
    rng = np.random.default_rng(2000 + seed)
    T = int(rng.integers(1, 4))
    dims = rng.integers(0, 6, T)
    grid = np.indices(tuple(int(d) + 1 for d in dims)).reshape(T, -1).T.astype(np.int64)
    prices = rng.uniform(0.01, 1.0, grid.shape)
    strides = np.array([int(np.prod(dims[r + 1 :] + 1)) for r in range(T)], dtype=np.int64)
    n = int(rng.integers(1, 40))
    speeds = rng.choice(np.array([0.0, 0.5, 1.0, 1.5, 2.0]), (n, T))
    speeds[:, 0] = np.where(speeds.max(axis=1) == 0, 1.0, speeds[:, 0])
    gangs = rng.choice(np.array([1, 2, 3, 4, 8]), n).astype(np.int64)
    utils = np.where(speeds > 0, rng.uniform(0.0, 3.0, (n, T)), 0.0)
    fast = best_many(States(grid, prices, strides), speeds, gangs, utils, details=False)
    slow = best_many(States(grid, prices, strides), speeds, gangs, utils, details=True)
    assert np.array_equal(fast.payoff, slow.payoff)
    assert np.array_equal(fast.after, slow.after)

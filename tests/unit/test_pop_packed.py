"""POP around Gavel's max-min fairness with space sharing (``pop.solve_packed``).

Oracles: feasibility checked directly on the merged arrays; weak duality against the exact LP
(the merged allocation is feasible for the full problem, so its smallest normalised throughput,
measured with the full problem's normalisation, cannot exceed the exact ``s*``); the pairs a
shard may use, derived from the shard assignment; the exact LP itself for ``k = 1``.
"""

from __future__ import annotations

import numpy as np
import pytest

from walras.allocator import pop
from walras.allocator.gavel import GavelInputs, packed


def _instance(seed: int, J: int, per_type: float) -> packed.PackedInputs:
    rng = np.random.default_rng(seed)
    A, T = 5, 3
    single = rng.uniform(0.5, 5.0, (A, T))
    frac = rng.uniform(0.2, 0.9, (A, A, T, 2))
    pair_table = frac * np.stack(
        [np.broadcast_to(single[:, None], (A, A, T)), np.broadcast_to(single[None], (A, A, T))],
        axis=-1,
    )
    kinds = rng.integers(0, A, J)
    scale = rng.choice([1, 1, 1, 2], J)
    pairs, pair_thr = packed.all_pairs(kinds, scale, single, pair_table)
    base = GavelInputs(
        throughputs=single[kinds],
        scale_factors=scale,
        capacity=np.full(T, per_type),
        job_ids=rng.permutation(10 * J)[:J],
    )
    return packed.PackedInputs(base, pairs, pair_thr)


@pytest.mark.parametrize(("seed", "k"), [(0, 2), (1, 4), (2, 3), (3, 8)])
def test_merged_allocation_is_feasible_and_below_the_exact_optimum(seed: int, k: int) -> None:
    inp = _instance(seed, 40, 8.0)
    res = pop.solve_packed(inp, k)
    assert res.run.sharded and res.run.k == k
    assert (res.single >= 0).all() and (res.pair >= 0).all()
    assert (packed.time_used(inp, res.single, res.pair) <= 1.0 + 1e-12).all()
    assert (packed.gpus_used(inp, res.single, res.pair) <= inp.base.capacity + 1e-9).all()
    # Pairs across shards are not part of any sub-problem: their share is exactly 0.
    shard = res.run.assignment[inp.pairs]
    assert (res.pair[shard[:, 0] != shard[:, 1]] == 0.0).all()
    exact = packed.allocate(inp)
    assert packed.normalised(inp, res.single, res.pair).min() <= exact.value * (1 + 1e-9)
    # Each shard reports its own optimum; the merged value is the smallest of them.
    assert res.value == min(s.objective for s in res.run.shards if s.rows)


def test_k1_is_the_exact_lp() -> None:
    inp = _instance(5, 30, 6.0)
    res = pop.solve_packed(inp, 1)
    exact = packed.allocate(inp)
    assert not res.run.sharded
    np.testing.assert_array_equal(res.single, exact.single)
    np.testing.assert_array_equal(res.pair, exact.pair)
    assert res.value == exact.value


def test_a_job_keeps_its_shard_when_unrelated_jobs_leave() -> None:
    inp = _instance(6, 40, 8.0)
    full = pop.solve_packed(inp, 4)
    stay = np.arange(0, 40, 3)
    sub = packed.restrict(inp, stay, inp.base.capacity)
    part = pop.solve_packed(sub, 4)
    np.testing.assert_array_equal(part.run.assignment, full.run.assignment[stay])


def test_worker_processes_give_the_in_process_answer() -> None:
    inp = _instance(7, 30, 6.0)
    one = pop.solve_packed(inp, 2, workers=1)
    two = pop.solve_packed(inp, 2, workers=2)
    assert two.run.workers == 2
    np.testing.assert_array_equal(one.single, two.single)
    np.testing.assert_array_equal(one.pair, two.pair)

"""POP in the scheduling core with gangs larger than a shard's share of every type.

Four 8-GPU gangs on 16 V100 + 12 K80: split four ways by demand, a shard with one gang gets
16 · 8/32 = 4 V100 and 3 K80, so no gang fits its shard and price discovery would drop it as
Unsolvable every round (it never runs). The wrapper must solve such a round exactly. Oracles:
the exact policy schedules every gang (no issue), the sharded answer does too, and it is
type-feasible (the checks of ``test_core_policies``).
"""

from __future__ import annotations

import numpy as np
from tests.unit.snapshot_helpers import assert_type_feasible, cluster, job, solve, with_work

from walras.allocator import pop
from walras.core import snapshot
from walras.core.policies.sharded import fits


def gangs() -> snapshot.Store:
    return cluster(
        with_work([job(f"g{i}", {"v100": 4.0 + i, "k80": 1.0}, replicas=8) for i in range(4)])
    )


def test_gangs_that_fit_no_shard_are_solved_exactly() -> None:
    store = gangs()
    exact = solve("price-discovery", store)
    assert not exact.issues
    sol = solve("price-discovery", store, pop_shards=4)
    # The gangs' shards (stable hashes): any shard holding one gang alone gets 4 V100, 3 K80.
    of = [pop.shard_of(j.uid, 4) for j in store.freeze(now=0.0).jobs]
    assert 1 in {of.count(s) for s in of}
    assert not sol.issues
    assert sol.timings["pop_exact_fallback"] == 1.0
    assert_type_feasible(sol, store)
    assert np.all(sol.targets.sum(axis=1) > 0)  # every gang gets some time


def test_fits_needs_one_type_the_job_runs_on_with_room_for_the_gang() -> None:
    spec = next(iter(gangs().freeze(now=0.0).jobs))
    types = ("v100", "k80")
    assert fits(spec, np.array([8.0, 0.0]), types)
    assert not fits(spec, np.array([7.0, 7.0]), types)
    assert fits(spec, np.array([0.0, 8.0]), types)

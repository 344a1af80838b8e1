"""``walras.core.policies.sharded.at_least_one``: every shard with jobs keeps ≥ 1 GPU of a type.

Oracles: the invariants the merge relies on (each type's column keeps its sum, so the merged
allocation stays feasible; no negative part) and the guarantee itself, derived by counting:
a type with at least as many GPUs as live shards can give each of them one.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.core.policies.sharded import at_least_one


def test_a_shard_rounded_down_to_zero_gets_one_gpu_from_the_largest() -> None:
    # Demand 39:1 over 20 GPUs of each type: the split gives (20, 0); shard 1 needs one of each.
    got = at_least_one(np.array([[20.0, 20.0, 20.0], [0.0, 0.0, 0.0]]), np.array([True, True]))
    np.testing.assert_array_equal(got, [[19.0, 19.0, 19.0], [1.0, 1.0, 1.0]])


def test_idle_shards_give_first_and_short_types_are_left_alone() -> None:
    parts = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    live = np.array([True, True, True, False])
    got = at_least_one(parts, live)
    # Type 0: the idle shard 3 gives its GPU to shard 1; live shards 0 and 2 keep theirs.
    np.testing.assert_array_equal(got[:, 0], [1.0, 1.0, 1.0, 0.0])
    # Type 1 has 1 GPU for 3 live shards: nothing can give each one, so it stays as split.
    np.testing.assert_array_equal(got[:, 1], parts[:, 1])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda k: st.tuples(
            st.lists(st.lists(st.integers(0, 5), min_size=3, max_size=3), min_size=k, max_size=k),
            st.lists(st.booleans(), min_size=k, max_size=k),
        )
    )
)
def test_columns_keep_their_sums_and_live_shards_get_one(
    data: tuple[list[list[int]], list[bool]],
) -> None:
    parts = np.array(data[0], dtype=np.float64)
    live = np.array(data[1])
    got = at_least_one(parts, live)
    np.testing.assert_array_equal(got.sum(axis=0), parts.sum(axis=0))
    assert np.all(got >= 0.0)
    for t in range(parts.shape[1]):
        if parts[:, t].sum() >= live.sum():
            assert np.all(got[live, t] >= 1.0)
        else:
            np.testing.assert_array_equal(got[:, t], parts[:, t])

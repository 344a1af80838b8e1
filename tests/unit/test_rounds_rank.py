"""``plan_round``'s ``rank``: inside a rank group (a tenant), higher rank takes the group's turns.

Oracle: the rule of ``plan_round``'s docstring: the pairs of one rank group in one GPU group keep
the positions the visit order gives them and are reassigned to them by rank, so which rank group
is served when is exactly as without ranks.
"""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

from walras.allocator.errors import InvalidProblem
from walras.allocator.rounds import plan_round
from walras.allocator.rounds.planner import _by_rank


def _plan(
    rank: list[float] | None, rank_group: list[int] | None, received: list[float]
) -> set[int]:
    """Three 1-GPU jobs, targets ½, on one 1-GPU node: who is placed."""
    plan = plan_round(
        targets=np.full((3, 1), 0.5),
        received=np.array(received)[:, None],
        elapsed=np.full(3, 4.0),
        replicas=np.ones(3, dtype=np.int64),
        gpus_per_pod=np.ones(3, dtype=np.int64),
        node_group=np.zeros(1, dtype=np.int64),
        node_free=np.ones(1, dtype=np.int64),
        order="deficit",
        rank=rank,
        rank_group=rank_group,
    )
    return {p.job for p in plan.placements}


def test_inside_a_rank_group_the_higher_rank_takes_the_turn() -> None:
    # Job 0 is furthest behind (received 0): it goes first without ranks.
    assert _plan(None, None, [0.0, 2.0, 3.0]) == {0}
    # Same rank group, job 2 ranked higher: the group's turn is job 2's.
    assert _plan([0, 0, 5], [0, 0, 0], [0.0, 2.0, 3.0]) == {2}
    # Job 2 in another rank group: its rank does not buy it job 0's turn.
    assert _plan([0, 0, 5], [0, 0, 1], [0.0, 2.0, 3.0]) == {0}


def test_a_malformed_rank_is_refused_naming_it() -> None:
    with pytest.raises(InvalidProblem, match="rank"):
        _plan([0, 1], None, [0.0, 0.0, 0.0])
    with pytest.raises(InvalidProblem, match="rank_group"):
        _plan([0, 1, 2], [0], [0.0, 0.0, 0.0])


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 2), st.integers(-2, 2)),
        min_size=1,
        max_size=12,
    )
)
def test_positions_of_each_rank_group_are_kept_and_filled_by_rank(
    rows: list[tuple[int, int, int, int]],
) -> None:
    # One pair per row: job index = row, its group, its rank group, its rank; a shuffled visit.
    n = len(rows)
    jj = np.arange(n, dtype=np.int64)
    gg = np.array([r[1] for r in rows], dtype=np.int64)
    groups = np.array([r[2] for r in rows], dtype=np.int64)
    rank = np.array([r[3] for r in rows], dtype=np.float64)
    visit = np.array(sorted(range(n), key=lambda i: (rows[i][0], i)), dtype=np.int64)
    out = _by_rank(visit, jj, gg, rank, groups, n)
    assert sorted(out.tolist()) == sorted(visit.tolist())
    key = lambda i: (int(groups[jj[i]]), int(gg[i]))  # noqa: E731
    assert [key(i) for i in out] == [key(i) for i in visit]
    for k in {key(i) for i in visit}:
        mine = [int(i) for i in out if key(i) == k]
        before = [int(i) for i in visit if key(i) == k]
        # Higher rank first; equal ranks in the visit's order.
        assert mine == sorted(before, key=lambda i: (-rank[i], before.index(i)))

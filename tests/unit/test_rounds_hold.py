"""The realiser's ``hold`` credit: running gangs are served in blocks, shares still converge.

Oracle: a job split evenly over two groups with no competitor. With Gavel's priority (hold 0) it
alternates every round (R − 1 switches in R rounds, each a pod restart). With a credit of ``h``
rounds on the group it runs in, it stays until it is ``h`` rounds ahead there, so blocks last about
``h + 1`` rounds and the switches fall by that factor. The share error stays bounded: at any time
the job is at most ``h`` (the credit) + 1 (rounds are whole) rounds ahead of its target on one
group, so ``|received/elapsed − target| ≤ (h + 1) / R`` after ``R`` rounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from walras.allocator import rounds
from walras.allocator.errors import InvalidProblem


def run(
    hold: float | np.ndarray, n_rounds: int, targets: list[list[float]]
) -> tuple[int, np.ndarray, np.ndarray]:
    t = np.array(targets, dtype=np.float64)
    n_jobs, n_groups = t.shape
    received = np.zeros((n_jobs, n_groups))
    elapsed = np.zeros(n_jobs)
    node_group = np.arange(n_groups)
    current = None
    switches = 0
    last: dict[int, int] = {}
    for _ in range(n_rounds):
        plan = rounds.plan_round(
            targets=t,
            received=received,
            elapsed=elapsed,
            replicas=np.ones(n_jobs, dtype=np.int64),
            gpus_per_pod=np.ones(n_jobs, dtype=np.int64),
            node_group=node_group,
            node_free=np.ones(n_groups, dtype=np.int64),
            current=current,
            hold=hold,
        )
        for p in plan.placements:
            if p.job in last and last[p.job] != p.group:
                switches += 1
            last[p.job] = p.group
        received, elapsed = rounds.advance(received, elapsed, plan, np.ones(n_jobs, dtype=bool))
        current = rounds.as_current(plan, n_jobs, n_groups)
    return switches, received, elapsed


@pytest.mark.parametrize("hold", [1.0, 2.0, 4.0])
def test_hold_serves_split_jobs_in_blocks_and_still_converges(hold: float) -> None:
    n = 60
    base, _, _ = run(0.0, n, [[0.5, 0.5]])
    assert base == n - 1  # Gavel's priority alternates every round
    switches, received, elapsed = run(hold, n, [[0.5, 0.5]])
    # Blocks of about hold + 1 rounds: at most n / (hold + 1) + 1 switches.
    assert switches <= n / (hold + 1) + 1, switches
    error = np.abs(received / elapsed[:, None] - 0.5).max()
    assert error <= (hold + 1) / n, error


def test_hold_never_lets_a_running_job_starve_a_waiting_one() -> None:
    # Two jobs share one 1-GPU group at 0.5 each: the waiting job still gets its half, to within
    # the same (hold + 1) / R bound.
    n, hold = 80, 3.0
    _, received, elapsed = run(hold, n, [[0.5], [0.5]])
    share = received[:, 0] / elapsed
    assert np.all(np.abs(share - 0.5) <= (hold + 1) / n), share


def test_negative_hold_is_rejected() -> None:
    with pytest.raises(InvalidProblem, match="hold"):
        run(-1.0, 1, [[1.0]])


def test_backfill_gives_leftover_gpus_to_jobs_outside_their_targets() -> None:
    # Two 1-GPU groups. Jobs 0 and 1 both target group 0 only (0.5 each), job 1 can also run in
    # group 1. Without backfill group 1 idles; with it, the job left out of group 0 runs there.
    kwargs = dict(
        targets=[[0.5, 0.0], [0.5, 0.0]],
        received=np.zeros((2, 2)),
        elapsed=np.zeros(2),
        replicas=np.ones(2, dtype=np.int64),
        gpus_per_pod=np.ones(2, dtype=np.int64),
        node_group=np.array([0, 1]),
        node_free=np.ones(2, dtype=np.int64),
    )
    plain = rounds.plan_round(**kwargs)
    assert [(p.job, p.group) for p in plain.placements] == [(0, 0)]
    filled = rounds.plan_round(**kwargs, backfill=[[True, False], [True, True]])
    assert [(p.job, p.group) for p in filled.placements] == [(0, 0), (1, 1)]
    # A job that cannot run on the idle group is never put there.
    none = rounds.plan_round(**kwargs, backfill=[[True, False], [True, False]])
    assert [(p.job, p.group) for p in none.placements] == [(0, 0)]
    with pytest.raises(InvalidProblem, match="backfill"):
        rounds.plan_round(**kwargs, backfill=[[True]])


def test_a_hold_per_job_is_each_job_its_own_credit() -> None:
    # Two independent jobs, each split evenly over its own two groups: job 0 on groups 0/1,
    # job 1 on groups 2/3. Given (J,) holds, each job must behave exactly as it does alone under
    # its own scalar hold (the credit only ever applies to a job's own pair).
    targets = [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]
    alone_0, _, _ = run(0.0, 40, [[0.5, 0.5]])
    alone_1, _, _ = run(4.0, 40, [[0.5, 0.5]])
    both, _, _ = run(np.array([0.0, 4.0]), 40, targets)
    assert both == alone_0 + alone_1


def test_a_hold_of_the_wrong_shape_names_the_field() -> None:
    with pytest.raises(InvalidProblem) as err:
        run(np.array([1.0, 2.0, 3.0]), 1, [[0.5, 0.5]])
    assert err.value.field == "hold"

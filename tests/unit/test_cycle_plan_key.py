"""The cycle reuses a keyed policy's last solution while its key holds (``cycle.solve``)."""

from __future__ import annotations

from collections.abc import Hashable

from tests.unit.one_gpu_helpers import ROUND
from tests.unit.one_gpu_helpers import apply_plan as _apply
from tests.unit.one_gpu_helpers import store_one_gpu_two_jobs as _store

from walras.core import cycle, policies, snapshot


class Counting:
    """max-min fairness, counting the solver's runs (no ``plan_key``)."""

    def __init__(self) -> None:
        self.inner = policies.create("max-min-fairness")
        self.name = self.inner.name
        self.work_conserving = self.inner.work_conserving
        self.reports_gap = self.inner.reports_gap
        self.key: Hashable | None = "same"
        self.solves = 0

    def warm_up(self) -> None:
        self.inner.warm_up()

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> policies.Solution:
        self.solves += 1
        return self.inner.solve(snap, view)


class Keyed(Counting):
    """The same, keyed by a value the test sets."""

    def plan_key(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Hashable | None:
        del snap, view
        return self.key


def _rounds(policy: Counting, keys: list[Hashable | None]) -> list[cycle.CyclePlan]:
    store, state = _store(), cycle.CycleState()
    plans = []
    for n, key in enumerate(keys):
        policy.key = key
        now = n * ROUND
        plan = cycle.plan(state, policy, store.freeze(now=now), now=now, round_no=n + 1)
        _apply(store, plan)
        plans.append(plan)
    return plans


def test_an_unchanged_key_reuses_the_solution_with_the_rounds_jobs() -> None:
    policy = Keyed()
    plans = _rounds(policy, ["same", "same", "same"])
    assert policy.solves == 1
    first, *later = plans
    for plan in later:
        assert plan.solution.timings == {"reused": 1.0}
        assert (plan.solution.targets == first.solution.targets).all()
        # The reused solution names the jobs of the round's own snapshot (newer statuses).
        assert all(
            a is b for a, b in zip(plan.solution.jobs, plan.snapshot.active_jobs, strict=True)
        )


def test_a_new_key_or_none_solves_afresh() -> None:
    policy = Keyed()
    _rounds(policy, ["a", "a", "b", None, None, "b"])
    # a (solve), a (reuse), b (solve), None (solve), None (solve), b (solve: the last key was None)
    assert policy.solves == 5


def test_a_policy_without_a_key_solves_every_round() -> None:
    policy = Counting()
    _rounds(policy, ["same", "same", "same"])
    assert policy.solves == 3

"""When Hadar re-plans (``Hadar.plan_key``): on job and cluster changes, when its pods are not
where its last plan put them, and once every ``REPLAN_ROUNDS`` rounds; the cycle reuses the plan
in between."""

from __future__ import annotations

import pytest
from tests.unit.one_gpu_helpers import ROUND
from tests.unit.one_gpu_helpers import apply_plan as _apply

from walras.core import cycle, policies, snapshot
from walras.core.policies import hadar


def _store(jobs: int) -> snapshot.Store:
    store = snapshot.Store()
    store.upsert(
        "pool", {"metadata": {"name": "v100", "generation": 1}, "spec": {"gpuType": "v100"}}
    )
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "v100"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    for j in range(jobs):
        _add_job(store, f"j{j}")
    return store


def _add_job(store: snapshot.Store, name: str) -> None:
    store.upsert(
        "job",
        {
            "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": {
                "replicas": 1,
                "throughput": {"v100": 1.0},
                # Long enough that no job finishes during the test.
                "totalWork": 1e9,
                "template": {"spec": {"containers": [{"name": "c"}]}},
            },
        },
    )


def _round(
    state: cycle.CycleState, policy: policies.Policy, store: snapshot.Store, n: int
) -> cycle.CyclePlan:
    now = n * ROUND
    return cycle.plan(state, policy, store.freeze(now=now), now=now, round_no=n + 1)


def _reused(plan: cycle.CyclePlan) -> bool:
    return plan.solution.timings.get("reused") == 1.0


@pytest.mark.parametrize(("name", "period"), [("hadar", 1), ("hadare", 2)])
def test_rounds_without_events_reuse_the_plan_until_the_period_ends(name: str, period: int) -> None:
    store, state = _store(2), cycle.CycleState()
    policy = policies.create(name)
    period *= hadar.REPLAN_ROUNDS
    reused = []
    for n in range(2 * period):
        plan = _round(state, policy, store, n)
        reused.append(_reused(plan))
        _apply(store, plan)
    # Round 0 plans with no pods yet (no key: plan afresh); round 1 is the first keyed round,
    # so it solves and stores its key; then the plan holds until the period ends, and so on.
    assert reused[:2] == [False, False]
    for n in range(2, 2 * period):
        assert reused[n] is (n % period != 0), n


def test_a_new_job_and_a_deleted_pod_are_replanned_at_once() -> None:
    store, state = _store(1), cycle.CycleState()
    policy = policies.create("hadar")
    period = hadar.REPLAN_ROUNDS
    assert period >= 3  # the rounds below stay inside the first two periods
    reused = []
    for n in range(period + 2):
        if n == 2:
            _add_job(store, "late")
        if n == period + 1:
            # A pod vanishes (evicted, deleted by hand): the plan no longer describes the cluster.
            for pod in list(store.pods.values()):
                store.delete("pod", pod.namespace, pod.name)
        plan = _round(state, policy, store, n)
        reused.append(_reused(plan))
        _apply(store, plan)
    # 0: no pods yet; 1: first keyed round; 2: the new job; period: a new period;
    # period + 1: the deleted pod. Every other round reuses the plan.
    replanned = {0, 1, 2, period, period + 1}
    assert reused == [n not in replanned for n in range(period + 2)]

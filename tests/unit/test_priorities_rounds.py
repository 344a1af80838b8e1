"""Priorities through the round cycle (``walras.core.cycle`` → ``walras.core.realise``).

One node of v100 GPUs; one-GPU jobs; max-min fairness; each plan applied as the kubelet would.
Oracles, from the rules of ``walras.core.priorities``:

- a running gang of a run-to-completion class is never stopped: once it runs, it runs in every
  later round; it starts only inside its tenant's guarantee, so without one it never starts;
- inside a tenant, the higher class takes the tenant's GPUs first: when another tenant arrives
  and takes back one of two GPUs, the tenant's lower class is the one that stops, in every
  later round; with equal classes both jobs keep running in turns;
- a class the tenant does not allow is the default: the job is time-shared as before.
"""

from __future__ import annotations

from typing import Any

from tests.unit.one_gpu_helpers import ROUND, apply_plan

from walras.core import cycle, policies, priorities, snapshot


def _store(gpus: int) -> snapshot.Store:
    store = snapshot.Store()
    store.upsert(
        "pool", {"metadata": {"name": "v100", "generation": 1}, "spec": {"gpuType": "v100"}}
    )
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "v100"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    return store


def _job(store: snapshot.Store, ns: str, name: str, klass: str | None = None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if klass is not None:
        spec["priorityClassName"] = klass
    store.upsert(
        "job",
        {
            "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": {"replicas": 1, "throughput": {"v100": 1.0}, "template": {"spec": spec}},
        },
    )


def _class(store: snapshot.Store, name: str, value: int, sharing: bool = True) -> None:
    meta: dict[str, Any] = {"name": name}
    if not sharing:
        meta["annotations"] = {priorities.ANN_TIME_SHARING: "false"}
    store.upsert("priorityclass", {"metadata": meta, "value": value})


def _tenant(store: snapshot.Store, ns: str, allowed: list[str], guaranteed: int = 0) -> None:
    spec: dict[str, Any] = {"namespaces": [ns], "priorityClasses": allowed}
    if guaranteed:
        spec["quotas"] = {"v100": {"guaranteed": guaranteed}}
    store.upsert("tenant", {"metadata": {"name": ns}, "spec": spec})


def _rounds(
    store: snapshot.Store, rounds: int, arrive: dict[int, tuple[str, str]] | None = None
) -> tuple[list[set[str]], list[cycle.CyclePlan]]:
    """Who runs in each full round; ``arrive``: round → (namespace, job) created before it."""
    state, policy = cycle.CycleState(), policies.create("max-min-fairness")
    runners, plans = [], []
    for n in range(rounds):
        if arrive and n in arrive:
            _job(store, *arrive[n])
        now = n * ROUND
        plan = cycle.plan(state, policy, store.freeze(now=now), now=now, round_no=n + 1)
        runners.append({k[1] for k, jr in plan.realisation.jobs.items() if jr.group})
        plans.append(plan)
        apply_plan(store, plan)
    return runners, plans


def test_a_run_to_completion_job_is_never_stopped_once_it_runs() -> None:
    store = _store(1)
    _class(store, "exclusive", 0, sharing=False)
    _tenant(store, "ns", ["exclusive"], guaranteed=1)
    _job(store, "ns", "a", "exclusive")
    _job(store, "ns", "b")
    runners, plans = _rounds(store, 6)
    first = next(n for n, r in enumerate(runners) if "a" in r)
    assert first <= 1  # targets ½ each: it starts in one of the first two rounds
    assert all(r == {"a"} for r in runners[first:])
    assert all(p.realisation.jobs[("ns", "a")].held for p in plans[first + 1 :])


def test_without_the_class_the_same_jobs_alternate() -> None:
    store = _store(1)
    _class(store, "exclusive", 0, sharing=False)
    _tenant(store, "ns", [], guaranteed=1)  # not allowed: the default, time-shared
    _job(store, "ns", "a", "exclusive")
    _job(store, "ns", "b")
    runners, _ = _rounds(store, 4)
    assert runners[0] != runners[1] and runners[0] == runners[2]


def test_a_run_to_completion_job_without_a_guarantee_never_starts_and_says_why() -> None:
    store = _store(1)
    _class(store, "exclusive", 0, sharing=False)
    _tenant(store, "ns", ["exclusive"])  # no quota
    _job(store, "ns", "a", "exclusive")
    _job(store, "ns", "b")
    runners, plans = _rounds(store, 4)
    assert all(r == {"b"} for r in runners)  # b gets the GPU a cannot use
    whys = [p.realisation.jobs[("ns", "a")].why for p in plans]
    assert any("0 guaranteed v100 GPUs" in w for w in whys), whys


def _reclaim(hi_class: str | None) -> list[set[str]]:
    """Tenant a's jobs hi and lo hold both GPUs; tenant b's job arrives at round 2."""
    store = _store(2)
    _class(store, "high", 1000)
    _tenant(store, "a", ["high"])
    _job(store, "a", "hi", hi_class)
    _job(store, "a", "lo")
    runners, _ = _rounds(store, 7, arrive={2: ("b", "b1")})
    return runners


def test_on_a_reclaim_the_lower_class_of_the_tenant_loses_its_gpu_first() -> None:
    runners = _reclaim("high")
    assert runners[0] == runners[1] == {"hi", "lo"}
    # Tenant b's share is one GPU every round (max-min over the tenants); a keeps the other,
    # and gives it to its higher class.
    assert all(r == {"hi", "b1"} for r in runners[2:]), runners


def test_with_equal_classes_the_tenant_jobs_keep_sharing_what_is_left() -> None:
    runners = _reclaim(None)
    # Time sharing as always: after b1 arrives, lo still runs in some rounds.
    assert any("lo" in r for r in runners[2:]) and any("hi" in r for r in runners[2:])

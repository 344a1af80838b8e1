"""Quotas on statuses through the round loop (no Kubernetes): each Tenant's GPUs per type and
its ``GPUs`` column, ``Reclaimed`` on a job whose borrowed GPUs the guarantee's owner took back,
``QuotaExceeded`` on a job its tenant's maximum keeps waiting, and ``walras_tenant_gpus``.

Oracle: the definitions of ``walras.core.tenant_usage`` applied by hand. 8 GPUs; tenants a and b
guarantee 4 each. b runs two 4-GPU gangs and holds all 8, a nothing: nothing is free, so a lends
its 4 and b borrows 4 (``v100 8/4 +4``, ``v100 0/4 -4``). When a's 4-GPU gang arrives, its
guarantee gives it 4 GPUs: one of b's gangs must stop, and b was over its guarantee while a was
under: ``Reclaimed``, naming a and b.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from tests.unit.operator_fakes import GPU, FakeApi

from walras.core import policies
from walras.operator import loop, metrics


def tenant(name: str, **quota: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": 1},
        "spec": {"namespaces": [name], "quotas": {"v100": quota}},
    }


def job(ns: str, name: str, replicas: int = 4) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"u-{ns}-{name}", "generation": 1},
        "spec": {
            "replicas": replicas,
            "throughput": {"v100": 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def cluster(
    api: FakeApi, gpus: int, *objs: tuple[str, dict[str, Any]], clock: list[float] | None = None
) -> loop.RoundLoop:
    config = loop.LoopConfig(
        policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
        bind_at_create=True,
    )
    if clock is not None:
        config = dataclasses.replace(config, clock=lambda: clock[0])
    rounds = loop.RoundLoop(loop.snapshot.Store(), api, config)  # type: ignore[arg-type]
    store = rounds.store
    store.upsert(
        "pool", {"metadata": {"name": "v100", "generation": 1}, "spec": {"gpuType": "v100"}}
    )
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "v100"}},
            "status": {
                "allocatable": {GPU: str(gpus), "cpu": "64", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    for kind, obj in objs:
        store.upsert(kind, obj)
    return rounds


def run(rounds: loop.RoundLoop, api: FakeApi) -> None:
    """One round, then the watch: created pods appear running on n0, deleted ones go."""
    asyncio.run(rounds.run_round())
    deleted = set(api.names("delete"))
    for name, manifest in api.manifests.items():
        ns = manifest["metadata"]["namespace"]
        if name in deleted:
            rounds.store.delete("pod", ns, name)
            continue
        spec = {**manifest["spec"], "nodeName": "n0"}
        rounds.store.upsert("pod", {**manifest, "spec": spec, "status": {"phase": "Running"}})
        (owner,) = manifest["metadata"]["ownerReferences"]
        rounds.cache.facts.owner[(ns, name)] = owner["uid"]


def condition(api: FakeApi, job_name: str, ctype: str) -> dict[str, Any]:
    (found,) = [c for c in api.statuses[job_name]["conditions"] if c["type"] == ctype]
    return found


def gauge(tenant: str, state: str) -> float | None:
    labels = {"tenant": tenant, "gpu_type": "v100", "state": state}
    return metrics.REGISTRY.get_sample_value("walras_tenant_gpus", labels)


def test_lent_borrowed_then_reclaimed() -> None:
    api = FakeApi()
    rounds = cluster(
        api,
        8,
        ("tenant", tenant("a", guaranteed=4)),
        ("tenant", tenant("b", guaranteed=4)),
        ("job", job("b", "b1")),
        ("job", job("b", "b2")),
    )
    run(rounds, api)
    a, b = api.statuses["tenants/a"], api.statuses["tenants/b"]
    assert b["gpus"]["v100"] == {"guaranteed": 4, "inUse": 8, "borrowed": 4, "lent": 0}
    assert a["gpus"]["v100"] == {"guaranteed": 4, "inUse": 0, "borrowed": 0, "lent": 4}
    assert (a["summary"], b["summary"]) == ("v100 0/4 -4", "v100 8/4 +4")
    assert (gauge("a", "lent"), gauge("b", "borrowed"), gauge("b", "in_use")) == (4, 4, 8)
    writes = len(api.names("status:tenants"))
    run(rounds, api)  # nothing moved: no Tenant status is written again
    assert len(api.names("status:tenants")) == writes

    rounds.store.upsert("job", job("a", "a1"))
    run(rounds, api)
    assert condition(api, "a1", "Allocated")["status"] == "True"
    stopped = [n for n in ("b1", "b2") if condition(api, n, "Preempted")["status"] == "True"]
    assert len(stopped) == 1
    told = condition(api, stopped[0], "Preempted")
    assert told["reason"] == "Reclaimed"
    assert told["message"] == (
        "tenant a took back v100 GPUs of its guarantee of 4, which tenant b had borrowed "
        "(it held 8 of a guarantee of 4)"
    )
    assert ("Reclaimed", told["message"]) in api.events
    a, b = api.statuses["tenants/a"], api.statuses["tenants/b"]
    assert a["summary"] == "v100 4/4" and b["summary"] == "v100 4/4"
    assert gauge("a", "lent") == 0


def test_a_job_at_its_tenants_maximum_waits_with_quota_exceeded() -> None:
    # 12 GPUs; b may hold at most 8: two of its three 4-GPU gangs run, 4 GPUs stay free, and
    # the third waits because b holds 8 of its maximum of 8 (not for capacity).
    api = FakeApi()
    rounds = cluster(
        api,
        12,
        ("tenant", tenant("b", guaranteed=4, maximum=8)),
        *(("job", job("b", f"b{i}")) for i in range(3)),
    )
    run(rounds, api)
    waiting = [n for n in ("b0", "b1", "b2") if condition(api, n, "Allocated")["status"] == "False"]
    assert len(waiting) == 1
    told = condition(api, waiting[0], "Allocated")
    assert told["reason"] == "QuotaExceeded"
    assert told["message"] == (
        "tenant b holds 8 of its maximum of 8 v100 GPUs and the gang needs 4"
    )
    assert api.statuses["tenants/b"]["gpus"]["v100"] == {
        "guaranteed": 4,
        "inUse": 8,
        "borrowed": 4,
        "lent": 0,
        "maximum": 8,
    }


def test_a_gpu_count_moving_keeps_the_quotas_valid_transition_time() -> None:
    api = FakeApi()
    clock = [1000.0]
    rounds = cluster(api, 8, ("tenant", tenant("a", guaranteed=4)), clock=clock)
    run(rounds, api)
    first = api.statuses["tenants/a"]["conditions"][0]["lastTransitionTime"]
    clock[0] += 3600.0
    rounds.store.upsert("job", job("a", "a1"))
    run(rounds, api)
    told = api.statuses["tenants/a"]
    assert told["summary"] == "v100 4/4"  # written again: its GPUs moved
    assert told["conditions"][0]["lastTransitionTime"] == first  # QuotasValid did not flip

"""Profiling slices (walras.core.profiling) and the round loop that runs them.

Oracles: the rules of the module docstring applied by hand — which types are candidates and in
which order, when a slice ends (running seconds counted between two observations), what the
policy sees meanwhile — and, for the loop, a scripted cluster whose pods run at known steps/s per
GPU type (the API writes are applied to the store at once, a pod's annotation grows at its type's
rate): the measured rates must be those rates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.operator_fakes import GPU, FakeApi

from walras.core import admission, model, policies, profiling, progress, snapshot
from walras.kube import writes
from walras.operator import loop, throughputs

# ---- selection -----------------------------------------------------------------------------


def node(
    name: str, gpu_type: str, *, ready: bool = True, taint: bool = False, gpus: int = 8
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taint:
        spec["taints"] = [{"key": "reserved", "value": "x", "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": {"walras.dev/gpu-type": gpu_type}},
        "spec": spec,
        "status": {
            "allocatable": {GPU: str(gpus), "cpu": "32", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def job_obj(
    name: str, throughput: Mapping[str, float], *, uid: str = "", total: float | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 1,
        "template": {"spec": {"containers": [{"name": "c", "image": f"img-{name}"}]}},
    }
    if throughput:
        spec["throughput"] = dict(throughput)
    if total is not None:
        spec["totalWork"] = total
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid or f"u-{name}", "generation": 1},
        "spec": spec,
    }


def frozen(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> snapshot.Snapshot:
    store = snapshot.Store()
    for t in sorted({n["metadata"]["labels"]["walras.dev/gpu-type"] for n in nodes}):
        store.upsert("pool", {"metadata": {"name": t, "generation": 1}, "spec": {"gpuType": t}})
    for n in nodes:
        store.upsert("node", n)
    for j in jobs:
        store.upsert("job", j)
    return store.freeze(0.0)


def test_a_job_may_declare_no_throughput() -> None:
    parsed = model.parse_job(job_obj("free", {}))
    assert isinstance(parsed, model.JobSpec) and parsed.throughput == {}
    # Declared, and 0 everywhere, still says "runs nowhere".
    zero = model.parse_job(job_obj("zero", {"a": 0.0}))
    assert isinstance(zero, model.JobDefect) and zero.reason == "ZeroThroughput"


def test_candidates_are_usable_types_in_name_order() -> None:
    nodes = [
        node("c0", "c"),
        node("a0", "a"),
        node("b0", "b", ready=False),  # b has no ready node
        node("d0", "d", taint=True),  # d's only node has a taint the job does not tolerate
        node("e0", "e"),
    ]
    snap = frozen([job_obj("x", {}), job_obj("y", {"e": 3.0, "a": 0.0})], nodes)
    x, y = snap.jobs
    assert profiling.candidates(x, snap.pools, snap.nodes) == ("a", "c", "e")
    # Declared types are left out, unless declared_too; a declared 0 always.
    assert profiling.candidates(y, snap.pools, snap.nodes) == ("c",)
    assert profiling.candidates(y, snap.pools, snap.nodes, declared_too=True) == ("c", "e")


def test_candidates_hold_the_whole_gang() -> None:
    # A gang of 3 pods of 2 GPUs: type f's two 2-GPU nodes hold 2 pods (never the gang); type g's
    # 5-GPU node holds 2 and its 2-GPU node 1: 3 pods, the gang fits.
    gang = job_obj("gang", {})
    gang["spec"]["replicas"] = 3
    gang["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {GPU: "2"}}
    nodes = [
        node("f0", "f", gpus=2),
        node("f1", "f", gpus=2),
        node("g0", "g", gpus=5),
        node("g1", "g", gpus=2),
    ]
    snap = frozen([gang], nodes)
    assert profiling.candidates(snap.jobs[0], snap.pools, snap.nodes) == ("g",)


@pytest.mark.parametrize(
    ("declared", "sources", "measured", "declared_too", "expected"),
    [
        ({}, {}, False, False, True),  # nothing at all: profiled
        ({}, {"a": "estimated"}, False, False, False),  # an estimate (similar job, default)
        ({}, {}, True, False, False),  # its own measurement
        ({"a": 2.0}, {"a": "declared"}, False, False, False),  # declared: off by default
        ({"a": 2.0}, {"a": "declared"}, False, True, True),  # ... on with --profile-declared
        ({"a": 0.0}, {"a": "declared"}, False, False, True),  # declared 0 only: nothing usable
    ],
)
def test_who_is_profiled(
    declared: dict[str, float],
    sources: dict[str, str],
    measured: bool,
    declared_too: bool,
    expected: bool,
) -> None:
    assert profiling.needs(declared, sources, measured, declared_too=declared_too) is expected


def test_a_slice_counts_running_seconds_between_observations() -> None:
    # The docstring's example: S = 20 s, observations every 10 s.
    plan = profiling.Plan(("a", "b"))
    steps = [
        (0.0, set(), "a", 0.0),  # placed, not running yet
        (10.0, {"a"}, "a", 0.0),  # first seen running on a: the clock starts
        (20.0, {"a"}, "a", 10.0),
        (30.0, {"a"}, "b", 0.0),  # 20 s on a: next type
        (40.0, {"a"}, "b", 0.0),  # still on a (moving): b's clock has not started
        (50.0, {"b"}, "b", 0.0),
        (60.0, set(), "b", 0.0),  # not running at this observation: the interval is lost
        (70.0, {"b"}, "b", 0.0),
        (80.0, {"b"}, "b", 10.0),
        (90.0, {"b"}, None, 0.0),
    ]
    for now, running, current, ran in steps:
        plan.advance(running, now, 20.0)
        assert (plan.current, plan.ran) == (current, ran), now
    assert plan.done
    # What the policy sees: the type being profiled alone, and after the slices either nothing
    # (measurements took over) or every candidate at the provisional value (nothing reported).
    assert profiling.Plan(("a", "b")).throughput({}, reported=False) == {"a": profiling.PROVISIONAL}
    assert profiling.Plan(("a", "b"), index=1).throughput({"b": 5.0}, reported=False) == {"b": 5.0}
    assert plan.throughput({}, reported=True) == {}
    assert plan.throughput({}, reported=False) == {"a": 1.0, "b": 1.0}


def test_profiling_off_and_forgotten_jobs() -> None:
    snap = frozen([job_obj("x", {})], [node("a0", "a")])
    (x,) = snap.jobs
    off = profiling.Profiler(-1.0)
    assert not off.wants(x, {}, False)
    assert off.observe(x, sources={}, measured=False, pools=snap.pools, nodes=snap.nodes,
                       running=(), now=0.0) is None  # fmt: skip
    on = profiling.Profiler(5.0)
    assert on.observe(x, sources={}, measured=False, pools=snap.pools, nodes=snap.nodes,
                      running=(), now=0.0) is not None  # fmt: skip
    on.forget([])
    assert on.plans == {}


# ---- the round loop ------------------------------------------------------------------------


class Cluster(FakeApi):
    """Applies the loop's writes to its store at once; pods on a type advance their job's step
    counter at ``rates[type]`` steps/s (None: the workload reports nothing)."""

    def __init__(self, rounds_store: snapshot.Store, rates: Mapping[str, float] | None) -> None:
        super().__init__()
        self.store = rounds_store
        self.rates = rates
        self.facts: admission.Facts | None = None
        self.pods: dict[str, dict[str, Any]] = {}
        self.steps: dict[str, float] = {}  # job name -> cumulative steps
        self.placed: list[tuple[str, str]] = []  # (pod, GPU type) as bound or created bound

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> writes.Result:
        result = await super().create_pod(namespace, manifest)
        node = manifest["spec"].get("nodeName", "")  # created bound: its gang fitted
        obj = {**manifest, "status": {"phase": "Running" if node else "Pending"}}
        if node:
            self.placed.append((manifest["metadata"]["name"], node.rstrip("0123456789")))
        obj["metadata"] = {**manifest["metadata"], "uid": f"p-{manifest['metadata']['name']}"}
        self.pods[obj["metadata"]["name"]] = obj
        assert self.facts is not None  # what the watch records: the pod's controller job
        owner = manifest["metadata"]["ownerReferences"][0]["uid"]
        self.facts.owner[(namespace, obj["metadata"]["name"])] = owner
        self.store.upsert("pod", obj)
        return result

    async def bind_pod(self, namespace: str, name: str, node: str) -> writes.Result:
        result = await super().bind_pod(namespace, name, node)
        obj = self.pods[name]
        obj["spec"] = {**obj["spec"], "nodeName": node}
        obj["status"] = {"phase": "Running"}
        self.placed.append((name, node.rstrip("0123456789")))
        self.store.upsert("pod", obj)
        return result

    async def delete_pod(self, namespace: str, name: str, **kw: Any) -> writes.Result:
        result = await super().delete_pod(namespace, name, **kw)
        self.pods.pop(name, None)
        self.store.delete("pod", namespace, name)
        return result

    def tick(self, seconds: float) -> None:
        """``seconds`` pass: running pods add steps at their type's rate and report them."""
        if self.rates is None:
            return
        for obj in self.pods.values():
            if obj["status"]["phase"] != "Running":
                continue
            job = obj["metadata"]["labels"]["walras.dev/job"]
            gpu_type = obj["spec"]["nodeName"].rstrip("0123456789")
            self.steps[job] = self.steps.get(job, 0.0) + self.rates[gpu_type] * seconds
            annotations = dict(obj["metadata"]["annotations"])
            annotations[progress.ANN_STEPS_DONE] = str(round(self.steps[job]))
            obj["metadata"] = {**obj["metadata"], "annotations": annotations}
            self.store.upsert("pod", obj)


ROUND = 10.0
SLICE = 20.0


def run(rates: Mapping[str, float] | None, total: float | None, rounds_n: int) -> Cluster:
    clock = [1000.0]
    store = snapshot.Store()
    cluster = Cluster(store, rates)
    rounds = loop.RoundLoop(
        store,
        cluster,  # type: ignore[arg-type]  # duck-typed stand-in for walras.kube.writes.Api
        loop.LoopConfig(
            policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
            round_seconds=ROUND,
            clock=lambda: clock[0],
            progress=throughputs.Settings(profiling_seconds=SLICE),
        ),
    )
    cluster.facts = rounds.cache.facts
    for t in ("a", "b"):
        store.upsert("pool", {"metadata": {"name": t, "generation": 1}, "spec": {"gpuType": t}})
        store.upsert("node", node(f"{t}0", t))
    store.upsert("job", job_obj("x", {}, uid="ux", total=total))
    for _ in range(rounds_n):
        asyncio.run(rounds.run_round())
        cluster.tick(ROUND)
        clock[0] += ROUND
    return cluster


def types_in_order(cluster: Cluster) -> list[str]:
    out: list[str] = []
    for _, t in cluster.placed:
        if not out or out[-1] != t:
            out.append(t)
    return out


def profiling_condition(status: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == profiling.CONDITION)


def test_a_job_with_no_throughput_is_profiled_on_each_type_then_uses_its_measurements() -> None:
    # Rounds at t = 0, 10, 20, ... (after 1000): placed on a at 0 and running from then; seen
    # running at 10 (clock starts), 20, 30 (20 s: a done) -> moved to b at 30, seen at 40, 50, 60
    # (b done) -> from 60 on the measured rates decide: a (4 steps/s) beats b (2).
    cluster = run({"a": 4.0, "b": 2.0}, total=None, rounds_n=6)
    assert types_in_order(cluster) == ["a", "b"]
    status = cluster.statuses["x"]
    cond = profiling_condition(status)
    assert (cond["status"], cond["reason"]) == ("True", profiling.PROFILING)
    assert "on b (2 of 2: a, b)" in cond["message"]
    cluster_after = run({"a": 4.0, "b": 2.0}, total=None, rounds_n=8)
    assert types_in_order(cluster_after) == ["a", "b", "a"]
    status = cluster_after.statuses["x"]
    cond = profiling_condition(status)
    assert (cond["status"], cond["reason"]) == ("False", profiling.DONE)
    assert status["profiling"] == {"types": ["a", "b"], "index": 2}  # what a restart reads
    # Two intervals of 10 s on each type (fewer than --measured-min-samples 3): the job's own
    # estimates, equal to the rates its pods ran at.
    assert status["throughputs"] == {
        "a": {"value": 4.0, "source": "estimated-own", "samples": 2},
        "b": {"value": 2.0, "source": "estimated-own", "samples": 2},
    }


def test_a_silent_workload_gets_no_progress_and_never_completes_by_provisional_work() -> None:
    # totalWork 10 would be "done" after 10 s at the provisional 1 work/s if accounted work
    # counted; the job reports nothing, so only its pods' success could complete it.
    cluster = run(None, total=10.0, rounds_n=9)
    assert types_in_order(cluster)[:2] == ["a", "b"]
    status = cluster.statuses["x"]
    assert status["phase"] != "Succeeded"
    cond = profiling_condition(status)
    assert (cond["status"], cond["reason"]) == ("False", profiling.NO_PROGRESS)
    assert cluster.pods  # still runs: provisional on every type


def test_a_restarted_operator_continues_the_plan_from_the_status() -> None:
    # status.profiling says: types a, c, b, now at c (index 1). c's pool is gone: skipped to b.
    raw = job_obj("x", {})
    raw["status"] = {"profiling": {"types": ["a", "c", "b"], "index": 1}}
    snap = frozen([raw], [node("a0", "a"), node("b0", "b")])
    keeper = throughputs.Throughputs(profiler=profiling.Profiler(SLICE))
    (x,) = keeper.prepare(snap, 0.0).jobs
    assert x.throughput == {"b": profiling.PROVISIONAL}
    fields = keeper.status_fields(x, {})
    assert fields["profiling"] == {"types": ["a", "c", "b"], "index": 2}
    # Garbage in status.profiling is no plan: the job starts one of its own (candidates a, b).
    raw["status"] = {"profiling": {"types": "a", "index": True}}
    (x,) = (
        throughputs.Throughputs(profiler=profiling.Profiler(SLICE))
        .prepare(frozen([raw], [node("a0", "a"), node("b0", "b")]), 0.0)
        .jobs
    )
    assert x.throughput == {"a": profiling.PROVISIONAL}

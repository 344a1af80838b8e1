"""The round loop with reported progress, against a scripted API (no Kubernetes).

A one-pod job declares 1 step/s on type g; its workload really does 2 steps/s (the pod's
``walras.dev/steps-done`` annotation grows by 20 every 10 s of the injected clock). Oracles: the
contract of walras.core.progress/estimation, computed by hand: after 3 intervals the measured
2 steps/s (3 samples) replaces the declared 1 (off by more than x2 would raise the mismatch
condition; x2 is not more than x2), a decreasing reading is ignored with one Warning Event naming
the pod, and the job completes at totalWork 100 from the reported steps.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.operator_fakes import GPU, FakeApi

from walras.core import policies, progress
from walras.operator import loop, metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(steps: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "train-r1-0",
            "uid": "pod-1",
            "labels": {"walras.dev/job": "train", "walras.dev/replica": "0"},
            "annotations": {
                "walras.dev/round": "1",
                "walras.dev/node": "n0",
                "walras.dev/group": "g",
                progress.ANN_STEPS_DONE: steps,
            },
        },
        "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


def setup(declared: float) -> tuple[loop.RoundLoop, FakeApi, Clock]:
    api = FakeApi()
    clock = Clock()
    rounds = loop.RoundLoop(
        loop.snapshot.Store(),
        api,  # type: ignore[arg-type]  # duck-typed stand-in for walras.kube.writes.Api
        loop.LoopConfig(
            policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
            clock=clock,
        ),
    )
    store = rounds.store
    store.upsert("pool", {"metadata": {"name": "g", "generation": 1}, "spec": {"gpuType": "g"}})
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "g"}},
            "status": {
                "allocatable": {GPU: "8", "cpu": "32", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    store.upsert(
        "job",
        {
            "metadata": {
                "namespace": "ns",
                "name": "train",
                "uid": "u1",
                "generation": 1,
                "creationTimestamp": "1970-01-01T00:16:40Z",  # t = 1000 s
            },
            "spec": {
                "replicas": 1,
                "throughput": {"g": declared},
                "totalWork": 100,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        },
    )
    return rounds, api, clock


def report(rounds: loop.RoundLoop, clock: Clock, at: float, steps: str) -> None:
    clock.now = at
    rounds.store.upsert("pod", pod(steps))
    rounds.cache.facts.owner[("ns", "train-r1-0")] = "u1"
    asyncio.run(rounds.run_round())


def test_progress_measures_replaces_declared_and_completes() -> None:
    rounds, api, clock = setup(declared=1.0)
    asyncio.run(rounds.run_round())  # creates and binds the pod
    for k, steps in enumerate(["0", "20", "40", "60"]):
        report(rounds, clock, 1010.0 + 10 * k, steps)
    status = api.statuses["train"]
    assert status["progress"]["stepsDone"] == 60
    g = status["progress"]["measured"]["g"]
    assert (g["stepsPerSecond"], g["samples"]) == (2.0, 3)  # 60 steps in 30 s
    assert status["throughputs"]["g"] == {
        "value": 2.0,
        "source": "measured",
        "declared": 1.0,
        "samples": 3,
    }
    assert not any(c["type"] == "ThroughputMismatch" for c in status["conditions"])
    # 40 steps left at the expected 2 steps/s from the last reading (t=1040): t=1060.
    assert status["progress"]["estimatedFinish"] == "1970-01-01T00:17:40.000000Z"
    value = metrics.REGISTRY.get_sample_value(
        "walras_job_throughput",
        {"namespace": "ns", "job": "train", "gpu_type": "g", "source": "measured"},
    )
    assert value == 2.0
    # A decreasing reading is ignored, with one Warning Event naming the pod.
    report(rounds, clock, 1050.0, "30")
    assert api.statuses["train"]["progress"]["stepsDone"] == 60
    assert [(r, "train-r1-0" in m) for r, m in api.events] == [(progress.DECREASING, True)]
    # totalWork 100 reached by the reported steps: Succeeded, reason TotalWorkDone.
    report(rounds, clock, 1060.0, "100")
    final = api.statuses["train"]
    assert final["phase"] == "Succeeded"
    allocated = next(c for c in final["conditions"] if c["type"] == "Allocated")
    assert allocated["reason"] == "TotalWorkDone" and "(reported)" in allocated["message"]


def test_declared_far_off_gets_a_condition() -> None:
    rounds, api, clock = setup(declared=0.5)  # 2 steps/s measured is 4x the declared 0.5
    asyncio.run(rounds.run_round())
    for k, steps in enumerate(["0", "20", "40", "60"]):
        report(rounds, clock, 1010.0 + 10 * k, steps)
    mismatch = next(
        c for c in api.statuses["train"]["conditions"] if c["type"] == "ThroughputMismatch"
    )
    assert mismatch["status"] == "True" and "declared 0.5, measured 2" in mismatch["message"]


def _forked_pod(name: str, uid: str, round_no: int, node: str, steps: str) -> dict[str, Any]:
    obj = pod(steps)
    obj["metadata"].update(name=name, uid=uid)
    obj["metadata"]["annotations"].update({"walras.dev/round": str(round_no)})
    obj["spec"]["nodeName"] = node
    return obj


def test_forked_copies_sum_and_gone_copies_are_nulled_in_the_patch() -> None:
    rounds, _, _ = setup(declared=1.0)
    store = rounds.store
    # Make the job forkable (HadarE) and give it two copies on n0 and n1 (round 3).
    raw = {
        "metadata": {"namespace": "ns", "name": "train", "uid": "u1", "generation": 1},
        "spec": {
            "replicas": 1,
            "forkable": True,
            "throughput": {"g": 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
        "status": {"progress": {"stepsDone": 5, "forkBase": 0, "copies": {"2/n9": 5}}},
    }
    store.upsert("job", raw)
    store.upsert("pod", _forked_pod("c0", "p0", 3, "n0", "10"))
    store.upsert("pod", _forked_pod("c1", "p1", 3, "n1", "20"))
    keeper = rounds.throughputs
    snap = keeper.prepare(store.freeze(10.0), 10.0)
    [spec] = snap.jobs
    # The restored copy 2/n9 is gone: its 5 steps move to the base; 5 + 10 + 20.
    assert keeper.tracker.progress("u1").steps_done == 35
    fields = keeper.status_fields(spec, {"gpuType": "g", "expectedThroughput": 1.0})
    assert fields["progress"]["copies"] == {"2/n9": None, "3/n0": 10.0, "3/n1": 20.0}
    assert fields["progress"]["forkBase"] == 5.0
    # What completion reads: the snapshot's job carries the tracker's progress.
    assert spec.status["progress"]["stepsDone"] == 35


def test_types_no_longer_known_are_removed_from_the_status() -> None:
    rounds, _, _ = setup(declared=1.0)
    store = rounds.store
    raw = {
        "metadata": {"namespace": "ns", "name": "train", "uid": "u1", "generation": 1},
        "spec": {
            "replicas": 1,
            "throughput": {"g": 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
        # An earlier round estimated type h, whose pool is gone now.
        "status": {"throughputs": {"h": {"value": 3.0, "source": "estimated-own"}}},
    }
    store.upsert("job", raw)
    keeper = rounds.throughputs
    [spec] = keeper.prepare(store.freeze(10.0), 10.0).jobs
    fields = keeper.status_fields(spec, {"gpuType": "g"})
    assert fields["throughputs"] == {
        "g": {"value": 1.0, "source": "declared", "declared": 1.0},
        "h": None,
    }
    assert fields["declaredThroughput"] == 1.0 and fields["measuredThroughput"] is None

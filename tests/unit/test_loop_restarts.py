"""The operator measures restart costs from its pod watch and prices them (no Kubernetes).

The example of ``walras.core.restarts``, played through the watch handlers on the injected clock:
a job reported 1,200 steps before it was preempted (its status says so); its next gang's pod is
created at t = 1100 s, reports its checkpoint's 1,000 steps at t = 1104 s and 1,050 at
t = 1112 s. Oracle, by hand from the module's definitions: restart cost 1112 − 1100 = 12 s,
1200 − 1000 = 200 steps lost in one fallback of one restore. The round then prices the job's
restarts at 12 s (``cycle.plan``'s ``restart_costs``), shows the figures in ``status.progress``,
and counts the sample in ``walras_restart_seconds`` under the job's tenant.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.unit.operator_fakes import GPU, FakeApi

from walras.core import cycle, model, policies, progress
from walras.operator import handlers, loop, metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, round_no: int, created: float, steps: str, *, forkable: bool = False) -> dict:
    annotations = {"walras.dev/round": str(round_no), "walras.dev/node": "n0"}
    if steps:
        annotations[progress.ANN_STEPS_DONE] = steps
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": model.format_time(created),
            "labels": {"walras.dev/job": "train", "walras.dev/replica": "0"},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "walras.dev/v1alpha1",
                    "kind": "FungibleJob",
                    "name": "train",
                    "uid": "u1",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


def setup(*, forkable: bool = False) -> tuple[loop.RoundLoop, FakeApi, Clock, handlers.Watcher]:
    api = FakeApi()
    clock = Clock()
    rounds = loop.RoundLoop(
        loop.snapshot.Store(),
        api,  # type: ignore[arg-type]  # duck-typed stand-in for walras.kube.writes.Api
        loop.LoopConfig(
            policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
            clock=clock,
            cycle_options=cycle.CycleOptions(restart_s=10.0),
        ),
    )
    watcher = handlers.Watcher(rounds.cache, rounds)
    watcher.apply(
        "pool",
        {"type": "ADDED", "object": {"metadata": {"name": "g"}, "spec": {"gpuType": "g"}}},
    )
    node = {
        "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "g"}},
        "status": {
            "allocatable": {GPU: "8", "cpu": "32", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    watcher.apply("node", {"type": "ADDED", "object": node})
    job = {
        "metadata": {
            "namespace": "ns",
            "name": "train",
            "uid": "u1",
            "generation": 1,
            "creationTimestamp": model.format_time(900.0),
        },
        "spec": {
            "replicas": 1,
            "forkable": forkable,
            "throughput": {"g": 1.0},
            "totalWork": 100000,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
        # What the earlier start reported before it was preempted.
        "status": {"phase": "Pending", "progress": {"stepsDone": 1200}},
    }
    watcher.apply("job", {"type": "ADDED", "object": job})
    return rounds, api, clock, watcher


def play(watcher: handlers.Watcher, clock: Clock, forkable: bool = False) -> None:
    """The new gang's pod: created at 1100, restored 1000 at 1104, progress at 1112."""
    for at, steps, etype in ((1101.0, "", "ADDED"), (1104.0, "1000", "MODIFIED")):
        clock.now = at
        watcher.apply("pod", {"type": etype, "object": pod("train-r5-0", 5, 1100.0, steps)})
    clock.now = 1112.0
    watcher.apply("pod", {"type": "MODIFIED", "object": pod("train-r5-0", 5, 1100.0, "1050")})


def samples(tenant: str) -> float:
    value = metrics.REGISTRY.get_sample_value("walras_restart_seconds_count", {"tenant": tenant})
    return value or 0.0


def test_the_watch_times_the_restart_and_the_round_prices_and_shows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds, api, clock, watcher = setup()
    before = samples("ns")
    play(watcher, clock)
    assert rounds.cache.restarts.stats("u1").costs == (12.0,)
    assert samples("ns") == before + 1
    priced: list[Any] = []
    real_plan = cycle.plan

    def spy(*args: Any, **kwargs: Any) -> cycle.CyclePlan:
        priced.append(kwargs.get("restart_costs"))
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(loop.cycle, "plan", spy)
    clock.now = 1120.0
    asyncio.run(rounds.run_round())
    assert priced == [{("ns", "train"): 12.0}]
    shown = api.statuses["train"]["progress"]
    assert {k: shown[k] for k in ("restartSeconds", "restartCostSeconds")} == {
        "restartSeconds": [12.0],
        "restartCostSeconds": 12.0,
    }
    assert (shown["stepsLost"], shown["fallbacks"], shown["restores"]) == (200, 1, 1)


def test_forked_jobs_are_not_measured() -> None:
    rounds, _, clock, watcher = setup(forkable=True)
    play(watcher, clock)
    assert rounds.cache.restarts.stats("u1").costs == ()

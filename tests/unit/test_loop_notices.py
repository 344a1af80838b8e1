"""The round loop writes the advance notice on pods, and only when it changes (no Kubernetes).

Two identical one-GPU jobs on one one-GPU node (``tests/unit/one_gpu_helpers.py``), full rounds
of 360 s, the writes applied back through the watch handlers as the API server would show them.
Oracles, by hand from the rule of ``walras.core.notice`` (as in ``tests/unit/test_notice.py``):
without a minimum run time the gang running after each round is stopped by the next, so its pod
carries ``walras.dev/stop-at`` = now + 360 s; with ``min_run_s = 400`` a gang started at ``s`` is
stopped at the first round ``t`` with ``t − s ≥ 400``, so only every other round announces. Each
announcement is one patch on one pod (a pod whose annotation already says it is not written
again), and a notice the next forecast takes back (the other job is deleted) is removed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.one_gpu_helpers import ROUND, store_one_gpu_two_jobs
from tests.unit.operator_fakes import FakeApi

from walras.core import cycle, model, notice, policies
from walras.operator import handlers, loop


class World:
    """The loop, its scripted API, and the watch that shows the writes back."""

    def __init__(self, min_run_s: float) -> None:
        self.api = FakeApi()
        self.now = 0.0
        self.rounds = loop.RoundLoop(
            store_one_gpu_two_jobs(),
            self.api,  # type: ignore[arg-type]  # duck-typed stand-in for writes.Api
            loop.LoopConfig(
                policy=policies.PolicyConfig("max-min-fairness"),
                round_seconds=ROUND,
                clock=lambda: self.now,
                cycle_options=cycle.CycleOptions(min_run_s=min_run_s),
            ),
        )
        self.watch = handlers.Watcher(self.rounds.cache, self.rounds)
        self.pods: dict[str, dict[str, Any]] = {}

    def round(self, at: float) -> dict[str, dict[str, str | None]]:
        """Run the full round at ``at``, show its writes back; the annotation patches it sent."""
        self.now = at
        self.api.annotations.clear()
        seen = len(self.api.calls)
        asyncio.run(self.rounds.run_round())
        for call in self.api.calls[seen:]:
            verb, name = call[0], call[1]
            if verb == "delete":
                gone = self.pods.pop(name)
                self.watch.apply("pod", {"type": "DELETED", "object": gone})
            elif verb == "create":
                manifest = self.api.manifests[name]
                node = manifest["metadata"]["annotations"]["walras.dev/node"]
                self.pods[name] = {
                    **manifest,
                    "spec": {**manifest["spec"], "nodeName": node},
                    "status": {"phase": "Running"},
                }
        for name, patch in self.api.annotations.items():
            meta = self.pods[name]["metadata"]
            merged = {**meta.get("annotations", {}), **patch}
            meta["annotations"] = {k: v for k, v in merged.items() if v is not None}
        for obj in self.pods.values():
            self.watch.apply("pod", {"type": "MODIFIED", "object": obj})
        return dict(self.api.annotations)

    def notices(self) -> dict[str, str]:
        return {
            name: obj["metadata"]["annotations"][notice.ANN_STOP_AT]
            for name, obj in self.pods.items()
            if notice.ANN_STOP_AT in obj["metadata"].get("annotations", {})
        }


def test_each_round_announces_the_next_stop_on_the_running_pod() -> None:
    world = World(min_run_s=0.0)
    for n in range(4):
        patches = world.round(n * ROUND)
        # One gang runs after each round, and the next round stops it: one patch, on its pod.
        [(name, value)] = world.notices().items()
        assert value == model.format_time((n + 1) * ROUND)
        assert patches == {name: {notice.ANN_STOP_AT: value}}


def test_the_minimum_run_time_delays_the_notice_and_nothing_is_rewritten() -> None:
    world = World(min_run_s=400.0)
    announced = []
    for n in range(5):
        patches = world.round(n * ROUND)
        announced.append(len(patches))
        assert len(world.notices()) == (1 if n % 2 else 0)
    assert announced == [0, 1, 0, 1, 0]


def test_a_notice_taken_back_is_removed() -> None:
    world = World(min_run_s=0.0)
    world.round(0.0)
    [(name, _)] = world.notices().items()
    # The other job goes: the running gang is kept at 360, and the forecast keeps it after.
    job = "b" if name.startswith("a") else "a"
    world.watch.apply(
        "job", {"type": "DELETED", "object": {"metadata": {"namespace": "ns", "name": job}}}
    )
    patches = world.round(ROUND)
    assert patches == {name: {notice.ANN_STOP_AT: None}}
    assert world.notices() == {}
    assert world.round(2 * ROUND) == {}  # steady: nothing written

"""A restarted round loop continues every job's schedule history from the persisted ConfigMaps.

Oracle: a loop that never stopped. Two loops plan the same cluster on the same clock; one is
replaced after round 3 by a fresh loop that reloads the history (through a stand-in API keeping
the ConfigMaps). At every later round both hold the same history for every job. A second check:
a job status accounted later than the record wins (an operator without ConfigMaps wrote it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from walras.core import history, model, policies
from walras.kube import writes
from walras.operator import history_store, loop

pytestmark = pytest.mark.slow  # a dozen rounds of the real loop (numpy backend)

GPU = "nvidia.com/gpu"


class FakeApi:
    """Accepts every write; keeps ConfigMaps (for ``history_store.load``)."""

    client = object()  # not None: the loop may use the history store
    concurrency = 4  # requests in flight, as walras.kube.writes.Api says of itself

    def __init__(self) -> None:
        self.maps: dict[tuple[str, str], dict[str, str]] = {}
        self.configmap_writes = 0

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 201)

    async def bind_pod(self, namespace: str, name: str, node: str) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 201)

    async def delete_pod(self, namespace: str, name: str, **_: Any) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 200)

    async def annotate_pod(self, namespace: str, name: str, annotations: Any) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 200)

    async def patch_job_status(self, namespace: str, name: str, status: Any) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 200)

    async def patch_pool_status(self, name: str, status: Any) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 200)

    async def post_event(self, job: Any, **_: Any) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 201)

    async def put_configmap(
        self, namespace: str, name: str, *, labels: Any, binary_data: Mapping[str, str]
    ) -> writes.Result:
        self.configmap_writes += 1
        self.maps[(namespace, name)] = dict(binary_data)
        return writes.Result(writes.Outcome.OK, 200)

    def loaded(self) -> history_store.Loaded:
        """What ``history_store.load`` reads back from these ConfigMaps."""
        return history_store.parse(
            {"metadata": {"namespace": ns, "name": name}, "binaryData": data}
            for (ns, name), data in self.maps.items()
        )


def make_loop(
    api: FakeApi, clock: list[float], statuses: Mapping[str, Any], history_namespace: str = ""
) -> loop.RoundLoop:
    rounds = loop.RoundLoop(
        loop.snapshot.Store(),
        api,  # type: ignore[arg-type]  # duck-typed stand-in for walras.kube.writes.Api
        loop.LoopConfig(
            policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
            clock=lambda: clock[0],
            history_namespace=history_namespace,
        ),
    )
    store = rounds.store
    store.upsert("pool", {"metadata": {"name": "g", "generation": 1}, "spec": {"gpuType": "g"}})
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "g"}},
            "status": {
                "allocatable": {GPU: "2", "cpu": "32", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    for i in range(3):  # three jobs on two GPUs: slices rotate, histories differ
        store.upsert(
            "job",
            {
                "metadata": {"namespace": "ns", "name": f"j{i}", "uid": f"u{i}", "generation": 1},
                "spec": {
                    "replicas": 1,
                    "throughput": {"g": 1.0 + i},
                    "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                },
                "status": dict(statuses.get(f"u{i}", {})),
            },
        )
    return rounds


def same(a: history.History, b: history.History) -> None:
    assert a.received == pytest.approx(b.received, abs=2e-3)  # records keep 1 ms
    assert a.elapsed == pytest.approx(b.elapsed, abs=2e-3)
    assert a.work_done == pytest.approx(b.work_done, abs=1e-2)
    assert a.running_group == b.running_group


@pytest.mark.parametrize("history_namespace", ["", "walras-system"])
def test_a_restarted_loop_continues_the_histories(
    monkeypatch: pytest.MonkeyPatch, history_namespace: str
) -> None:
    clock = [1000.0]
    api = FakeApi()
    asked: list[str] = []

    def permitted(client: object, namespace: str) -> bool:
        asked.append(namespace)
        return True

    monkeypatch.setattr(history_store, "permitted", permitted)
    monkeypatch.setattr(history_store, "load", lambda client, namespace: api.loaded())
    never = make_loop(FakeApi(), clock, {})
    first = make_loop(api, clock, {}, history_namespace)
    for _ in range(3):
        asyncio.run(never.run_round())
        asyncio.run(first.run_round())
        clock[0] += 10.0
    assert api.configmap_writes >= 1
    assert {ns for ns, _ in api.maps} == {history_namespace or "ns"}
    second = make_loop(api, clock, {}, history_namespace)
    asyncio.run(second.histories.restore(second.state))
    assert asked == [history_namespace]
    for _ in range(2):
        asyncio.run(never.run_round())
        asyncio.run(second.run_round())
        for uid in ("u0", "u1", "u2"):
            same(second.state.histories[uid], never.state.histories[uid])
        clock[0] += 10.0
    assert never.state.histories["u0"].elapsed == pytest.approx(40.0)


def test_a_status_accounted_later_than_the_record_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    api = FakeApi()
    monkeypatch.setattr(history_store, "permitted", lambda client, namespace: True)
    monkeypatch.setattr(history_store, "load", lambda client, namespace: api.loaded())
    first = make_loop(api, clock, {})
    asyncio.run(first.run_round())
    clock[0] += 10.0
    later = history.History(received={"g": 7.0}, elapsed=9.0, accounted_at=clock[0] - 1.0)
    second = make_loop(api, clock, {"u1": later.status_fields()})
    asyncio.run(second.histories.restore(second.state))
    asyncio.run(second.run_round())
    # u1 continues from its status (accounted at t - 1, not running): elapsed 9 + 1 s.
    assert second.state.histories["u1"].elapsed == pytest.approx(10.0)
    assert second.state.histories["u1"].received["g"] == pytest.approx(7.0)
    # The others continue from their records (round 1 at t - 10): elapsed 10 s.
    assert second.state.histories["u0"].elapsed == pytest.approx(10.0, abs=2e-3)
    assert model.parse_time(later.status_fields()["accountedAt"]) == pytest.approx(clock[0] - 1)

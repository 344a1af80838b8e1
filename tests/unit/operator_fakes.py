"""A scripted stand-in for ``walras.kube.writes.Api`` for round-loop tests (no Kubernetes), and a
round loop over it with one node and one gang job."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from walras.core import policies
from walras.kube import writes
from walras.operator import loop

GPU = "nvidia.com/gpu"


class FakeApi:
    """Records every write; answers from ``fail_create``/``fail_bind`` (pod -> Result) or OK."""

    concurrency = 4  # requests in flight, as walras.kube.writes.Api says of itself

    def __init__(
        self,
        fail_create: Mapping[str, writes.Result] | None = None,
        fail_bind: Mapping[str, writes.Result] | None = None,
    ) -> None:
        self.fail_create = dict(fail_create or {})
        self.fail_bind = dict(fail_bind or {})
        self.calls: list[tuple[str, ...]] = []
        self.statuses: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []
        self.created_on: dict[str, str] = {}  # pod -> spec.nodeName it was created with
        self.manifests: dict[str, dict[str, Any]] = {}
        self.annotations: dict[str, dict[str, str | None]] = {}  # pod -> last annotation patch

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> writes.Result:
        name = manifest["metadata"]["name"]
        self.calls.append(("create", name))
        self.created_on[name] = manifest["spec"].get("nodeName", "")
        self.manifests[name] = {
            **manifest,
            "metadata": {**manifest["metadata"], "namespace": namespace},
        }
        return self.fail_create.get(name, writes.Result(writes.Outcome.OK, 201))

    async def bind_pod(self, namespace: str, name: str, node: str) -> writes.Result:
        self.calls.append(("bind", name))
        return self.fail_bind.get(name, writes.Result(writes.Outcome.OK, 201))

    async def delete_pod(self, namespace: str, name: str, **_: Any) -> writes.Result:
        self.calls.append(("delete", name))
        return writes.Result(writes.Outcome.OK, 200)

    async def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> writes.Result:
        self.calls.append(("annotate", name))
        self.annotations[name] = dict(annotations)
        return writes.Result(writes.Outcome.OK, 200)

    async def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> writes.Result:
        self.statuses[name] = dict(status)
        return writes.Result(writes.Outcome.OK, 200)

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> writes.Result:
        return writes.Result(writes.Outcome.OK, 200)

    async def patch_status(
        self, plural: str, name: str, status: Mapping[str, Any], **_: Any
    ) -> writes.Result:
        self.calls.append((f"status:{plural}", name))
        self.statuses[f"{plural}/{name}"] = dict(status)
        return writes.Result(writes.Outcome.OK, 200)

    async def post_event(self, job: Any, *, reason: str, message: str, **_: Any) -> writes.Result:
        self.events.append((reason, message))
        return writes.Result(writes.Outcome.OK, 201)

    def names(self, verb: str) -> list[str]:
        return [c[1] for c in self.calls if c[0] == verb]


def gang_job(name: str, uid: str, replicas: int = 3) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": 1},
        "spec": {
            "replicas": replicas,
            "throughput": {"g": 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def make_loop(
    api: FakeApi,
    gpus: int = 8,
    clock: list[float] | None = None,
    bind_at_create: bool = True,
    replicas: int = 3,
) -> loop.RoundLoop:
    config = loop.LoopConfig(
        policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
        bind_at_create=bind_at_create,
    )
    if clock is not None:
        config = dataclasses.replace(config, clock=lambda: clock[0])
    rounds = loop.RoundLoop(
        loop.snapshot.Store(),
        api,  # type: ignore[arg-type]  # duck-typed stand-in for walras.kube.writes.Api
        config,
    )
    store = rounds.store
    store.upsert("pool", {"metadata": {"name": "g", "generation": 1}, "spec": {"gpuType": "g"}})
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "g"}},
            "status": {
                "allocatable": {GPU: str(gpus), "cpu": "32", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    store.upsert("job", gang_job("gang", "u1", replicas))
    return rounds

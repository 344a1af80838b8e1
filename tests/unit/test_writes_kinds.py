"""``walras.kube.writes.Api.patch_status`` and ``post_event`` for any Walras kind.

Oracle: the Kubernetes REST paths themselves (``/apis/<group>/<version>/[namespaces/<ns>/]
<plural>/<name>/status`` for a custom resource's status subresource, ``/api/v1/namespaces/<ns>/
events`` for an Event) and the core/v1 Event's ``involvedObject`` fields, written out by hand.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from walras.core import crd
from walras.kube import writes


class Response:
    status = 200
    data = b"{}"

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return {}


class RecordingClient:
    """Accepts every request; records (method, path, content type, body)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, Any]] = []

    def param_serialize(self, **kw: Any) -> tuple[str, str, dict[str, str], Any, Any]:
        return kw["method"], kw["resource_path"], kw["header_params"], kw.get("body"), None

    def call_api(self, method: str, url: str, **kw: Any) -> Response:
        self.sent.append((method, url, kw["header_params"]["Content-Type"], kw["body"]))
        return Response()


@dataclass(frozen=True)
class Obj:
    namespace: str
    name: str


def send(coro_of: Any) -> RecordingClient:
    client = RecordingClient()
    api = writes.Api(client)
    try:
        assert asyncio.run(coro_of(api)).outcome == writes.Outcome.OK
    finally:
        api.close()
    return client


def test_patch_status_paths_for_namespaced_and_cluster_scoped_kinds() -> None:
    group = f"/apis/{crd.GROUP}/{crd.VERSION}"
    sow = send(lambda api: api.patch_status("statementsofwork", "s 1", {"birth": 3}, namespace="t"))
    assert sow.sent == [
        (
            "PATCH",
            f"{group}/namespaces/t/statementsofwork/s%201/status",
            "application/merge-patch+json",
            {"status": {"birth": 3}},
        )
    ]
    pool = send(lambda api: api.patch_pool_status("p", {"x": 1}))
    assert pool.sent[0][1] == f"{group}/resourcepools/p/status"
    job = send(lambda api: api.patch_job_status("ns", "j", {}))
    assert job.sent[0][1] == f"{group}/namespaces/ns/fungiblejobs/j/status"


def test_post_event_names_the_given_kind() -> None:
    def post(api: writes.Api, **kind: str) -> Any:
        return api.post_event(
            Obj("team", "nightly"),
            uid="u-1",
            event_type="Warning",
            reason="Evicted",
            message="m",
            now="2026-01-01T00:00:00Z",
            **kind,
        )

    sow = send(lambda api: post(api, kind="StatementOfWork"))
    method, path, _ctype, body = sow.sent[0]
    assert (method, path) == ("POST", "/api/v1/namespaces/team/events")
    assert body["involvedObject"] == {
        "apiVersion": f"{crd.GROUP}/{crd.VERSION}",
        "kind": "StatementOfWork",
        "namespace": "team",
        "name": "nightly",
        "uid": "u-1",
    }
    assert (body["type"], body["reason"], body["metadata"]["generateName"]) == (
        "Warning",
        "Evicted",
        "nightly.",
    )
    # Without a kind the Event is on a FungibleJob (the round loop's call).
    job = send(lambda api: post(api))
    assert job.sent[0][3]["involvedObject"]["kind"] == "FungibleJob"

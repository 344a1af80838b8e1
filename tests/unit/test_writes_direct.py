"""``walras.kube.writes.Api`` on a real-looking ``ApiClient``: the direct urllib3 path.

Oracle: what ``param_serialize`` + ``call_api`` would have sent (the kubernetes client's own
contract: its default headers, the auth header from ``auth_settings()``, a JSON body, the host
prefix), and the retry contract (urllib3 never retries by itself; ``Retry-After`` is honoured by
``_request`` from the response's ``headers``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from walras.kube import writes


class Response:
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.status = status
        self.data = json.dumps(body).encode()
        self.headers = headers


class Pool:
    def __init__(self, *answers: Response) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def request(self, method: str, url: str, **kw: Any) -> Response:
        self.calls.append({"method": method, "url": url, **kw})
        return self.answers.pop(0)


class Configuration:
    host = "https://api.example:6443"

    def auth_settings(self) -> dict[str, dict[str, str]]:
        return {"BearerToken": {"in": "header", "key": "authorization", "value": "Bearer t0k"}}


class Rest:
    def __init__(self, pool: Pool) -> None:
        self.pool_manager = pool


class Client:
    def __init__(self, pool: Pool) -> None:
        self.rest_client = Rest(pool)
        self.configuration = Configuration()
        self.default_headers = {"User-Agent": "walras-test"}


def test_a_status_patch_goes_straight_to_the_pool() -> None:
    pool = Pool(Response(200, {}, {}))
    api = writes.Api(Client(pool))
    try:
        result = asyncio.run(api.patch_job_status("ns", "job-1", {"phase": "Running"}))
    finally:
        api.close()
    assert result.outcome == writes.Outcome.OK
    (call,) = pool.calls
    assert call["method"] == "PATCH"
    assert call["url"] == (
        "https://api.example:6443/apis/walras.dev/v1alpha1/namespaces/ns/fungiblejobs/job-1/status"
    )
    assert json.loads(call["body"]) == {"status": {"phase": "Running"}}
    assert call["headers"] == {
        "User-Agent": "walras-test",
        "Content-Type": "application/merge-patch+json",
        "Accept": "application/json",
        "authorization": "Bearer t0k",
    }
    assert call["retries"] is False


def test_retry_after_from_the_headers_of_a_429(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(writes.time, "sleep", slept.append)
    pool = Pool(
        Response(429, {"message": "too many requests"}, {"Retry-After": "3"}),
        Response(404, {"message": 'pods "p" not found', "reason": "NotFound"}, {}),
    )
    api = writes.Api(Client(pool))
    try:
        result = asyncio.run(api.delete_pod("ns", "p"))
    finally:
        api.close()
    assert slept == [3.0]
    assert result.outcome == writes.Outcome.GONE and result.reason == "NotFound"
    assert [c["method"] for c in pool.calls] == ["DELETE", "DELETE"]
    assert pool.calls[0]["body"] is None

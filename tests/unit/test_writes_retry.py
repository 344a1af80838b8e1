"""``walras.kube.writes.Api``: bounded retries with backoff and ``Retry-After``, and the fence.

A scripted stand-in for the ``kubernetes`` ApiClient answers each request in turn; ``time.sleep``
is recorded instead of slept. Oracles: the HTTP semantics themselves (429/5xx are transient, 4xx
are not; ``Retry-After`` is the server's wait), and the fence contract (nothing is sent when it
says no).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from walras.kube import writes


class Response:
    def __init__(self, status: int, body: dict[str, Any] | None = None, **headers: str) -> None:
        self.status = status
        self.data = json.dumps(body or {}).encode()
        self.headers = {k.replace("_", "-"): v for k, v in headers.items()}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers


class ScriptedClient:
    """Answers requests with the scripted responses, in order."""

    def __init__(self, *answers: Response) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str]] = []

    def param_serialize(self, **kw: Any) -> tuple[str, str, dict[str, str], Any, Any]:
        return kw["method"], kw["resource_path"], kw["header_params"], kw.get("body"), None

    def call_api(self, method: str, url: str, **_: Any) -> Response:
        self.sent.append((method, url))
        return self.answers.pop(0)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(writes.time, "sleep", slept.append)
    return slept


def run(api: writes.Api, coro: Any) -> writes.Result:
    try:
        result: writes.Result = asyncio.run(coro)
        return result
    finally:
        api.close()


def test_transient_errors_are_retried_and_retry_after_is_honoured(sleeps: list[float]) -> None:
    client = ScriptedClient(
        Response(429, {"message": "slow down"}, Retry_After="2"),
        Response(503, {"message": "unavailable"}),
        Response(201),
    )
    api = writes.Api(client, base_delay=0.2)
    result = run(api, api.create_pod("ns", {"metadata": {"name": "p"}}))
    assert result.outcome == writes.Outcome.OK
    assert len(client.sent) == 3
    # First wait: the server's Retry-After; second: full jitter within base · 2^1.
    assert sleeps[0] == 2.0
    assert 0.0 <= sleeps[1] <= 0.4


def test_retries_are_bounded(sleeps: list[float]) -> None:
    client = ScriptedClient(*(Response(500, {"message": "boom"}) for _ in range(10)))
    api = writes.Api(client, max_attempts=4, max_delay=1.0)
    result = run(api, api.bind_pod("ns", "p", "n"))
    assert result.outcome == writes.Outcome.ERROR and result.message == "boom"
    assert len(client.sent) == 4 and len(sleeps) == 3
    assert all(s <= 1.0 for s in sleeps)


def test_client_errors_are_not_retried_and_keep_the_api_message(sleeps: list[float]) -> None:
    body = {"message": 'pods "p" is forbidden: exceeded quota: q', "reason": "Forbidden"}
    client = ScriptedClient(Response(403, body))
    api = writes.Api(client)
    result = run(api, api.create_pod("ns", {"metadata": {"name": "p"}}))
    assert (result.outcome, result.status, result.reason) == (
        writes.Outcome.ERROR,
        403,
        "Forbidden",
    )
    assert "exceeded quota" in result.message
    assert len(client.sent) == 1 and sleeps == []


def test_status_patch_conflicts_are_retried_but_bind_conflicts_are_not(
    sleeps: list[float],
) -> None:
    client = ScriptedClient(Response(409, {"reason": "Conflict"}), Response(200))
    api = writes.Api(client)
    assert run(api, api.patch_job_status("ns", "j", {})).outcome == writes.Outcome.OK
    client = ScriptedClient(Response(409, {"reason": "Conflict"}))
    api = writes.Api(client)
    assert run(api, api.bind_pod("ns", "p", "n")).outcome == writes.Outcome.CONFLICT
    assert len(client.sent) == 1


def test_a_closed_fence_sends_nothing(sleeps: list[float]) -> None:
    client = ScriptedClient(Response(503), Response(201))
    calls = iter([True, False])  # leader for the first attempt, deposed before the retry
    api = writes.Api(client, fence=lambda: next(calls))
    result = run(api, api.create_pod("ns", {"metadata": {"name": "p"}}))
    assert result.outcome == writes.Outcome.FENCED
    assert len(client.sent) == 1 and api.writes == 1 and api.fenced == 1

"""/readyz after failed rounds (walras.operator.health.RoundHealth): a streak of N fails it."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from walras.operator import health, metrics


def test_streak_of_failures_reaches_the_limit_once() -> None:
    rounds = health.RoundHealth(limit=3)
    assert [rounds.record(False, "boom") for _ in range(4)] == [False, False, True, False]
    assert rounds.problem() == "4 scheduling rounds in a row failed (last: boom)"
    assert rounds.record(True) is False
    assert rounds.problem() is None
    assert metrics.REGISTRY.get_sample_value("walras_failed_rounds_in_a_row") == 0.0


@pytest.mark.parametrize(("failures", "status"), [(2, 200), (3, 503)])
def test_readyz_fails_after_n_rounds_in_a_row(
    monkeypatch: pytest.MonkeyPatch, failures: int, status: int
) -> None:
    rounds = health.RoundHealth(limit=3)
    monkeypatch.setattr(health, "ROUNDS", rounds)
    for _ in range(failures):
        rounds.record(False, "InvalidProblem: capacity of type 1 must be finite and > 0")

    async def probe() -> tuple[int, str]:
        server = await health.serve(0, ready=lambda: True, host="127.0.0.1")
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{server.port}/readyz") as response,
            ):
                return response.status, await response.text()
        finally:
            await server.close()

    code, body = asyncio.run(probe())
    assert code == status
    assert (status == 503) == ("3 scheduling rounds in a row failed" in body)

"""The probe and metrics endpoints, served for real on a free local port (no Kubernetes needed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from walras.operator import health, metrics


async def _get(ready: Callable[[], bool], path: str) -> tuple[int, str, str]:
    server = await health.serve(0, ready=ready, host="127.0.0.1")
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{server.port}{path}") as response,
        ):
            return response.status, await response.text(), response.headers["Content-Type"]
    finally:
        await server.close()


def get(ready: Callable[[], bool], path: str) -> tuple[int, str, str]:
    return asyncio.run(_get(ready, path))


def test_healthz_is_ok_even_when_not_ready() -> None:
    status, body, _ = get(lambda: False, "/healthz")
    assert (status, body) == (200, "ok\n")


def test_readyz_follows_the_callback() -> None:
    assert get(lambda: True, "/readyz")[0] == 200
    assert get(lambda: False, "/readyz")[0] == 503


def test_readyz_treats_a_raising_check_as_not_ready() -> None:
    def broken() -> bool:
        raise RuntimeError("lease unknown")

    status, body, _ = get(broken, "/readyz")
    assert status == 503
    assert "lease unknown" in body


def test_readyz_reads_the_callback_on_every_request() -> None:
    state = {"ready": False}

    async def scenario() -> list[int]:
        server = await health.serve(0, ready=lambda: state["ready"], host="127.0.0.1")
        codes = []
        try:
            async with aiohttp.ClientSession() as session:
                for flip in (False, True, False):
                    state["ready"] = flip
                    async with session.get(f"http://127.0.0.1:{server.port}/readyz") as r:
                        codes.append(r.status)
        finally:
            await server.close()
        return codes

    assert asyncio.run(scenario()) == [503, 200, 503]


def test_metrics_expose_the_private_registry_in_prometheus_format() -> None:
    metrics.PRICE.labels(gpu_type="unit-test-v100").set(3.25)
    status, body, content_type = get(lambda: True, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    # Parse with Prometheus' own parser (an independent oracle for the exposition format).
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("walras_price", (("gpu_type", "unit-test-v100"),))] == 3.25
    assert any(name == "walras_rounds_total" for name, _ in samples)
    metrics.PRICE.remove("unit-test-v100")


def test_unknown_path_is_404() -> None:
    assert get(lambda: True, "/nope")[0] == 404


def test_close_releases_the_port() -> None:
    async def scenario() -> int:
        first = await health.serve(0, ready=lambda: True, host="127.0.0.1")
        port = first.port
        await first.close()
        # Re-binding the same port proves the socket was released.
        second = await health.serve(port, ready=lambda: True, host="127.0.0.1")
        await second.close()
        return second.port

    port = asyncio.run(scenario())
    assert port > 0

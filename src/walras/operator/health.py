"""Liveness, readiness and Prometheus endpoints of the controller and agents (aiohttp).

Called by the operator command (and the agent) once at start-up::

    server = await health.serve(8081, ready=lambda: elector.is_leader or not leader_elect)
    ...
    await server.close()

Routes:

- ``GET /healthz`` – liveness: 200 ``ok`` while the event loop answers at all. A stuck loop stops
  answering, which is exactly what the kubelet's liveness probe should detect.
- ``GET /readyz`` – readiness: 200 when ``ready()`` returns true and the round loop is healthy
  (:data:`ROUNDS`: fewer than ``limit`` rounds in a row failed), else 503 with the reason. A
  ``ready`` callback that raises counts as not ready (the exception text is returned, never a
  500 stack trace).
- ``GET /metrics`` – the private registry ``walras.operator.metrics.REGISTRY`` in the Prometheus
  text format.

One server serves all three routes; when ``--metrics-port`` and ``--health-port`` differ the
operator simply calls ``serve`` twice. ``port=0`` binds a free port (tests): see
``HealthServer.port``. The default host 0.0.0.0 is deliberate: probes come from the kubelet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from walras.operator import metrics

logger = logging.getLogger(__name__)

ReadyCheck = Callable[[], bool]

FAILED_ROUNDS = Gauge(
    "walras_failed_rounds_in_a_row",
    "Scheduling rounds that failed in a row (0 after any round that succeeds).",
    registry=metrics.REGISTRY,
)


class RoundHealth:
    """Counts rounds that failed in a row; unhealthy from ``limit`` on (then /readyz is 503).

    A round fails when planning or writing raises (a policy that cannot solve, a bug); one job's
    problem never fails a round. One failed round is retried at once, so only a streak means the
    operator is not scheduling, which is when a Service or a rollout should stop trusting it.
    """

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.in_a_row = 0
        self.last_error = ""

    def record(self, ok: bool, error: str = "") -> bool:
        """Count one round; True exactly when this round makes the streak reach ``limit``."""
        self.in_a_row = 0 if ok else self.in_a_row + 1
        self.last_error = "" if ok else error
        FAILED_ROUNDS.set(self.in_a_row)
        return not ok and self.in_a_row == self.limit

    def problem(self) -> str | None:
        """Why the operator is not ready, or None."""
        if self.limit > 0 and self.in_a_row >= self.limit:
            return f"{self.in_a_row} scheduling rounds in a row failed (last: {self.last_error})"
        return None


# The operator process's round health: the round loop records into it, /readyz reads it.
ROUNDS = RoundHealth()


@dataclass(frozen=True)
class HealthServer:
    """A running endpoint server; ``port`` is the bound port (useful with ``port=0``)."""

    runner: web.AppRunner
    host: str
    port: int

    async def close(self) -> None:
        """Stop listening and release the socket (idempotent)."""
        await self.runner.cleanup()


def make_app(ready: ReadyCheck) -> web.Application:
    """The aiohttp application with the three routes (exposed for tests)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        problem = ROUNDS.problem()
        if problem is not None:
            return web.Response(status=503, text=f"not ready: {problem}\n")
        try:
            ok = bool(ready())
        except Exception as exc:  # any failure of the check means "not ready"
            logger.warning("readiness check raised: %s", exc)
            return web.Response(status=503, text=f"not ready: {exc}\n")
        if ok:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    async def metrics_route(_: web.Request) -> web.Response:
        # generate_latest walks the registry synchronously; it is cheap (a few dozen series).
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
    return app


async def serve(port: int, *, ready: ReadyCheck, host: str = "0.0.0.0") -> HealthServer:
    """Start serving ``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` in this loop."""
    runner = web.AppRunner(make_app(ready), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    # With port=0 the kernel picks the port; runner.addresses reports what was actually bound.
    addresses = runner.addresses
    bound = int(addresses[0][1]) if addresses else port
    logger.info("health/metrics endpoints listening on %s:%d", host, bound)
    return HealthServer(runner=runner, host=host, port=bound)

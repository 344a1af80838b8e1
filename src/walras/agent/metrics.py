"""Prometheus metrics of a node agent and the aggregator (prefix ``walras_``), own registry.

The agent sets them every step and serves them on ``/metrics`` (:func:`serve`, ``walras agent
--metrics-port``); they live apart from the controller's metrics (``walras.operator.metrics``)
because the agent and the operator are independent processes and packages. API requests are
read from the process's :class:`~walras.kube.agents.Kube` counters when scraped
(:func:`register_kube`), so the steady-state cost per agent is visible without a benchmark.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from walras.kube.agents import Kube

REGISTRY = CollectorRegistry(auto_describe=True)

AGENT_RESIDUAL = Gauge(
    "walras_agent_residual",
    "Largest change of the node's PS-DSF allocation in the agent's last step.",
    ["node"],
    registry=REGISTRY,
)
AGENT_DAMPING = Gauge(
    "walras_agent_damping",
    "Damping of the agent's last step (1 for the concurrency-scaled best response).",
    ["node"],
    registry=REGISTRY,
)
AGENT_STEPS = Counter(
    "walras_agent_steps",
    "Agent steps by outcome: wrote, unchanged (nothing to write), skipped (no fresh totals).",
    ["node", "outcome"],
    registry=REGISTRY,
)
AGENT_METHOD_STEPS = Counter(
    "walras_agent_method_steps",
    "Agent steps by update method (scaled, waterfill).",
    ["node", "method"],
    registry=REGISTRY,
)
AGGREGATOR_PUBLISHES = Counter(
    "walras_aggregator_publishes",
    "Tenant-totals publishes of the aggregator.",
    registry=REGISTRY,
)
AGGREGATOR_DELAY = Gauge(
    "walras_aggregator_delay_seconds",
    "Seconds from the first NodeAllocation change to the publish that includes it (last one).",
    registry=REGISTRY,
)


def observe_step(node: str, residual: float, damping: float, method: str) -> None:
    """Record one computed step (called by the agent loop)."""
    AGENT_RESIDUAL.labels(node=node).set(residual)
    AGENT_DAMPING.labels(node=node).set(damping)
    AGENT_METHOD_STEPS.labels(node=node, method=method).inc()


class _KubeRequests(Collector):
    """``walras_agent_api_requests_total{kind=read|write}`` from a Kube's own counters."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "walras_agent_api_requests",
            "API requests of this process (LIST and WATCH starts count as reads).",
            labels=["kind"],
        )
        family.add_metric(["read"], float(self.kube.reads))
        family.add_metric(["write"], float(self.kube.writes))
        yield family


def register_kube(kube: Kube) -> None:
    """Expose ``kube``'s request counters (once per process)."""
    REGISTRY.register(_KubeRequests(kube))


def serve(port: int, kube: Kube | None = None) -> None:
    """Serve ``/metrics`` on ``port`` (a daemon thread); 0 serves nothing."""
    if kube is not None:
        register_kube(kube)
    if port:
        start_http_server(port, registry=REGISTRY)

"""Prometheus metrics of a node agent (prefix ``walras_``), in the agent's own registry.

The agent sets them every step; they live apart from the controller's metrics
(``walras.operator.metrics``) because the agent and the operator are independent processes and
packages.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

REGISTRY = CollectorRegistry(auto_describe=True)

AGENT_RESIDUAL = Gauge(
    "walras_agent_residual",
    "Largest change of the node's PS-DSF allocation in the agent's last step.",
    ["node"],
    registry=REGISTRY,
)

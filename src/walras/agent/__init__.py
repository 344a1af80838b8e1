"""Node agents: distributed, asynchronous PS-DSF on the cluster (paper 004 §III-D, issue 6).

- ``steps`` — one agent step (damped server procedure), pure;
- ``columns`` — a node's column of the PS-DSF tenant model from API dicts, pure;
- ``totals`` — summing NodeAllocations into tenant totals, staleness, pure;
- ``simulate`` — discrete-event simulation of agents + aggregator, pure;
- ``kube`` — the one module that talks to the API;
- ``runner`` — the agent loop (``walras agent --node-name``);
- ``aggregator`` — the totals publisher (``walras agent --aggregate``) and
  :func:`distributed_tasks`, which the operator's ``psdsf-distributed`` policy calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from kubernetes import client

__all__ = ["distributed_tasks"]


def distributed_tasks(
    api_client: client.ApiClient, *, stale_after: float
) -> tuple[np.ndarray[Any, Any], list[str], list[str]]:
    """``(tasks (N, K), tenant_names, node_names)`` from fresh NodeAllocations.

    See :func:`walras.agent.aggregator.distributed_tasks` (imported lazily so that the pure
    modules of this package load without the Kubernetes client).
    """
    from walras.agent import aggregator

    return aggregator.distributed_tasks(api_client, stale_after=stale_after)

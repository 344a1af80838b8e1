"""Read the node agents' converged PS-DSF tasks from their NodeAllocations.

The operator's ``psdsf-distributed`` policy calls :func:`reader` once per round through
``walras.core.policies.Handle.distributed_reader``; tests and benches call
:func:`distributed_tasks`. The agents (``walras.agent``) write the NodeAllocations; this module
only reads them, so the operator never imports the agent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from walras.core import totals
from walras.kube.agents import ALLOCATIONS, Kube


def distributed_tasks(
    api_client: Any, *, stale_after: float
) -> tuple[np.ndarray[Any, Any], list[str], list[str]]:
    """Converged x_{n,i} of the node agents: ``(tasks (N, K), tenant_names, node_names)``.

    Only fresh allocations count (node exists, written within ``stale_after`` seconds); tenants
    and nodes are sorted by name. ``tasks`` is in the PS-DSF model's units, like
    ``fairness.FairnessResult.tasks``: work units when the jobs carry throughput tables (pods =
    tasks / throughput_{n,i}; each NodeAllocation also carries ``status.pods``).
    """
    kube = Kube(api_client)
    items, _ = kube.list_custom(ALLOCATIONS)
    names = kube.node_names()
    matrix, tenant_names, nodes = totals.task_matrix(
        items, names, now=dt.datetime.now(dt.UTC), stale_after=stale_after
    )
    return matrix, list(tenant_names), list(nodes)


def reader(
    api_client: Any, *, stale_after: float
) -> Callable[[], tuple[Any, Sequence[str], Sequence[str]]]:
    """A ``DistributedReader`` over ``api_client`` (see ``walras.core.policies``)."""

    def read() -> tuple[Any, Sequence[str], Sequence[str]]:
        return distributed_tasks(api_client, stale_after=stale_after)

    return read

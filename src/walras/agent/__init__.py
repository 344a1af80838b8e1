"""Node agents: distributed, asynchronous PS-DSF on the cluster.

The algorithm: docs/algorithms.md#distributed-ps-dsf.

- ``steps`` — one agent step (damped server procedure), pure;
- ``columns`` — a node's column of the PS-DSF tenant model from API dicts, pure;
- ``simulate`` — discrete-event simulation of agents + aggregator, pure;
- the API calls live in ``walras.kube.agents`` and the NodeAllocation sums in
  ``walras.core.totals`` (shared with the operator, which reads the agents' tasks through
  ``walras.kube.nodeallocations``);
- ``runner`` — the agent loop (``walras agent --node-name``);
- ``aggregator`` — the totals publisher (``walras agent --aggregate``).
"""

from __future__ import annotations

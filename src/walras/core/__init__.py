"""The scheduling core that both shells run: the operator (``walras.operator``) on the live cluster
and the simulator (``walras.sim``) on a simulated one.

- ``model`` — typed views of FungibleJob, ResourcePool, Node and Pod (parsed once per event);
- ``snapshot`` — the store the watches feed and the frozen, sorted snapshot a round works on;
- ``tenants`` — the PS-DSF tenant model (shared with the node agents);
- ``history`` — per-job time received per placement group, time eligible, work done;
- ``completion`` — which jobs finished, and how;
- ``policies`` — the policy registry and one module per policy;
- ``realise`` — a policy's targets → this round's pods to create, keep and delete;
- ``cycle`` — :func:`~walras.core.cycle.plan`: one round from a snapshot and a clock;
- ``crd``, ``conditions``, ``totals`` — names, condition vocabulary, NodeAllocation sums.

No module here imports kopf, kubernetes or prometheus-client, or reads a clock; import contracts
in ``pyproject.toml`` enforce it.
"""

"""Walras: a Kubernetes scheduler extension for clusters with several GPU types.

Layers, from the bottom up (imports only go downward):

- ``walras.allocator``: pure math (price discovery, PS-DSF, rounds). Arrays in, immutable
  results out.
- ``walras.sim``: trace-driven simulator over the allocator.
- ``walras.operator`` / ``walras.agent``: the kopf controller and the node-local PS-DSF agents.
- ``walras.cli``: the ``walras`` console script.
"""

__version__ = "0.1.0"

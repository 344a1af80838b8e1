"""Pure allocation math for Walras.

Arrays in, immutable results out. This package imports only numpy, scipy and (optionally) torch;
it never imports kopf, kubernetes or anything from the operator, agent, sim or cli layers.
``tests/unit/test_purity.py`` and the import-linter contract in ``pyproject.toml`` enforce it.

Subpackages:

- ``pricing``: price discovery over GPU types (docs/algorithms.md#price-discovery).
- ``fairness``: PS-DSF over nodes (Khamse-Ashari et al. 2017, docs/algorithms.md#ps-dsf).
- ``rounds``: fractional allocations to per-round placements (docs/algorithms.md#round-realiser).
"""

from walras.allocator.errors import InvalidProblem

__all__ = ["InvalidProblem"]

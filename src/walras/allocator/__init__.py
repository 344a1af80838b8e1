"""Pure allocation math for Walras.

Arrays in, immutable results out. This package imports only numpy, scipy and (optionally) torch;
it never imports kopf, kubernetes or anything from the operator, agent, sim or cli layers.
``tests/unit/test_purity.py`` and the import-linter contract in ``pyproject.toml`` enforce it.

Subpackages:

- ``pricing``: price discovery over GPU types (paper 000, ALGORITHMS.md §1).
- ``fairness``: PS-DSF over nodes (paper 004, ALGORITHMS.md §2).
- ``rounds``: fractional allocations to per-round placements (ALGORITHMS.md §3).
"""

from walras.allocator.errors import InvalidProblem

__all__ = ["InvalidProblem"]

"""Bounds on numbers a user sets in a FungibleJob, shared by the CRD models and ``core.model``.

They keep the solver's numbers far from float overflow: a weight of 1e308 would otherwise hold a
full share whatever everyone else asks.
"""

from __future__ import annotations

MAX_WEIGHT = 1e6
MAX_TARGET = 1e12
MAX_ALPHA = 100.0
MAX_THROUGHPUT = 1e12
MAX_TOTAL_WORK = 1e18
MAX_REPLICAS = 4096
# The job's name is the value of the pods' walras.dev/job label: at most 63 characters.
MAX_NAME = 63
# Containers (and initContainers) per pod template; entries of a resource map.
MAX_CONTAINERS = 64
MAX_RESOURCES = 64
MAX_BACKOFF = 1000

"""Synthetic instances of §6.2 of the price-discovery paper, for ``walras generate`` and tests.

The paper: "Allocation of fungible resources via a fast, scalable price discovery method"
(Agrawal, Boyd et al.). Its §6.2 instance:

    a_i1 ~ U(0.1, 0.3), a_i2 ~ U(0.1, 0.5), a_i3 ~ U(0.3, 0.8), a_i4 ~ U(0.6, 1.0)
    R = (8e5, 1e5, 1e4, 1e3) · n / 1e6
    target-priority: T = 0.2, w ∈ {1, 2} with equal probability

Deterministic for a given seed (numpy's PCG64).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from walras.allocator.pricing.problem import PricingProblem

LOW = np.array([0.1, 0.1, 0.3, 0.6])
HIGH = np.array([0.3, 0.5, 0.8, 1.0])
CAPACITY_PER_JOB = np.array([8e5, 1e5, 1e4, 1e3]) / 1e6
TARGET = 0.2


def paper_arrays(n: int, *, seed: int = 0, utility: str = "log") -> dict[str, Any]:
    """The §6.2 data as plain arrays (the keys of a ``walras solve`` .npz file)."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {
        "throughput": rng.uniform(LOW, HIGH, size=(n, 4)),
        "capacity": CAPACITY_PER_JOB * n,
    }
    if utility == "target":
        out["weight"] = rng.integers(1, 3, size=n).astype(np.float64)
        out["target"] = np.full(n, TARGET)
    return out


def paper_problem(n: int, *, seed: int = 0, utility: str = "log") -> PricingProblem:
    """The §6.2 problem with ``n`` jobs for utility "log" or "target" (or any other kind)."""
    arrays = paper_arrays(n, seed=seed, utility=utility)
    return PricingProblem(kind=utility, **arrays)

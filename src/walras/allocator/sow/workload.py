"""Seeded generator of SoW workloads (for the simulator, the tests and the benchmark).

Each SoW: birth uniform in ``[0, births)``; concurrency uniform in ``1 … K``; 1-3 distinct support
points with arrival offset in ``0 … max_delay`` and duration in ``1 … D``, Dirichlet(1)
probabilities rounded so they sum to exactly 1; value either a deadline (value uniform in
``[v_min, V]``, deadline = the point's longest duration + arrival + slack) or a linear decay
from that value to 0. Deterministic given ``seed``; SoWs are named ``sow-000``, ``sow-001``, ...
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from walras.allocator.sow.model import (
    Distribution,
    Recurrence,
    StatementOfWork,
    TypeDemand,
    ValueFunction,
)
from walras.allocator.sow.params import MechanismParams


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Shape of a generated workload."""

    sows: int
    births: int
    max_delay: int = 2
    max_slack: int = 3
    max_points: int = 3
    gpu_types: tuple[str, ...] = ("gpu",)
    duration_revealed: bool = False
    instances: int = 1
    period: int = 4


def generate(spec: WorkloadSpec, params: MechanismParams, seed: int) -> tuple[StatementOfWork, ...]:
    """``spec.sows`` SoWs within the bounds of ``params`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(spec.sows):
        birth = int(rng.integers(0, spec.births))
        k = int(rng.integers(1, params.max_concurrency + 1))
        grid = (spec.max_delay + 1) * params.max_duration
        n = int(rng.integers(1, min(spec.max_points, grid) + 1))
        cells = np.sort(rng.choice(grid, n, replace=False))  # distinct (arrival, duration) points
        arr = cells // params.max_duration
        dur = cells % params.max_duration + 1
        probs = np.round(rng.dirichlet(np.ones(n)), 6)
        probs[-1] = 1.0 - probs[:-1].sum()
        if probs[-1] < 0:  # rounding pushed the last one below 0: fall back to uniform
            probs = np.full(n, 1.0 / n)
            probs[-1] = 1.0 - probs[:-1].sum()
        v = float(rng.uniform(params.min_value, params.max_value))
        deadline = int((arr + dur).max() + rng.integers(0, spec.max_slack + 1))
        if rng.random() < 0.5:
            value = ValueFunction.deadline(deadline, v)
        else:
            value = ValueFunction.linear(((0.0, v), (float(deadline), params.min_value)))
        types = spec.gpu_types
        if len(types) > 1:
            chosen = sorted(rng.choice(len(types), int(rng.integers(1, len(types) + 1)), False))
            demands = tuple(TypeDemand(types[c], k) for c in chosen)
        else:
            demands = (TypeDemand(types[0], k),)
        out.append(
            StatementOfWork(
                f"sow-{i:03d}",
                birth,
                demands,
                value,
                Distribution(
                    tuple(int(a) for a in arr),
                    tuple(int(d) for d in dur),
                    tuple(float(p) for p in probs),
                ),
                Recurrence(spec.instances, spec.period if spec.instances > 1 else 0),
                spec.duration_revealed,
            )
        )
    return tuple(out)

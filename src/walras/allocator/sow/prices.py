"""Posted prices (the SoW paper's §5, Algorithm 3, eq. (7); docs/algorithms.md#statements-of-work).

Unit price of one GPU of a type in round ``τ``, from the expected committed usage ``y(τ)`` of the
launch plans of earlier-born jobs (the relaxed problem's fractional allocation):

    p(τ) = p_min · μ^{y(τ) / C'},        C' = (1 − ε)·C

and the bundle price of ``k`` GPUs for ``d`` rounds from ``s``:

    P(s, k, d) = k · Σ_{τ=s}^{s+d−1} p(τ).

Example: ``K = 2, D = 3, V = 10, v_min = 1`` → ``p_min = 1/12``, ``μ = 240``; with ``C = 10``,
``ε = 0.1`` (``C' = 9``) and ``y = 4.5`` in both rounds, ``p = (1/12)·240^{0.5} ≈ 1.291`` and
``P(s, 2, 2) ≈ 5.164``.

``y`` only grows as jobs are admitted (plans are never withdrawn from the relaxed problem, even
when a job is evicted), so a menu never gets cheaper: the paper's first invariant. ``P`` is
non-decreasing in ``k`` and ``d`` because every ``p(τ) > 0``: the second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from walras.allocator.sow.params import MechanismParams


def unit_prices(usage: np.ndarray, capacity: int, params: MechanismParams) -> np.ndarray:
    """``p = p_min · μ^{y / C'}`` elementwise."""
    c_prime = params.planning_capacity(capacity)
    exponent = np.asarray(usage, dtype=np.float64) / c_prime if c_prime > 0 else np.inf
    return params.unit_price_min * np.power(params.price_base, exponent)


@dataclass(frozen=True, slots=True)
class PriceMenu:
    """The unit prices of one GPU type as posted to one job at its birth.

    ``prices[i]`` is ``p(origin + i)``; rounds outside the stored window had no committed usage,
    so their price is ``p_min``.
    """

    gpu_type: str
    origin: int
    prices: tuple[float, ...]
    p_min: float

    def unit(self, tau: int) -> float:
        i = tau - self.origin
        return self.prices[i] if 0 <= i < len(self.prices) else self.p_min

    def bundle(self, start: int, concurrency: int, duration: int) -> float:
        """``P(s, k, d) = k Σ_{τ=s}^{s+d−1} p(τ)``."""
        return concurrency * sum(self.unit(t) for t in range(start, start + duration))

    def cumulative(self, start: int, stop: int) -> np.ndarray:
        """``c[i] = Σ_{τ=start}^{start+i−1} p(τ)`` for ``i = 0 … stop − start``."""
        p = np.array([self.unit(t) for t in range(start, stop)], dtype=np.float64)
        return np.concatenate(([0.0], np.cumsum(p)))


def menu(
    gpu_type: str,
    usage: np.ndarray,
    usage_origin: int,
    birth: int,
    capacity: int,
    params: MechanismParams,
) -> PriceMenu:
    """The menu posted at ``birth`` for rounds ``≥ birth`` given expected usage from origin."""
    window = np.asarray(usage[max(0, birth - usage_origin) :], dtype=np.float64)
    return PriceMenu(
        gpu_type,
        birth,
        tuple(float(x) for x in unit_prices(window, capacity, params)),
        params.unit_price_min,
    )

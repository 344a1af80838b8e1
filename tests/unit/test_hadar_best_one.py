"""``find_alloc.best_one`` (the queue's forward pass) against ``best_many`` at one state.

``best_one`` exists only for speed; ``best_many`` is the oracle, whose exactness against every
node-level allocation ``test_hadar.py`` checks. Same numbers to the last bit are required (the
forward pass compares payoffs, so a rounding difference could admit a different job).
"""

from __future__ import annotations

import numpy as np
import pytest

from walras.allocator.hadar.find_alloc import States, best_many, best_one


def _cases(seed: int, n: int) -> list[tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        types = int(rng.integers(1, 5))
        # Few distinct speeds, so ties (one bottleneck) and unusable types (0) are common.
        speed = rng.choice([0.0, 0.5, 1.0, 1.0, 2.5, 4.0], size=types)
        free = rng.integers(0, 9, size=types).astype(np.int64)
        # Tied prices too (the fill order's tie-break), and 0 (an idle type's price).
        prices = rng.choice([0.0, 0.25, 0.25, 1.5, rng.uniform(0, 3)], size=types)
        utils = np.where(speed > 0, rng.uniform(-1.0, 12.0, size=types), 0.0)
        gang = int(rng.integers(1, 10))
        out.append((speed, gang, free, prices, utils))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_best_one_is_best_many_at_one_state(seed: int) -> None:
    for speed, gang, free, prices, utils in _cases(seed, 500):
        many = best_many(
            States(free[None, :], prices[None, :]),
            speed[None, :],
            np.array([gang]),
            utils[None, :],
            counts=True,
        )
        payoff, counts, rate, utility, cost = best_one(speed, gang, free, prices, utils)
        assert payoff == many.payoff[0, 0]
        assert counts.tolist() == many.counts[0, 0].tolist()
        assert rate == many.rate[0, 0]
        assert utility == many.utility[0, 0]
        assert cost == many.cost[0, 0]


def test_best_one_no_fit() -> None:
    payoff, counts, rate, _, _ = best_one(
        np.array([2.0, 1.0]), 5, np.array([2, 2]), np.array([0.1, 0.1]), np.array([3.0, 2.0])
    )
    assert payoff == -np.inf
    assert counts.tolist() == [0, 0]
    assert rate == 0.0

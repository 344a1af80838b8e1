"""POP's integral capacity split with the carry across entries (``pop.split``), hand-derived."""

from __future__ import annotations

import numpy as np

from walras.allocator import pop


def test_carry_spreads_the_spare_units_of_equal_types() -> None:
    """Five types of 2 GPUs, shard weights 3 : 5, so exact shares 0.75 and 1.25 of each type
    (totals 3.75 and 6.25). Floors (0, 1) leave one spare unit per type. Fractions alone
    (0.75 > 0.25) would give all five to shard 0 (total 5). With the carry (exact − given so far):
    type 0 → shard 0 (0.75 vs 0.25; carries −0.25, +0.25); type 1: 0.5 vs 0.5, a tie, the
    rotation puts shard 1 first (carries 0.5, −0.5); type 2: 1.25 vs −0.25 → shard 0 (0.25,
    −0.25); type 3: 1.0 vs 0.0 → shard 0 (0, 0); type 4: 0.75 vs 0.25 → shard 0."""
    parts = pop.split_capacity(np.full(5, 2.0), 2, weights=[3.0, 5.0])
    assert parts.tolist() == [[1.0, 0.0, 1.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0, 1.0]]

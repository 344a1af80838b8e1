"""min-total-duration started from the last round's basis returns the allocation it returns from
scratch, to the precision of the analytic center.

Oracle: the same policy with ``warm_start = False`` (linprog's LP answer bit-for-bit, then the
center). Only the LP's starting point differs: it may end at another optimal vertex (the LP is
degenerate), which changes the center's *start*, not the center. Both runs stop Newton at
``λ² < center.FINAL_DECREMENT`` (1e-12), i.e. ``λ < 1e-6``; for a self-concordant barrier the
distance to the center in the local norm is then at most ``λ / (1 − λ) ≈ 1e-6``, and that norm
weighs ``dx[j, t]`` by ``1 / x[j, t] ≥ 1`` (``x ≤ 1``), so each entry is within ~1e-6 of the
center in each run: 2e-6 apart at most, checked at 1e-5. The horizon ``T`` is Gavel's bisection
over ``T* = 1/s*``, so it is equal unless ``s*`` moved across a tested ``T`` (it does not here).
"""

from __future__ import annotations

import numpy as np

from walras.allocator.gavel import GavelInputs, make_policy
from walras.allocator.gavel.min_total_duration import MinTotalDuration


def _round(rng: np.random.Generator, J: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return rng.uniform(0.5, 5.0, (J, 3)), rng.choice(np.array([1, 2, 4]), J), np.arange(J)


def test_warm_start_matches_cold() -> None:
    rng = np.random.default_rng(3)
    J = 60
    thr, k, ids = _round(rng, J)
    remaining = rng.uniform(1e4, 1e6, J)
    cap = np.array([16.0, 16.0, 16.0])
    warm = make_policy("min_total_duration_perf")
    cold = make_policy("min_total_duration_perf")
    assert isinstance(warm, MinTotalDuration) and isinstance(cold, MinTotalDuration)
    cold.warm_start = False
    started = 0
    for r in range(12):
        if r == 6:  # a job finishes: another job set, so the next LP starts from scratch
            keep = np.arange(J) != 7
            thr, k, ids, remaining = thr[keep], k[keep], ids[keep], remaining[keep]
        inputs = GavelInputs(thr, k, cap, ids, num_steps_remaining=remaining)
        key = (tuple(int(i) for i in ids), np.ones(ids.size, dtype=bool).tobytes(), 3)
        started += int(warm._start is not None and warm._start[:3] == key)
        x_warm = warm.allocate(inputs)
        x_cold = cold.allocate(inputs)
        assert warm.last_horizon == cold.last_horizon
        np.testing.assert_allclose(x_warm, x_cold, rtol=0, atol=1e-5)
        remaining = np.maximum(remaining - thr.max(axis=1) * 360.0 * rng.uniform(0, 1, ids.size), 1)
    assert started == 10  # rounds 1–5 and 7–11 started from the last basis

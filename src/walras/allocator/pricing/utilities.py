"""Utilities u(t) of a job's throughput t, all behind one four-method interface.

| kind     | u(t)                    | best t on [lo, hi] for u(t) − α t    | dt/dα inside |
|----------|-------------------------|--------------------------------------|--------------|
| linear   | w t                     | hi if α < w else lo                  | —            |
| log      | w log t                 | clip(w / α, lo, hi)                  | −t / α       |
| alpha    | w t^(1−β) / (1−β)       | clip((w / α)^(1/β), lo, hi)          | −t / (β α)   |
| target   | w min(t − T, 0)         | clip(T, lo, hi) if α < w else lo     | —            |

Every method is vectorised over jobs (``par`` holds the per-job weight w, target T and exponent β
of one group of jobs that share a kind) and written once for numpy and torch through
``backend.Backend.xp``. Example (log, w = 1): on a hull segment [0.2, 0.5] of slope α = 4 the
best throughput is clip(1/4, 0.2, 0.5) = 0.25.

``best_t`` must return exactly ``hi`` when the utility still rises faster than the cost at hi:
the hull walk in ``subproblem.py`` adds the pieces up. The derivative of the non-smooth
utilities is a supergradient (target: w below the target, 0 at or above it).

Called by ``subproblem.py`` (best_t, value) and ``solver.py`` (value, initial_price).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from walras.allocator.pricing.backend import Backend


@dataclass(frozen=True)
class Params:
    """Per-job utility parameters of one group of jobs (backend arrays)."""

    weight: Any
    target: Any
    alpha: Any
    common_weight: float | None = None  # the weight of every job, when they all share one

    def slice(self, start: int, stop: int) -> Params:
        """The parameters of jobs [start, stop)."""
        return Params(
            self.weight[start:stop],
            self.target[start:stop],
            self.alpha[start:stop],
            self.common_weight,
        )

    def take(self, idx: Any) -> Params:
        """The parameters of the jobs ``idx`` (an index array)."""
        return Params(
            _take(self.weight, idx),
            _take(self.target, idx),
            _take(self.alpha, idx),
            self.common_weight,
        )


def _take(x: Any, idx: Any) -> Any:
    """x[idx]; a constant numpy parameter (stride 0, ``problem._constant``) stays one number."""
    if isinstance(x, np.ndarray) and x.ndim == 1 and x.strides == (0,) and x.size > 0:
        return np.broadcast_to(x[0], (len(idx),))
    return x[idx]


class Utility:
    """The shared interface. Subclasses implement value, derivative and best_t."""

    kind: ClassVar[str] = ""
    # True when best_t is differentiable in the slope inside (lo, hi): ``slope_derivative``
    # exists and the elastic-job polish (``polish.py``) applies.
    smooth: ClassVar[bool] = False

    def value(self, b: Backend, t: Any, par: Params) -> Any:
        """u(t) per job."""
        raise NotImplementedError

    def derivative(self, b: Backend, t: Any, par: Params) -> Any:
        """u'(t) per job (a supergradient where u is not differentiable)."""
        raise NotImplementedError

    def best_t(self, b: Backend, slope: Any, lo: Any, hi: Any, par: Params) -> Any:
        """argmax over t in [lo, hi] of u(t) − slope·t, per job."""
        raise NotImplementedError

    def slope_derivative(self, b: Backend, t: Any, slope: Any, par: Params) -> Any:
        """d best_t / d slope at an interior optimum t = best_t(slope) (smooth kinds only)."""
        raise NotImplementedError

    def total(self, b: Backend, t: Any, par: Params) -> float:
        """Σ u(t) over the jobs (float64)."""
        return b.total(self.value(b, t, par))

    def initial_price(self, b: Backend, A: Any, t0: Any, inv_d: Any, par: Params) -> Any:
        """Σ_i u_i'(t0_i) a_ij / d_ij over the group's jobs (paper eq. 17 before the 1/n).

        ``A`` and ``inv_d`` are type-major (m, n_group) arrays; returns an (m,) array.
        """
        # A job with no throughput at all has t0 = 0 and u'(0) may be ∞; it adds nothing.
        slope = A * inv_d * self.derivative(b, t0, par)[None, :]
        return b.xp.where(A > 0, slope, 0.0 * A).sum(1)


class Linear(Utility):
    kind = "linear"

    def value(self, b: Backend, t: Any, par: Params) -> Any:
        return par.weight * t

    def derivative(self, b: Backend, t: Any, par: Params) -> Any:
        return par.weight + 0.0 * t

    def best_t(self, b: Backend, slope: Any, lo: Any, hi: Any, par: Params) -> Any:
        return b.xp.where(slope < par.weight, hi, lo)


class Log(Utility):
    kind = "log"
    smooth = True

    def value(self, b: Backend, t: Any, par: Params) -> Any:
        return par.weight * b.xp.log(t)

    def derivative(self, b: Backend, t: Any, par: Params) -> Any:
        return par.weight / t

    def best_t(self, b: Backend, slope: Any, lo: Any, hi: Any, par: Params) -> Any:
        # slope = 0 gives w/0 = inf, clipped to hi (a free resource is used fully).
        return b.xp.fmin(b.xp.fmax(par.weight / slope, lo), hi)

    def slope_derivative(self, b: Backend, t: Any, slope: Any, par: Params) -> Any:
        # t = w / α  ⇒  dt/dα = −w / α² = −t / α.
        return -t / slope

    def total(self, b: Backend, t: Any, par: Params) -> float:
        # log is the most expensive operation of an iteration (~15 ns per element in numpy on
        # a CPU without SVML). With a common weight, Σ log t = Σ log(t_1 ⋯ t_8) over groups of
        # 8 throughputs: 8× fewer logs. Falls back when a product under/overflows.
        if par.common_weight is None or t.shape[0] < 64:
            return b.total(self.value(b, t, par))
        k = t.shape[0] // 8 * 8
        prod = t[0:k:8]
        for j in range(1, 8):
            prod = prod * t[j:k:8]
        lo, hi = float(prod.min()), float(prod.max())
        if not (lo > 1e-290 and hi < 1e290):
            return b.total(self.value(b, t, par))
        rest = b.total(b.xp.log(t[k:])) if k < t.shape[0] else 0.0
        return par.common_weight * (b.total(b.xp.log(prod)) + rest)


class AlphaFair(Utility):
    kind = "alpha"
    smooth = True

    def value(self, b: Backend, t: Any, par: Params) -> Any:
        e = 1.0 - par.alpha
        return par.weight * t**e / e

    def derivative(self, b: Backend, t: Any, par: Params) -> Any:
        return par.weight * t ** (-par.alpha)

    def best_t(self, b: Backend, slope: Any, lo: Any, hi: Any, par: Params) -> Any:
        return b.xp.fmin(b.xp.fmax((par.weight / slope) ** (1.0 / par.alpha), lo), hi)

    def slope_derivative(self, b: Backend, t: Any, slope: Any, par: Params) -> Any:
        # t = (w / α)^(1/β)  ⇒  dt/dα = −t / (β α).
        return -t / (par.alpha * slope)


class TargetPriority(Utility):
    kind = "target"

    def value(self, b: Backend, t: Any, par: Params) -> Any:
        return par.weight * b.xp.fmin(t - par.target, 0.0 * t)

    def derivative(self, b: Backend, t: Any, par: Params) -> Any:
        return b.xp.where(t < par.target, par.weight, 0.0 * t)

    def best_t(self, b: Backend, slope: Any, lo: Any, hi: Any, par: Params) -> Any:
        return b.xp.where(slope < par.weight, b.xp.fmin(b.xp.fmax(par.target, lo), hi), lo)


UTILITIES: dict[str, Utility] = {
    u.kind: u for u in (Linear(), Log(), AlphaFair(), TargetPriority())
}

"""Job utilities for Hadar: how much a job values finishing at a projected time (Hadar §III-A).

The paper lets a job's utility be any non-negative function, non-increasing in its completion time
``τ = f_j - a_j``, and names the *effective throughput* (total iterations / completion time) as the
special case it uses. Raw iterations per second are not comparable across models (one A3C step is
not one ResNet-50 step), so Walras normalises it by the job's ideal completion time and scales it by
the gang size::

    U_j(τ) = weight_j · W_j · shape(τ, ideal_j),    ideal_j = total_work_j / max_r throughput[j, r]

``ideal_j`` is how long the whole job takes alone on its fastest GPU type. Multiplying by ``W_j``
makes the *per-GPU* utility ``U_j / W_j = weight_j · shape`` comparable across gang sizes, which the
per-GPU prices of :mod:`~walras.allocator.hadar.prices` need: otherwise an 8-GPU gang would pay 8
times the price of a 1-GPU job for the same value and never run.

The shapes (pick one per round; every shape is positive and non-increasing in ``τ``, which the
exactness argument of FIND_ALLOC needs: a faster allocation is never worth less):

- :class:`InverseSlowdown` (default, the paper's effective throughput): ``shape = (ideal / τ)^p``.
  Example: ideal 1 h, projected completion 4 h, ``p = 1``: ``shape = 0.25``.
- :class:`LinearDecay`: ``shape = clip(1 - (τ/ideal - 1)/(horizon - 1), floor, 1)``, i.e. 1 when
  the job finishes in its ideal time and ``floor`` once it takes ``horizon`` times that. The floor
  keeps a late job's utility positive, so it is still admitted when GPUs are cheap.
- :class:`Hyperbolic`: ``shape = h / (h + τ)`` with one time scale ``h`` for every job (default
  1 h). Unlike the two above it does not scale with the job's own size, so a job that can finish
  sooner is worth more: shortest-projected-completion first, for mean JCT. Example: ``h = 1 h``,
  ``τ = 3 h``: ``shape = 0.25``.

Which jobs win follows from the shape: with ``InverseSlowdown`` and a batch arriving together,
the jobs with the most work keep the highest per-GPU utility (``ideal/τ`` falls slowest for
them), i.e. roughly longest-job-first, good for the makespan; ``Hyperbolic`` is roughly
shortest-job-first. A utility of the completion time lowers a job's value while it waits, so a
long-waiting job is worth less, not more: the paper's model has no anti-starvation term.

Called by :mod:`~walras.allocator.hadar.planner` (payoffs) and :mod:`~walras.allocator.hadar.prices`
(the default price bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Utility(Protocol):
    """A utility shape: ``shape(τ, ideal)`` in ``(0, ∞)``, non-increasing in ``τ``.

    Both arguments are float64 arrays (broadcast together, seconds); ``τ`` may be ``inf`` (a job
    that makes no progress), for which the shape must be 0.
    """

    def __call__(self, tau: FloatArray, ideal: FloatArray) -> FloatArray: ...


@dataclass(frozen=True, slots=True)
class InverseSlowdown:
    """``(ideal / τ) ** power``: the paper's effective throughput, normalised (``power = 1``).

    A larger ``power`` values speed more steeply (a job twice as slow is worth ``2**-power``).
    """

    power: float = 1.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.power) and self.power > 0):
            raise ValueError(f"InverseSlowdown.power must be positive, got {self.power}")

    def __call__(self, tau: FloatArray, ideal: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore"):
            ratio = np.divide(
                ideal, tau, out=np.zeros(np.broadcast(tau, ideal).shape), where=tau > 0
            )
        return np.asarray(ratio**self.power, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class LinearDecay:
    """1 at ``τ = ideal``, falling linearly to ``floor`` at ``τ = horizon · ideal``, then flat."""

    horizon: float = 10.0
    floor: float = 0.01

    def __post_init__(self) -> None:
        if not (np.isfinite(self.horizon) and self.horizon > 1):
            raise ValueError(f"LinearDecay.horizon must be > 1, got {self.horizon}")
        if not (0 < self.floor <= 1):
            raise ValueError(f"LinearDecay.floor must be in (0, 1], got {self.floor}")

    def __call__(self, tau: FloatArray, ideal: FloatArray) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            late = np.where(np.isfinite(tau), tau / ideal - 1.0, np.inf)
        shape = 1.0 - late / (self.horizon - 1.0)
        # An infinite τ (no progress) is worth nothing, not the floor.
        return np.where(np.isfinite(tau), np.clip(shape, self.floor, 1.0), 0.0)


@dataclass(frozen=True, slots=True)
class Hyperbolic:
    """``horizon / (horizon + τ)``: one time scale for all jobs, so shorter jobs are worth more."""

    horizon: float = 3600.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.horizon) and self.horizon > 0):
            raise ValueError(f"Hyperbolic.horizon must be positive, got {self.horizon}")

    def __call__(self, tau: FloatArray, ideal: FloatArray) -> FloatArray:
        del ideal  # the same scale for every job, on purpose (see the module docstring)
        return np.asarray(self.horizon / (self.horizon + tau), dtype=np.float64)

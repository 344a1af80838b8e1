"""Mechanism parameters: bounds ``K, D, V``, slack ``ε``, price constants, sampling.

The paper text lost its formulas; the constants below are **[reconstructed]** from the surviving
prose and docs/algorithms.md#statements-of-work:

- values are normalised to ``{0} ∪ [v_min, V]`` (the paper takes ``v_min = 1``); a job uses at
  most ``K·D`` GPU-rounds, so every job's value density is ≥ ``v_min/(K·D)``;
- ``p_min = v_min / (2·K·D)``: "half the minimum value density of any job" (Appendix D), so
  an empty cluster is affordable to every job;
- ``μ = 4·K·D·V / v_min``, i.e. ``p_min · μ = 2V``: at usage ``y ≥ C' − K`` the unit price
  ``p_min·μ^{y/C'} ≥ 2V·μ^{−K/C'} ≥ V`` as soon as ``C' ≥ K·log₂ μ`` (the paper's "sufficient
  supply"), so no job buys the last ``K`` units and expected usage stays ≤ ``C'``
  (:meth:`MechanismParams.supply_sufficient`);
- ``C' = (1 − ε)·C``: the relaxed problem plans against a reduced capacity, leaving room for
  realisations above their expectation.

Failure estimates (Appendix F, Lemma F.1, **[reconstructed]**): each ``q̂(s, d)`` is a mean of
``M`` independent Bernoulli samples, so by Hoeffding ``P(|q̂ − q| > ε') ≤ 2·exp(−2·M·ε'²)``;
a union bound over the ``N`` (start, duration) pairs of one job gives accuracy ``ε'`` for all
pairs with probability ``≥ 1 − δ`` when ``M ≥ ln(2N/δ) / (2ε'²)``. Example: ``ε' = 0.05``,
``δ = 0.05``, ``N = 100`` → ``M = ⌈ln(4000)/0.005⌉ = 1659``.

Threshold ``θ``: the paper zeroes estimates below ``θ = β + ε'`` where ``β`` (Lemma 4.3) bounds
the failure probability of a job facing only expected load ≤ ``C'``; its exact form is lost, and it
is vanishing only for very large ``C/K``. Walras's default is ``θ = ε'``: an estimate below the
sampling accuracy is statistically indistinguishable from 0. Truthfulness (Theorem 3.2) holds for
any ``θ``: a misreport gains at most ``2Δ`` with ``Δ = max_π |Û(π) − U(π)|`` (estimated vs
true expected utility of a plan); since ``|q̂ − q| ≤ ε' + θ`` for all pairs w.p. ``≥ 1 − δ``,
``Δ ≤ (ε' + θ)·E|v − P|`` then. (With ``cancel_unprofitable=False`` and no duration signal,
over-reporting ``k`` can also gain the expected charge of late completions: see
:mod:`.cancellation` and ``tests/unit/test_sow_sim.py``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from walras.allocator.errors import InvalidProblem


@dataclass(frozen=True, slots=True)
class MechanismParams:
    """Known bounds and tuning of the SoW mechanism.

    Attributes:
        max_concurrency: ``K``, largest ``k`` of any job.
        max_duration: ``D``, longest duration (rounds) on any type a job may use.
        max_value: ``V``, largest value of any job.
        min_value: ``v_min``, smallest positive value (paper: 1).
        epsilon: ``ε`` in ``C' = (1 − ε)C``.
        sample_accuracy: ``ε'`` of the Hoeffding bound.
        sample_confidence: ``δ``: all estimates of a job are ``ε'``-accurate w.p. ``≥ 1 − δ``.
        samples: Monte Carlo sample count; ``None`` = the Hoeffding count for each job.
        theta: ``θ``; estimates below it are zeroed. ``None`` = ``sample_accuracy``.
        seed: base seed of the estimator (each admission derives its own stream).
        p_min, mu: price constants; ``None`` = the defaults above.
        cancel_unprofitable: cancel a running job for free once no completion can pay under
            its report (:mod:`.cancellation`); plans value outcomes at ``(v − P)⁺``. Closes the
            no-signal truthfulness gap; ``False`` is the paper's mechanism as written.
    """

    max_concurrency: int
    max_duration: int
    max_value: float
    min_value: float = 1.0
    epsilon: float = 0.1
    sample_accuracy: float = 0.05
    sample_confidence: float = 0.05
    samples: int | None = None
    theta: float | None = None
    seed: int = 0
    p_min: float | None = None
    mu: float | None = None
    cancel_unprofitable: bool = True

    def __post_init__(self) -> None:
        checks = (
            ("max_concurrency", self.max_concurrency >= 1),
            ("max_duration", self.max_duration >= 1),
            ("min_value", math.isfinite(self.min_value) and self.min_value > 0),
            ("max_value", math.isfinite(self.max_value) and self.max_value >= self.min_value),
            ("epsilon", 0.0 <= self.epsilon < 1.0),
            ("sample_accuracy", 0.0 < self.sample_accuracy < 1.0),
            ("sample_confidence", 0.0 < self.sample_confidence < 1.0),
            ("samples", self.samples is None or self.samples >= 1),
            ("theta", self.theta is None or 0.0 <= self.theta <= 1.0),
            ("p_min", self.p_min is None or (math.isfinite(self.p_min) and self.p_min > 0)),
            ("mu", self.mu is None or (math.isfinite(self.mu) and self.mu >= 1)),
        )
        for name, ok in checks:
            if not ok:
                raise InvalidProblem(
                    f"mechanism parameter {name} = {getattr(self, name)!r} is out of range",
                    field=name,
                )

    @property
    def unit_price_min(self) -> float:
        """``p_min = v_min / (2KD)``."""
        if self.p_min is not None:
            return self.p_min
        return self.min_value / (2.0 * self.max_concurrency * self.max_duration)

    @property
    def price_base(self) -> float:
        """``μ = 4KDV / v_min``."""
        if self.mu is not None:
            return self.mu
        return 4.0 * self.max_concurrency * self.max_duration * self.max_value / self.min_value

    @property
    def threshold(self) -> float:
        """``θ``."""
        return self.sample_accuracy if self.theta is None else self.theta

    def planning_capacity(self, capacity: int) -> float:
        """``C' = (1 − ε)·C``."""
        return (1.0 - self.epsilon) * capacity

    def supply_sufficient(self, capacity: int) -> bool:
        """``C' ≥ K·log₂ μ``: prices exceed ``V`` before expected usage reaches ``C'``."""
        return self.planning_capacity(capacity) >= self.max_concurrency * math.log2(self.price_base)

    def sample_count(self, pairs: int) -> int:
        """Monte Carlo samples for one job with ``pairs`` (start, duration) estimates."""
        if self.samples is not None:
            return self.samples
        return hoeffding_samples(self.sample_accuracy, self.sample_confidence, pairs)


def hoeffding_samples(accuracy: float, confidence: float, pairs: int) -> int:
    """``M = ⌈ln(2N/δ) / (2ε'²)⌉`` (Lemma F.1, reconstructed; see the module docstring)."""
    n = max(1, pairs)
    return max(1, math.ceil(math.log(2.0 * n / confidence) / (2.0 * accuracy * accuracy)))


def log_kdv(params: MechanismParams) -> float:
    """``ln(K·D·V / v_min)``: the scale of the adversarial competitive ratio ``O(log KDV)``."""
    return math.log(
        params.max_concurrency * params.max_duration * params.max_value / params.min_value
    )

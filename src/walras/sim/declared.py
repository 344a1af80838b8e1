"""Throughputs users declare vs what jobs really do (``--throughput-noise``, ``--hide-fraction``,
``--estimate/--no-estimate``, ``--semantics walras``).

The trace's table gives the *true* throughputs; they alone drive progress. The policy sees what a
user would have written in ``spec.throughput``, corrected as the operator corrects it:

- **declared** ``= true · exp(σ Z)``, ``Z ~ N(0, 1)`` per (job, type), seeded (``--seed``):
  log-normal noise, unbiased in log space (the median declaration is the truth), so σ = 0.3 means
  a typical declaration is off by a factor ``e^{±0.3}`` (−26 % … +35 %);
- **hidden**: each job leaves ``h = ⌊f·k + U⌋`` of its ``k`` runnable types undeclared
  (``U ~ U(0, 1)``, so the expected fraction is exactly ``f``), chosen at random, at most
  ``k − 1`` (a job that declares nothing could never run without estimation; the operator's
  profiling slice for such jobs is not simulated). Types a job cannot run on (true throughput 0,
  e.g. a gang too large for the type's memory) stay declared as 0;
- **measured**: with ``--estimate``, once a job has run productively on a type for
  :data:`MEASURE_S` seconds its value there is the true one (the simulator's progress reports are
  exact) and it counts as one sample per :data:`MEASURE_S` (at most :data:`MAX_SAMPLES`) in the
  fit below; the policy sees it from the next cycle on;
- **estimated**: with ``--estimate``, undeclared, unmeasured entries come from
  :func:`walras.allocator.estimate.estimate_throughputs` over every job seen so far (finished ones
  included: their measurements still describe the types), grouped by (job type, scale factor) as
  a user's ``spec.profile`` would be; re-estimated when jobs arrive and, at full rounds, when an
  entry became measured (not on every new sample: one fit costs tens of milliseconds on D5).

With ``--no-estimate`` the policy sees the declarations only, and an undeclared type is not
eligible for the job. The scheduling core's own work accounting follows the true rate (the
operator reads real progress from the pods), so jobs complete when their true work is done.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator.estimate import estimate_throughputs
from walras.core.snapshot import Store
from walras.sim.errors import SimInputError
from walras.sim.workload import Workload

FloatArray = npt.NDArray[np.float64]

MEASURE_S = 60.0
"""Productive seconds on a type before its measured value replaces the declared one (and the
length of one sample): a minute of progress reports."""
MAX_SAMPLES = 10
"""Samples beyond this add no weight (the fit would otherwise change every round)."""
ESTIMATE_TOL = 1e-3
"""The estimator's stopping step in log units: 0.1 %, far below the estimates' own error (~20 %
median on D5), and it keeps a fit to tens of sweeps."""
SHOW_RTOL = 1e-2
"""A job's manifest is rewritten only when one of its values moved by more than 1 % (or became
(in)eligible): refits move every estimate a little, and re-parsing 480 jobs every round would cost
more than the fit."""


@dataclass(slots=True)
class Declared:
    """The policy's view of every job's throughputs, updated as jobs run (one per simulation)."""

    workload: Workload
    declared: FloatArray
    estimate: bool
    productive_s: FloatArray = field(init=False)
    view: FloatArray = field(init=False)
    seen: list[int] = field(default_factory=list)
    manifests: dict[int, dict[str, Any]] = field(default_factory=dict)
    shown: dict[int, FloatArray] = field(default_factory=dict)
    stints: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    fitted_measured: npt.NDArray[np.bool_] | None = None
    sources: dict[tuple[int, int], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.productive_s = np.zeros(self.declared.shape)
        self.view = np.where(np.isnan(self.declared), 0.0, self.declared)

    def samples(self) -> FloatArray:
        out: FloatArray = np.minimum(np.floor(self.productive_s / MEASURE_S), MAX_SAMPLES)
        return out

    def true_rate(self, j: int, gpu_type: str) -> float:
        return float(self.workload.throughputs[j, self.workload.gpu_types.index(gpu_type)])

    def admit(self, j: int, manifest: dict[str, Any]) -> dict[str, Any]:
        """Job ``j`` arrives: its manifest with the throughputs the user declared."""
        self.seen.append(j)
        self.manifests[j] = manifest
        self.shown[j] = self.view[j].copy()
        self.fitted_measured = None  # a new row: estimate before the next plan
        manifest["spec"] = {**manifest["spec"], "throughput": self._row(j)}
        return manifest

    def refresh(
        self,
        now: float,
        full: bool,
        running: Mapping[int, tuple[str, float]],
        store: Store,
        done: Collection[int],
    ) -> None:
        """Before a cycle: credit productive time, re-estimate if needed, update changed jobs.

        ``running``: per running job, its GPU type and the time it started working.
        """
        types = self.workload.gpu_types
        for j, (gpu_type, productive_from) in running.items():
            c = types.index(gpu_type)
            worked = max(0.0, now - productive_from)
            prev = self.stints.get(j)
            credited = prev[2] if prev is not None and prev[:2] == (c, productive_from) else 0.0
            self.productive_s[j, c] += worked - credited
            self.stints[j] = (c, productive_from, worked)
        if not self.estimate:
            return
        samples = self.samples()
        measured = samples > 0
        if self.fitted_measured is None or (
            full and not np.array_equal(measured, self.fitted_measured)
        ):
            self.fitted_measured = measured
            self._estimate(samples)
        else:  # between fits, a new measurement still replaces what the policy saw
            fresh = measured & (self.view != self.workload.throughputs)
            self.view[fresh] = self.workload.throughputs[fresh]
            for j, c in zip(*np.nonzero(fresh), strict=True):
                self.sources[(int(j), int(c))] = "measured"
        for j in self.seen:
            new, shown = self.view[j], self.shown[j]
            if j in done or (
                np.array_equal(new > 0, shown > 0)
                and np.array_equal(new[measured[j]], shown[measured[j]])
                and np.allclose(new, shown, rtol=SHOW_RTOL, atol=0.0)
            ):
                continue
            self.shown[j] = new.copy()
            manifest = self.manifests[j]
            manifest["spec"] = {**manifest["spec"], "throughput": self._row(j)}
            store.upsert("job", manifest)

    def _estimate(self, samples: FloatArray) -> None:
        rows = sorted(self.seen)
        truth = self.workload.throughputs[rows]
        s = samples[rows]
        known = np.where(s > 0, truth, self.declared[rows])
        groups = [(self.workload.job_types[j], int(self.workload.scale_factors[j])) for j in rows]
        est = estimate_throughputs(
            known,
            np.where(np.isnan(known), 0.0, s),
            groups=groups,
            type_names=self.workload.gpu_types,
            tol=ESTIMATE_TOL,
        )
        values = np.nan_to_num(est.values, nan=0.0)
        for i, j in enumerate(rows):
            self.view[j] = values[i]
            for c in range(len(self.workload.gpu_types)):
                self.sources[(j, c)] = str(est.sources[i][c])

    def _row(self, j: int) -> dict[str, float]:
        return {
            t: float(self.view[j, c])
            for c, t in enumerate(self.workload.gpu_types)
            if self.view[j, c] > 0
        }


def from_config(workload: Workload, config: Any) -> Declared | None:
    """The declared view for this run, or None when users declare the truth (no options set)."""
    noise = float(getattr(config, "throughput_noise", 0.0))
    hide = float(getattr(config, "hide_fraction", 0.0))
    if not (math.isfinite(noise) and noise >= 0):
        raise SimInputError(f"--throughput-noise must be a number >= 0, got {noise:g}")
    if not (math.isfinite(hide) and 0 <= hide < 1):
        raise SimInputError(f"--hide-fraction must be in [0, 1), got {hide:g}")
    if noise == 0 and hide == 0:
        return None
    truth = workload.throughputs
    rng = np.random.default_rng([int(getattr(config, "seed", 0)), 16])
    declared = truth * np.exp(noise * rng.standard_normal(truth.shape))
    for j in range(workload.n_jobs):
        runnable = np.flatnonzero(truth[j] > 0)
        k = len(runnable)
        h = min(math.floor(hide * k + rng.random()), k - 1)
        if h > 0:
            declared[j, rng.choice(runnable, size=h, replace=False)] = np.nan
    return Declared(
        workload=workload, declared=declared, estimate=bool(getattr(config, "estimate", True))
    )

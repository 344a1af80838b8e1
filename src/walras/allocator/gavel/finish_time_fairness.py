"""Gavel's finish-time fairness (Themis-like): ``finish_time_fairness_perf`` and the agnostic one.

Heterogeneity-aware (Gavel ``FinishTimeFairnessPolicyWithPerf``). For job ``j`` with ``n[j]``
steps left, ``age[j]`` seconds since arrival and allocation throughput
``a[j](x) = Σ_t thr[j, t] · x[j, t]``::

    minimise  max_j  ρ_j(x) = (age[j] + n[j] / a[j](x)) / (iso_time[j] + n[j] / iso[j])

subject to Gavel's base constraints. ``iso[j] = Σ_t thr[j, t] · y[j, t]`` is the throughput under
Gavel's "isolated" split ``y[j, t] = (cap[t] / J) / k[j]``, each row divided by
``max(1, Σ_t y[j, t])``: a 1/J share of the cluster. ``iso_time[j]`` is the time the job would
have spent so far in isolation: Gavel's policy object accumulates, at every call,
``(n_prev[j] − n[j]) / iso_prev[j]``, the steps done since its previous call over the isolated
throughput computed then. This object keeps that state exactly as Gavel does (keyed by job id;
a call without jobs forgets the previous call). Priority weights are accepted and, as in Gavel,
ignored.

Solution. ``ρ_j(x) ≤ ρ`` iff ``a[j](x) ≥ r_j(ρ) = n[j] / (ρ·E[j] − age[j])`` with
``E[j] = iso_time[j] + n[j] / iso[j]``, so for fixed ``ρ`` the problem is an LP, and
``ρ*`` is found by the Dinkelbach-type iteration for min-max fractional programs: from a
feasible ``ρ_k`` solve the max-min LP ``s_k = max_x min_j a[j](x) / r_j(ρ_k)`` (HiGHS); its
optimum ``x_k`` has ``ρ_{k+1} = max_j ρ_j(x_k) ≤ ρ_k``, strictly less unless ``s_k = 1``, which
certifies ``ρ_k = ρ*`` (an ``x`` with every ``ρ_j(x) < ρ_k`` would give ``s_k > 1``). With
``age = 0`` one step lands on ``ρ*`` (``r_j`` scales like ``1/ρ``); in general a few. Gavel
solves the same convex program in one ECOS call (``cp.inv_pos``).

By default the result is the analytic center of the optimal face (:mod:`.center`, the optimum an
interior-point solver returns): the central max-min point of ``a[j](x) ≥ s·r_j(ρ*)``.

Jobs with ``n[j] = 0`` contribute the constant ``age[j] / E[j]`` (Gavel's ``0 · inv_pos``).

The agnostic variant (Gavel ``FinishTimeFairnessPolicy``) replaces every type's throughput with
the job's ``v100`` throughput, isolated throughputs included; its state lives in its own object.

Worked example: one type with 2 GPUs, two new 1-GPU jobs (age 0, iso_time 0) with 100 and 300
steps left at 1 step/s. ``y = 1/2·2/1 = 1``, ``iso = 1``, ``E = (100, 300)``. Both can run all
the time (``x = 1`` each), so ``ρ_j = (n / 1) / E = 1`` for both: ``ρ* = 1``.
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel import center, lp
from walras.allocator.gavel.inputs import FloatArray, GavelInputs

MAX_ITERATIONS = 100
"""Brent iterations (one LP each) at most; typically about ten."""

REL_TOL = 1e-9
"""Stop when the bracket around ``ρ*`` is this narrow, relative to ``ρ*``."""


def isolated_throughputs(
    throughputs: FloatArray, scale_factors: FloatArray, capacity: FloatArray
) -> FloatArray:
    """Gavel's ``IsolatedPolicy.get_throughputs``: the job's throughput on a 1/J share."""
    J = throughputs.shape[0]
    y = np.tile(capacity / J, (J, 1)) / scale_factors[:, None]
    y /= np.maximum(y.sum(axis=1), 1.0)[:, None]
    return np.asarray((throughputs * y).sum(axis=1), dtype=np.float64)


class FinishTimeFairness:
    """``finish_time_fairness_perf`` (``aware=True``) or ``finish_time_fairness``."""

    def __init__(self, *, aware: bool, central: bool = True) -> None:
        self.aware = aware
        self.central = central
        self.name = "finish_time_fairness_perf" if aware else "finish_time_fairness"
        self._iso_time: dict[int, float] = {}  # Gavel's _cumulative_isolated_time
        self._prev_remaining: dict[int, float] = {}  # _num_steps_remaining_prev_iteration
        self._prev_iso: dict[int, float] = {}  # _isolated_throughputs_prev_iteration
        self.last_rho: float | None = None
        """``ρ*`` of the last call (for diagnostics and tests)."""

    def allocate(self, inputs: GavelInputs) -> FloatArray:
        J, T = inputs.n_jobs, inputs.n_types
        remaining = inputs.require("num_steps_remaining", self.name)
        age = inputs.require("times_since_start", self.name)
        if J == 0 or T == 0:
            self._prev_remaining, self._prev_iso = {}, {}
            return np.zeros((J, T))
        thr = inputs.throughputs
        if not self.aware:
            ref = inputs.reference_column(self.name)
            thr = np.repeat(thr[:, ref : ref + 1], T, axis=1)
        k, cap = inputs.scale_factors, inputs.capacity
        iso = isolated_throughputs(thr, k.astype(np.float64), cap)
        ids = [int(i) for i in inputs.job_ids]
        E = np.empty(J)
        for j, job in enumerate(ids):
            if iso[j] <= 0.0:
                raise InvalidProblem(
                    f"job {job}: throughput 0 on every type with GPUs, so its isolated "
                    "throughput (Gavel's finish-time reference) is 0",
                    field="throughputs",
                    index=j,
                )
            done = self._iso_time.get(job, 0.0)
            if job in self._prev_remaining:
                done += (self._prev_remaining[job] - remaining[j]) / self._prev_iso[job]
            self._iso_time[job] = done
            E[j] = done + remaining[j] / iso[j]
        # Gavel records these after solving; nothing below reads them, so record them now.
        self._prev_remaining = {job: float(remaining[j]) for j, job in enumerate(ids)}
        self._prev_iso = {job: float(iso[j]) for j, job in enumerate(ids)}

        x, rho, weights = _solve(thr, remaining, age, E, k, cap)
        self.last_rho = rho
        active = weights > 0.0
        if self.central and active.any() and bool((cap > 0.0).any()):
            # s(ρ*) ≥ 1 from the LP at ρ*: the end of the central path of max s, a ≥ s·r(ρ*).
            _, s_opt = lp.max_min(
                lp.base_polytope(k, cap), thr / np.where(active, weights, 1.0)[:, None], active
            )
            start = lp.strictly_inside(k, cap)
            x, _ = center.central_max_min(start, thr, k, cap, weights=weights, s_upper=s_opt)
        return lp.finish(x, k, cap)


def _ratios(a: FloatArray, remaining: FloatArray, age: FloatArray, E: FloatArray) -> FloatArray:
    """``ρ_j = (age + n / a) / E``; ``n = 0`` gives ``age / E`` (0 when ``E = 0`` too)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(remaining > 0.0, remaining / a, 0.0)
        rho = np.where(E > 0.0, (age + wait) / E, 0.0)
    return np.asarray(rho, dtype=np.float64)


def _solve(
    thr: FloatArray,
    remaining: FloatArray,
    age: FloatArray,
    E: FloatArray,
    k: np.ndarray,
    cap: FloatArray,
) -> tuple[FloatArray, float, FloatArray]:
    """``(x at ρ*, ρ*, r(ρ*))`` with ``r = 0`` for finished jobs (module docstring).

    ``s(ρ) = max_x min_j a[j](x) / r_j(ρ)`` rises with ``ρ`` and ``ρ*`` is where it crosses 1.
    The root is bracketed by ``max_j age[j]/E[j]`` (some ``r_j`` is infinite: ``s = 0``) and
    ``ρ(x₀)`` of a first feasible point; Brent's method (``scipy.optimize.brentq``, one LP per
    evaluation) closes in. Every feasible LP point ``x`` also bounds ``ρ* ≤ ρ(x) ≤ ρ`` (a
    Dinkelbach step); the best is returned.
    """
    import scipy.optimize  # here: a simulator run of another policy never pays its import

    poly = lp.base_polytope(k, cap)
    active = remaining > 0.0
    J = thr.shape[0]
    ones = np.ones(J)
    floor = float(np.max(np.where(active, 0.0, _ratios(ones, remaining, age, E))))
    if not active.any():
        return np.zeros(thr.shape), floor, np.zeros(J)

    def rho_of(x: FloatArray) -> float:
        return max(float(_ratios(thr_alloc(thr, x), remaining, age, E).max()), floor)

    def s_at(rho: float) -> tuple[float, FloatArray | None]:
        need = _required(rho, remaining, age, E, active)
        if need is None:
            return 0.0, None
        x, s_val = lp.max_min(poly, thr / np.where(active, need, 1.0)[:, None], active)
        return s_val, lp.finish(x, k, cap)

    # Any feasible x gives an upper end: the LP along ρ → ∞, where r_j(ρ)·ρ → n[j] / E[j].
    direction = np.where(active, remaining / np.where(E > 0.0, E, 1.0), 1.0)
    x0, _ = lp.max_min(poly, thr / direction[:, None], active)
    x0 = lp.finish(x0, k, cap)
    found = [(rho_of(x0), x0)]  # feasible points; ρ* ≤ ρ(x) for each

    def excess(rho: float) -> float:
        s_val, x = s_at(rho)
        if x is not None and s_val >= 1.0:
            found.append((rho_of(x), x))
        return s_val - 1.0

    lo = float(np.max(np.where(active & (E > 0.0), age / np.where(E > 0.0, E, 1.0), 0.0)))
    hi = found[0][0]
    if hi > max(lo, floor) * (1.0 + REL_TOL) and excess(hi) > 0.0:
        # s(lo) = 0 (some r_j is infinite there), s(hi) > 1: Brent's method finds the crossing.
        scipy.optimize.brentq(excess, lo, hi, xtol=1e-300, rtol=REL_TOL, maxiter=MAX_ITERATIONS)
    best, x_best = min(found, key=lambda item: item[0])
    need = _required(best, remaining, age, E, active)
    return x_best, best, (np.zeros(J) if need is None else need)


def thr_alloc(thr: FloatArray, x: FloatArray) -> FloatArray:
    """``a[j](x) = Σ_t thr[j, t] · x[j, t]``."""
    return np.asarray((thr * x).sum(axis=1), dtype=np.float64)


def _required(
    rho: float, remaining: FloatArray, age: FloatArray, E: FloatArray, active: np.ndarray
) -> FloatArray | None:
    """``r_j(ρ) = n[j] / (ρ·E[j] − age[j])`` for active jobs (0 for finished ones)."""
    denom = rho * E - age
    if (active & (denom <= 0.0)).any():
        return None
    return np.where(active, remaining / np.where(active, denom, 1.0), 0.0)

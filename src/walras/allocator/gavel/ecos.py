"""Gavel's LP baselines solved the way Gavel solved them: cvxpy + ECOS (``--lp-solver ecos``).

Opt-in backend (extra ``walras[ecos]``), reached through the one front door of Gavel's policies,
``walras.allocator.gavel.make_policy(name, lp_solver="ecos")``; ``walras simulate --semantics
gavel --lp-solver ecos`` uses it. The default policies (:mod:`walras.allocator.gavel`) solve
the same LPs with HiGHS and return the analytic
center of the optimal face. Where an LP has many optima, the point Gavel's round mechanism sees
is whatever ECOS stops at, and two records depend on that choice beyond ±3 % (D1 agnostic
max-min fairness: ECOS's 1e-11 asymmetries decide priority ties; D4 min-total-duration: a
feasibility LP whose whole polytope is optimal). ECOS is deterministic: the same cvxpy version,
the same problem *built in the same shape* (rows = jobs sorted by id, columns = GPU types sorted
by name, the same constraint list in the same order, the coefficients computed in the same
floating-point order) gives the same canonical cone program and so the same iterates, bit for bit.

The models (``thr`` whole-job throughputs, ``k`` scale factors, ``w`` priority weights, ``cap``
GPUs per type, ``n`` remaining steps; rows sorted by job id, columns by type name)::

    base:  x ≥ 0,   Σ_j k[j] x[j, t] ≤ cap[t],   Σ_t x[j, t] ≤ 1       (in this order)

    max_min_fairness_perf:  maximise min_j Σ_t (thr[j, t] · (1/w[j]) · (1/prop[j])) · k[j] · x[j, t]
        prop[j] = Σ_t thr[j, t] · p[t],  p[t] = (cap[t]/J) / Σ_u (cap[u]/J)   (equal split)
    max_min_fairness:       the same with thr ≡ 1

    min_total_duration_perf: bisection on T over ``maximise 1`` s.t. base, Σ_t thr[j, t] x[j, t]
        ≥ n[j] / T; T feasible iff cvxpy reports status "optimal" (anything else, including
        "optimal_inaccurate", counts as infeasible, as in Gavel); bracket [100, 10⁶], then
        [10⁶, 10⁷], …; bisect while 1.05·lo < hi; return the x of the last feasible T tried.
    min_total_duration:     the same with every type's thr replaced by the job's v100 one.

    finish_time_fairness_perf: minimise max_j (age[j] + n[j] · inv_pos(Σ_t thr[j, t] x[j, t]))
        / (iso_time[j] + n[j] / iso[j]) s.t. base, one cone program (Gavel builds one term per
        job in a loop; so do we). iso[j] = Σ_t thr[j, t] y[j, t] with Gavel's isolated split
        y[j, t] = (cap[t]/J) / k[j], rows over 1 scaled to sum 1; iso_time[j] accumulates
        (n_prev[j] − n[j]) / iso_prev[j] over calls (state kept per job id, as Gavel's policy
        object keeps it). If ECOS returns no point, Gavel's isolated split y is the allocation.
    finish_time_fairness:   the same with every type's thr replaced by the job's v100 one.

Gavel clips the returned ``x`` to ``[0, 1]``; so do we. Tiny example (max-min, agnostic): one type
with 2 GPUs, 1-GPU jobs a, b and a 2-GPU job c: coefficients k = (1, 1, 2) after ``prop = 1``;
the optimum gives every job k·x = 2/3, so ``x = (2/3, 2/3, 1/3)`` (ECOS to ~1e-9).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel.inputs import FloatArray, GavelInputs

ECOS_POLICIES = (
    "max_min_fairness_perf",
    "max_min_fairness",
    "min_total_duration_perf",
    "min_total_duration",
    "finish_time_fairness_perf",
    "finish_time_fairness",
)
"""Gavel policies this backend solves with ECOS (FIFO has no LP)."""

REFERENCE_TYPE = "v100"
"""The type whose throughput Gavel's agnostic min-total-duration uses on every type."""

FIRST_BRACKET = (100.0, 1_000_000.0)
STOP_RATIO = 1.05
MAX_BRACKETS = 12
"""Gavel's bisection: first ``(min_T, max_T)``; bisect while ``STOP_RATIO · min_T < max_T``; we
give up after this many ×10 brackets (Gavel loops forever when no horizon is feasible)."""

MISSING = (
    "--lp-solver ecos needs cvxpy and ECOS 2.0.14 (Gavel's solver): pip install 'walras[ecos]'"
)


def cvxpy_with_ecos() -> Any:
    """The ``cvxpy`` module, or :class:`InvalidProblem` (field ``lp_solver``) if cvxpy or its ECOS
    solver is missing."""
    try:
        # Imported here (opt-in extra) and used untyped: cvxpy's API carries no annotations.
        cp: Any = importlib.import_module("cvxpy")
    except ImportError:
        raise InvalidProblem(MISSING, field="lp_solver") from None
    if "ECOS" not in cp.installed_solvers():
        raise InvalidProblem(MISSING, field="lp_solver")
    return cp


def _solve(problem: Any) -> None:
    """``problem.solve(solver="ECOS")``, as Gavel calls it, without cvxpy's inaccuracy warning.

    Gavel reads ``problem.status`` itself (an inaccurate optimum counts as infeasible in its
    bisection; max-min and finish-time fairness print a warning and use the point); so do we,
    and cvxpy's own ``UserWarning`` would only repeat that on stderr.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Solution may be inaccurate", UserWarning)
        problem.solve(solver="ECOS")


def _isolated_split(scale: FloatArray, cap: list[float]) -> FloatArray:
    """Gavel's isolated split: ``(cap[t]/J) / k[j]``, rows over 1 scaled down to sum 1."""
    J = scale.shape[0]
    split = np.array([[c / J for c in cap] for _ in range(J)]) / scale
    per_row = np.maximum(np.sum(split, axis=1), np.ones(J))
    return np.asarray(split / per_row[:, None], dtype=np.float64)


class EcosGavelLp:
    """One of :data:`ECOS_POLICIES`, solved with cvxpy + ECOS in Gavel's problem shape."""

    def __init__(self, name: str) -> None:
        if name not in ECOS_POLICIES:
            raise InvalidProblem(
                f"--lp-solver ecos: policy {name!r} is not solved with ECOS here "
                f"(have: {', '.join(ECOS_POLICIES)})",
                field="policy",
            )
        self.name = name
        self._cp = cvxpy_with_ecos()
        self.last_horizon: float | None = None
        """Min-total-duration: the final ``T`` of the last call (diagnostics, tests)."""
        # Finish-time fairness's state across calls, keyed by job id, as Gavel's policy object
        # keeps it: _cumulative_isolated_time and the previous call's remaining steps and
        # isolated throughputs (numpy scalars of shape (1,), as Gavel's arithmetic makes them).
        self._iso_time: dict[int, Any] = {}
        self._prev_remaining: dict[int, float] = {}
        self._prev_iso: dict[int, Any] = {}

    def allocate(self, view: GavelInputs) -> FloatArray:
        J = int(view.job_ids.size)
        names = view.type_names
        if names is None:
            raise InvalidProblem(
                "--lp-solver ecos builds Gavel's problem by type name: type_names is required",
                field="type_names",
            )
        out = np.zeros((J, len(names)))
        if J == 0 or not names:
            self._prev_remaining, self._prev_iso = {}, {}  # Gavel forgets them on an empty call
            return out  # Gavel's policies return no allocation for no jobs
        # Gavel's row and column order (it flattens dicts by sorted job id and type name).
        rows = np.argsort(view.job_ids, kind="stable")
        cols = np.array(sorted(range(len(names)), key=lambda t: names[t]), dtype=np.int64)
        thr = view.throughputs[np.ix_(rows, cols)]
        cap = [float(view.capacity[t]) for t in cols]
        if not self.name.endswith("_perf"):
            thr = self._agnostic(thr, [names[t] for t in cols.tolist()])
        scale = np.repeat(view.scale_factors[rows].astype(np.float64)[:, None], len(cols), axis=1)
        if self.name.startswith("max_min_fairness"):
            x = self._max_min(thr, scale, view.weights()[rows], cap)
        elif self.name.startswith("min_total_duration"):
            left = view.require("num_steps_remaining", self.name)
            x = self._min_total_duration(thr, scale, left[rows], cap)
        else:
            x = self._finish_time_fairness(
                thr,
                scale,
                view.job_ids[rows].tolist(),
                view.require("num_steps_remaining", self.name)[rows],
                view.require("times_since_start", self.name)[rows],
                cap,
            )
        out[np.ix_(rows, cols)] = np.clip(x, 0.0, 1.0)
        return out

    def _finish_time_fairness(
        self,
        thr: FloatArray,
        scale: FloatArray,
        ids: list[int],
        remaining: FloatArray,
        age: FloatArray,
        cap: list[float],
    ) -> FloatArray:
        cp = self._cp
        J = thr.shape[0]
        isolated = _isolated_split(scale, cap)
        iso = np.sum(thr * isolated, axis=1).reshape((J, 1))
        x = cp.Variable(thr.shape)
        ratios = []
        for i, job in enumerate(ids):
            done = self._iso_time.get(job, 0)
            if job in self._prev_remaining:
                done = done + (self._prev_remaining[job] - remaining[i]) / self._prev_iso[job]
            self._iso_time[job] = done
            rate = cp.sum(cp.multiply(thr[i], x[i]))
            isolated_time = done + (remaining[i] / iso[i])
            allocated_time = age[i] + (remaining[i] * cp.inv_pos(rate))
            ratios.append(allocated_time / isolated_time)
        worst = ratios[0] if J == 1 else cp.maximum(*ratios)
        problem = cp.Problem(cp.Minimize(worst), self._base(x, scale, cap))
        _solve(problem)
        self._prev_remaining = {job: float(remaining[i]) for i, job in enumerate(ids)}
        self._prev_iso = {job: iso[i] for i, job in enumerate(ids)}
        if x.value is None:
            return isolated  # Gavel falls back to its isolated split
        return np.asarray(x.value, dtype=np.float64)

    def _agnostic(self, thr: FloatArray, names: list[str]) -> FloatArray:
        if self.name == "max_min_fairness":
            return np.ones_like(thr)
        if REFERENCE_TYPE not in names:
            raise RuntimeError(
                f"{self.name} uses the {REFERENCE_TYPE!r} throughput on every type (as Gavel "
                f"does) and the cluster has no {REFERENCE_TYPE!r}"
            )
        ref = names.index(REFERENCE_TYPE)
        return np.repeat(thr[:, ref : ref + 1], thr.shape[1], axis=1)

    def _base(self, x: Any, scale: FloatArray, cap: list[float]) -> list[Any]:
        cp = self._cp
        return [
            x >= 0,
            cp.sum(cp.multiply(scale, x), axis=0) <= cap,
            cp.sum(x, axis=1) <= 1,
        ]

    def _max_min(
        self, thr: FloatArray, scale: FloatArray, weights: FloatArray, cap: list[float]
    ) -> FloatArray:
        cp = self._cp
        J = thr.shape[0]
        # Gavel's equal split: cap[t]/J per job, rows normalised to sum 1 (computed in this
        # order, so the coefficients agree with Gavel's to the last bit).
        equal = np.array([[c / J for c in cap] for _ in range(J)])
        equal = equal / np.sum(equal, axis=1).max()
        prop = np.sum(thr * equal, axis=1).reshape((J, 1))
        if float(prop.min()) <= 0.0:
            j = int(np.argmin(prop))
            raise RuntimeError(f"job row {j} has throughput 0 on every type with GPUs")
        norm = (1.0 / weights).reshape((J, 1)) * (1.0 / prop)
        coef = (thr * norm) * scale
        x = cp.Variable(thr.shape)
        problem = cp.Problem(
            cp.Maximize(cp.min(cp.sum(cp.multiply(coef, x), axis=1))), self._base(x, scale, cap)
        )
        _solve(problem)
        if x.value is None:
            raise RuntimeError(f"ECOS returned no point (status {problem.status})")
        return np.asarray(x.value, dtype=np.float64)

    def _feasible(
        self, thr: FloatArray, scale: FloatArray, remaining: FloatArray, cap: list[float], T: float
    ) -> FloatArray | None:
        cp = self._cp
        x = cp.Variable(thr.shape)
        constraints = self._base(x, scale, cap)
        constraints.append(cp.sum(cp.multiply(thr, x), axis=1) >= remaining / T)
        problem = cp.Problem(cp.Maximize(1), constraints)
        _solve(problem)
        if problem.status != "optimal":
            return None
        return np.asarray(x.value, dtype=np.float64)

    def _min_total_duration(
        self, thr: FloatArray, scale: FloatArray, remaining: FloatArray, cap: list[float]
    ) -> FloatArray:
        lo, hi = FIRST_BRACKET
        top = hi
        for _ in range(MAX_BRACKETS):
            found: FloatArray | None = None
            while STOP_RATIO * lo < hi:
                T = (lo + hi) / 2.0
                x = self._feasible(thr, scale, remaining, cap, T)
                if x is not None:
                    found, hi, self.last_horizon = x, T, T
                else:
                    lo = T
            if found is not None:
                return found
            lo, hi, top = top, top * 10.0, top * 10.0
        raise RuntimeError(f"no horizon up to {top:.3g} s is feasible")

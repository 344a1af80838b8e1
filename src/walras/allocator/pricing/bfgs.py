"""Projected BFGS over p ≥ 0 for the start-price samples (no scipy.optimize import).

Minimises a convex f(p) (here g(p)/n of a stride sample) over p ≥ 0 with m ≤ a few dozen
variables, so a dense m × m inverse-Hessian estimate H is cheap:

    free  = {j : p_j > 0 or ∂_j f < 0}          (a price at 0 that f wants lower stays at 0)
    d     = −H_ff ∇_f f,  d_j = 0 off the free set
    p'    = max(p + t d, 0),  s = p' − p,  y = ∇f(p') − ∇f(p)
    H    ← BFGS update with s, y when s·y > 0.

The step length t is chosen by one of two line searches:

- smooth f (``curvature=None``): backtracking t = 1, ½, ¼, … until the Armijo condition
  f(p') ≤ f(p) + 10⁻⁴ ∇f·s holds;
- kinked f (``curvature=c``, e.g. target-priority utilities): the weak Wolfe bracketing search of
  Lewis and Overton ("Nonsmooth optimization via quasi-Newton methods", Math. Programming,
  2013): Armijo as above and ∇f(p')·s ≥ c ∇f·s; t is halved when Armijo fails, doubled
  when the curvature condition fails, and bisected once both bounds are known. The curvature
  condition keeps s·y > 0, so the BFGS update always has information, which Armijo alone
  cannot ensure at a kink (BFGS with this search is what works on non-smooth convex functions).

Without a curvature estimate the first step is −∇f scaled to a tenth of the prices' length;
a caller may pass H from a related problem (a smaller sample) instead. Why not scipy's L-BFGS-B:
importing scipy.optimize costs ~0.3 s of CPU, more than the whole n = 10⁶ solve, and
``walras solve`` is timed as a whole process. The samples only give start prices; the full
problem's certificate does not depend on how they were found. Example: f(p) = (p − 2)² from
p = 0 takes a unit step to p = 1, then the BFGS step (H = s·y / y·y = ½) lands on p = 2.

Called by ``solver._coarse_prices``; ``fun`` may raise to stop (the solver's done signal).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

ARMIJO = 1e-4
HALVINGS = 20
# Trial steps of one weak Wolfe search (halvings and doublings together).
WOLFE_TRIALS = 30


@dataclass
class State:
    """Where the method is: the last accepted point and the inverse-Hessian estimate.

    ``H`` survives a stop (``fun`` raising) so that a caller can start a related problem with
    it: g/n of a larger sample of the same jobs has nearly the same curvature.
    """

    p: FloatArray
    H: FloatArray | None = None


def minimize_nonneg(
    fun: Callable[[FloatArray], tuple[float, FloatArray]],
    state: State,
    max_evals: int,
    *,
    curvature: float | None = None,
) -> None:
    """Projected BFGS from ``state`` for at most ``max_evals`` evaluations, updating it.

    ``curvature`` None: Armijo backtracking (smooth f); a number c in (0, 1): weak Wolfe.
    """
    p = np.maximum(np.asarray(state.p, dtype=np.float64), 0.0)
    state.p = p
    f, grad = fun(p)
    evals = 1
    H = state.H
    while evals < max_evals:
        free = (p > 0.0) | (grad < 0.0)
        if not free.any():
            break
        d = np.zeros_like(p)
        if H is None:
            norm = float(np.linalg.norm(grad[free]))
            if norm == 0.0:
                break
            # First step: a tenth of the prices' length (unit length from p = 0).
            d[free] = -grad[free] / norm * (0.1 * float(np.linalg.norm(p)) or 1.0)
        else:
            d[free] = -(H[np.ix_(free, free)] @ grad[free])
            if float(grad @ d) >= 0.0:  # not a descent direction: restart from the gradient
                H = None
                d[free] = -grad[free] / max(float(np.linalg.norm(grad[free])), 1e-300)
        if curvature is None:
            found = _armijo(fun, p, f, grad, d, max_evals - evals)
        else:
            found = _wolfe(fun, p, f, grad, d, max_evals - evals, curvature)
        if found is None:
            return
        q, f_q, grad_q, used = found
        evals += used
        s, y = q - p, grad_q - grad
        sy = float(s @ y)
        if f_q > f:  # the budget ran out inside the line search
            return
        p, f, grad = q, f_q, grad_q
        state.p = p
        if sy <= 1e-12 * float(np.linalg.norm(s) * np.linalg.norm(y)):
            continue  # no curvature information: keep H
        if H is None:
            H = np.eye(len(p)) * (sy / float(y @ y))
        rho = 1.0 / sy
        V = np.eye(len(p)) - rho * np.outer(s, y)
        H = V @ H @ V.T + rho * np.outer(s, s)
        state.H = H


Point = tuple[FloatArray, float, FloatArray, int]  # p', f(p'), ∇f(p'), evaluations used


def _armijo(
    fun: Callable[[FloatArray], tuple[float, FloatArray]],
    p: FloatArray,
    f: float,
    grad: FloatArray,
    d: FloatArray,
    budget: int,
) -> Point | None:
    """Backtracking from t = 1 to the Armijo condition (the last trial when the budget ends)."""
    t = 1.0
    for used in range(1, HALVINGS + 1):
        q = np.maximum(p + t * d, 0.0)
        f_q, grad_q = fun(q)
        if f_q <= f + ARMIJO * float(grad @ (q - p)) or used >= budget:
            return q, f_q, grad_q, used
        t *= 0.5
    return None


def _wolfe(
    fun: Callable[[FloatArray], tuple[float, FloatArray]],
    p: FloatArray,
    f: float,
    grad: FloatArray,
    d: FloatArray,
    budget: int,
    curvature: float,
) -> Point | None:
    """Weak Wolfe bracketing from t = 1; the best Armijo point when no trial meets both."""
    lo, hi, t = 0.0, math.inf, 1.0
    armijo: Point | None = None
    last: Point | None = None
    for used in range(1, WOLFE_TRIALS + 1):
        q = np.maximum(p + t * d, 0.0)
        f_q, grad_q = fun(q)
        s = q - p
        slope = float(grad @ s)
        last = (q, f_q, grad_q, used)
        if f_q > f + ARMIJO * slope:
            hi = t
        elif float(grad_q @ s) < curvature * slope:
            lo, armijo = t, last
        else:
            return last
        if used >= budget:
            break
        t = 0.5 * (lo + hi) if hi < math.inf else 2.0 * t
    return armijo if armijo is not None else last

"""One LP solved by HiGHS without ``scipy.optimize.linprog``'s set-up, with linprog's result.

Solves ``min c·v  s.t.  row_lower ≤ A v ≤ row_upper,  col_lower ≤ v ≤ col_upper`` (``A`` in
compressed sparse column form) and returns the optimal ``v``, or ``None`` when HiGHS ends without
an optimum. :func:`solve_from` may start from the final basis of an earlier LP of the same shape
(HiGHS's warm start: a few pivots where the LP moved little), and then gives *an* optimum, not
necessarily linprog's (see its docstring).

Why: the planners solve thousands of small LPs per simulated run (Hadar's horizon: two per solve,
1,441 columns on Gavel's D5), where ``linprog``'s Python set-up (input checks, sparse stacking,
a Python loop over every column for the bound multipliers) cost more than HiGHS's own solve.

Same answer to the last bit: this passes HiGHS the model ``linprog(method="highs")`` passes (the
``≤`` rows then the ``=`` rows, one ``(lower, upper)`` pair per row, CSC with sorted row indices,
infinities as HiGHS's) with the options linprog sets (presolve on, dual simplex, no output), to
the HiGHS build bundled with scipy (``scipy.optimize._highspy._core``). HiGHS is deterministic,
so the solution of :func:`solve` is linprog's; ``tests/unit/test_highs_direct.py`` pins that
bit-for-bit. That module is scipy's private binding: where it is missing (another scipy),
:func:`solve` falls back to ``linprog`` with the same model, so the answer stays linprog's, only
slower.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _core() -> Any:
    try:
        from scipy.optimize._highspy import _core as core
    except ImportError:  # another scipy: linprog's path (same model, same answer)
        return None
    needed = ("_Highs", "HighsLp", "HighsOptions", "HighsModelStatus", "MatrixFormat", "kHighsInf")
    return core if all(hasattr(core, name) for name in needed) else None


_CORE: Any = None
_CORE_LOADED = False


class Basis:
    """HiGHS's final basis of one solve (opaque), to start another LP of the same shape from
    (:func:`solve_from`). Never changed after it is taken, so copies share it."""

    __slots__ = ("_basis", "n_cols", "n_rows")

    def __init__(self, n_cols: int, n_rows: int, basis: Any) -> None:
        self.n_cols, self.n_rows, self._basis = n_cols, n_rows, basis

    def __deepcopy__(self, memo: dict[int, object]) -> Basis:
        return self


@dataclass(frozen=True, slots=True)
class Lp:
    """``min cost·v  s.t.  row_lower ≤ A v ≤ row_upper,  col_lower ≤ v ≤ col_upper``.

    ``indptr (n + 1,)``, ``indices``, ``data``: ``A`` column by column, row indices sorted within
    a column; infinite bounds as ``±inf``. Rows are linprog's: ``≤`` rows (lower ``-inf``) first,
    then ``=`` rows (lower = upper); the answer is linprog's for ``A_ub``, ``A_eq`` in that order.
    """

    cost: FloatArray
    indptr: IntArray
    indices: IntArray
    data: FloatArray
    row_lower: FloatArray
    row_upper: FloatArray
    col_lower: FloatArray
    col_upper: FloatArray

    def __post_init__(self) -> None:
        if not ((self.row_lower == self.row_upper) | np.isneginf(self.row_lower)).all():
            raise ValueError("highs.Lp: every row must be a ≤ row (lower -inf) or an = row")


def solve(lp: Lp) -> FloatArray | None:
    """Optimal ``v`` of ``lp``, ``None`` when HiGHS finds no optimum (linprog's answer)."""
    return solve_from(None, lp)[0]


def solve_from(start: Basis | None, lp: Lp) -> tuple[FloatArray | None, Basis | None]:
    """:func:`solve`, started from ``start`` (the final basis of an LP with as many rows and
    columns; ignored otherwise), and the final basis (``None`` without an optimum, or on the
    linprog fallback, which cannot start from a basis).

    A started solve is *not* linprog's to the last bit: HiGHS skips presolve and pivots from
    ``start``, and where the LP has several optima it may end at another one (of the same
    objective value, to HiGHS's tolerances)."""
    global _CORE, _CORE_LOADED
    if not _CORE_LOADED:
        _CORE, _CORE_LOADED = _core(), True
    n_cols, n_rows = lp.cost.shape[0], lp.row_lower.shape[0]
    if _CORE is None:
        return _with_linprog(lp), None
    h = _CORE
    inf = float(h.kHighsInf)
    model = h.HighsLp()
    model.num_col_ = n_cols
    model.num_row_ = n_rows
    model.a_matrix_.num_col_ = n_cols
    model.a_matrix_.num_row_ = n_rows
    model.a_matrix_.format_ = h.MatrixFormat.kColwise
    model.col_cost_ = np.ascontiguousarray(lp.cost, dtype=np.float64)
    model.col_lower_ = _finite(lp.col_lower, inf)
    model.col_upper_ = _finite(lp.col_upper, inf)
    model.row_lower_ = _finite(lp.row_lower, inf)
    model.row_upper_ = _finite(lp.row_upper, inf)
    model.a_matrix_.start_ = np.ascontiguousarray(lp.indptr, dtype=np.int32)
    model.a_matrix_.index_ = np.ascontiguousarray(lp.indices, dtype=np.int32)
    model.a_matrix_.value_ = np.ascontiguousarray(lp.data, dtype=np.float64)
    highs = h._Highs()
    options = h.HighsOptions()
    # linprog(method="highs")'s options: presolve on, dual simplex, debug and output off.
    options.presolve = "on"
    options.simplex_strategy = 1  # kSimplexStrategyDual
    options.highs_debug_level = 0  # kHighsDebugLevelNone
    options.output_flag = False
    options.log_to_console = False
    highs.passOptions(options)
    if highs.passModel(model) == h.HighsStatus.kError:
        return None, None
    if start is not None and (start.n_cols, start.n_rows) == (n_cols, n_rows):
        highs.setBasis(start._basis)
    if highs.run() == h.HighsStatus.kError:
        return None, None
    if highs.getModelStatus() != h.HighsModelStatus.kOptimal:
        return None, None
    x = np.array(highs.getSolution().col_value, dtype=np.float64)
    return x, Basis(n_cols, n_rows, highs.getBasis())


def _finite(x: FloatArray, inf: float) -> FloatArray:
    """``±inf`` as HiGHS's infinity (what linprog passes)."""
    out = np.array(x, dtype=np.float64)
    out[np.isinf(out)] = np.sign(out[np.isinf(out)]) * inf
    return out


def _with_linprog(lp: Lp) -> FloatArray | None:
    """The same LP through ``linprog``: the ``≤`` rows as ``A_ub``, the ``=`` rows as ``A_eq``."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    shape = (lp.row_lower.shape[0], lp.cost.shape[0])
    a = sp.csc_matrix((lp.data, lp.indices, lp.indptr), shape=shape).tocsr()
    eq = np.flatnonzero(lp.row_lower == lp.row_upper)
    ub = np.flatnonzero(lp.row_lower != lp.row_upper)
    res = linprog(
        lp.cost,
        A_ub=a[ub] if ub.size else None,
        b_ub=lp.row_upper[ub] if ub.size else None,
        A_eq=a[eq] if eq.size else None,
        b_eq=lp.row_upper[eq] if eq.size else None,
        bounds=np.stack([lp.col_lower, lp.col_upper], axis=1),
        method="highs",
    )
    if res.status != 0 or res.x is None:
        return None
    return np.asarray(res.x, dtype=np.float64)

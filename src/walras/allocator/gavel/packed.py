"""Gavel's max-min fairness with space sharing (``max_min_fairness_packed``), as one HiGHS LP.

Gavel's ``MaxMinFairnessPolicyWithPacking.get_allocation`` (the policy of the POP paper's headline
experiment, 2,048 jobs on 1,536 GPUs) lets two jobs share a GPU. Its combinations ``c`` are the
single jobs and every pair ``{i, j}`` of jobs with the same scale factor; ``x[c, t]`` is the time
share of combination ``c`` on type ``t``. A job ``j`` in combination ``c`` runs at
``thr_j(c, t)`` (its isolated throughput when alone, its co-located one in a pair)::

    maximise   s
    subject to Σ_{c ∋ j} Σ_t a[j, c, t] · x[c, t] ≥ s      every job j
               Σ_{c ∋ j} Σ_t x[c, t] ≤ 1                   every job j (one combination at a time)
               Σ_c k[c] · x[c, t] ≤ cap[t]                  every type t (a pair holds k GPUs once)
               x ≥ 0

with ``a[j, c, t] = thr_j(c, t) · k[j] / (w[j] · prop[j])`` exactly as in
:mod:`.max_min_fairness` (``prop[j]``: job ``j``'s isolated throughput under the equal split
``cap / Σ cap``; ``w`` the priority weights). Pairs make the LP ``O(J²·T)`` in size, super-linear
in the cluster, which is why POP (``walras.allocator.pop.packed_pop``) pays off here: ``k``
shards hold ``1/k`` of the pairs between them.

Worked example (derived by hand; the unit tests check it): one type with one GPU, two 1-GPU jobs
of isolated throughput 1 (so ``prop = 1``). Alone they time-share: ``s* = 1/2``. If co-located
each runs at 0.8, the pair all the time gives ``s* = 0.8`` (with pair share ``p`` and single
shares ``q`` each, ``p + 2q ≤ 1`` and the value ``0.8 p + q`` is largest at ``q = 0``). At 0.4
each, pairing loses to time-sharing and ``s* = 1/2`` again.

HiGHS returns a vertex of the optimal face; Gavel's MOSEK/ECOS return an interior point. The
optimal value ``s*`` is the same; per-job throughputs above ``s*`` may differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.optimize as opt
import scipy.sparse as sp

from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel.inputs import FloatArray, GavelInputs, IntArray
from walras.allocator.gavel.lp import FEASIBLE, SolverError
from walras.allocator.gavel.max_min_fairness import proportional_throughputs

METHOD = "highs-ipm"
"""HiGHS's interior-point method (with its crossover to a vertex): measured on the benchmark's
256-job instance (32,640 pairs), 2.7 s against 4.6 s for dual simplex and 4.3 s for scipy's
default choice. Gavel and the POP paper solve this LP with interior-point solvers too (ECOS,
MOSEK)."""


@dataclass(frozen=True, slots=True)
class PackedInputs:
    """The jobs (``base``: isolated throughputs, scale factors, capacity, ids, weights) and the
    pairs that may share a GPU.

    Attributes:
        pairs: ``(P, 2)`` row indices ``i < j`` of ``base`` (same scale factor), no repeats.
        pair_throughputs: ``(P, T, 2)``: ``[p, t, m]`` is the throughput of member ``m`` of pair
            ``p`` on type ``t`` when the two share a GPU (Gavel's ``[type][a][b]`` list).
    """

    base: GavelInputs
    pairs: IntArray
    pair_throughputs: FloatArray

    def __post_init__(self) -> None:
        J, T = self.base.n_jobs, self.base.n_types
        pairs = np.asarray(self.pairs, dtype=np.int64).reshape(-1, 2)
        thr = np.asarray(self.pair_throughputs, dtype=np.float64)
        if thr.shape != (len(pairs), T, 2):
            raise InvalidProblem(
                f"pair_throughputs has shape {thr.shape}, expected ({len(pairs)}, {T}, 2)",
                field="pair_throughputs",
            )
        bad = ~np.isfinite(thr) | (thr < 0.0)
        if bad.any():
            p = int(np.argwhere(bad)[0][0])
            raise InvalidProblem(
                f"pair {p}: pair_throughputs must be finite and >= 0",
                field="pair_throughputs",
                index=p,
            )
        wrong = (pairs[:, 0] < 0) | (pairs[:, 1] >= J) | (pairs[:, 0] >= pairs[:, 1])
        if wrong.any():
            p = int(np.argmax(wrong))
            raise InvalidProblem(
                f"pair {p}: rows {pairs[p].tolist()} must satisfy 0 <= i < j < {J}",
                field="pairs",
                index=p,
            )
        k = self.base.scale_factors
        mixed = k[pairs[:, 0]] != k[pairs[:, 1]]
        if mixed.any():
            p = int(np.argmax(mixed))
            raise InvalidProblem(
                f"pair {p}: jobs {self.base.job_ids[pairs[p]].tolist()} have different scale "
                "factors (Gavel pairs only equal gangs)",
                field="pairs",
                index=p,
            )
        key = pairs[:, 0] * max(J, 1) + pairs[:, 1]
        if np.unique(key).size != len(key):
            raise InvalidProblem("a pair appears more than once", field="pairs")
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "pair_throughputs", thr)

    @property
    def n_pairs(self) -> int:
        return int(self.pairs.shape[0])


@dataclass(frozen=True, slots=True)
class PackedAllocation:
    """Time shares: ``single[j, t]`` of job ``j`` alone, ``pair[p, t]`` of pair ``p`` together;
    ``value`` is the LP's ``s*`` (the smallest normalised throughput)."""

    single: FloatArray
    pair: FloatArray
    value: float


def all_pairs(
    job_types: IntArray,
    scale_factors: IntArray,
    single_table: FloatArray,
    pair_table: FloatArray,
) -> tuple[IntArray, FloatArray]:
    """Gavel's pair set from per-job-type tables: every ``i < j`` with equal scale factors.

    ``single_table[a, t]`` is job type ``a``'s isolated throughput (unused here but checked
    against ``pair_table``'s shape), ``pair_table[a, b, t]`` is ``(thr of a, thr of b)`` when
    ``a`` shares a type-``t`` GPU with ``b``, shape ``(A, A, T, 2)``. Returns ``(pairs,
    pair_throughputs)`` for :class:`PackedInputs`.
    """
    A, T = single_table.shape
    if pair_table.shape != (A, A, T, 2):
        raise InvalidProblem(
            f"pair_table has shape {pair_table.shape}, expected ({A}, {A}, {T}, 2)",
            field="pair_table",
        )
    kinds = np.asarray(job_types, dtype=np.int64)
    i, j = np.triu_indices(len(kinds), 1)
    same = np.asarray(scale_factors)[i] == np.asarray(scale_factors)[j]
    i, j = i[same], j[same]
    pairs = np.stack([i, j], axis=1).astype(np.int64)
    return pairs, np.asarray(pair_table[kinds[i], kinds[j]], dtype=np.float64)


def restrict(inputs: PackedInputs, rows: IntArray, capacity: FloatArray) -> PackedInputs:
    """The sub-problem of jobs ``rows`` (ascending) with ``capacity``: only pairs with both
    members inside survive (POP drops pairs across shards, as the POP paper's harness does)."""
    b = inputs.base
    new = np.full(b.n_jobs, -1, dtype=np.int64)
    new[rows] = np.arange(len(rows))
    mapped = new[inputs.pairs]
    keep = (mapped >= 0).all(axis=1)
    sub = GavelInputs(
        throughputs=b.throughputs[rows],
        scale_factors=b.scale_factors[rows],
        capacity=capacity,
        job_ids=b.job_ids[rows],
        priority_weights=None if b.priority_weights is None else b.priority_weights[rows],
        type_names=b.type_names,
    )
    return PackedInputs(sub, mapped[keep], inputs.pair_throughputs[keep])


def allocate(inputs: PackedInputs) -> PackedAllocation:
    """Solve the LP of the module docstring with HiGHS; the answer is clipped and made exactly
    feasible (:func:`finish`)."""
    b = inputs.base
    J, T, P = b.n_jobs, b.n_types, inputs.n_pairs
    if J == 0 or T == 0:
        return PackedAllocation(np.zeros((J, T)), np.zeros((P, T)), float("inf"))
    scale = _job_scale(b)
    k = b.scale_factors.astype(np.float64)
    pairs = inputs.pairs
    n_single, n_pair = J * T, P * T
    n_var = n_single + n_pair + 1
    # Column indices: x_single[j, t] at j·T + t, x_pair[p, t] at J·T + p·T + t, s last.
    cs = np.arange(n_single)
    js = cs // T
    cp = n_single + np.arange(n_pair)
    pp = np.repeat(np.arange(P), T)
    tp = np.tile(np.arange(T), P)
    members = pairs[pp]  # (P·T, 2): the two jobs of each pair column
    a_pair = inputs.pair_throughputs.reshape(n_pair, 2) * scale[members]
    # Row blocks: J epigraph rows (s − value ≤ 0), J time rows (≤ 1), T capacity rows.
    rows = np.concatenate(
        [
            js, members[:, 0], members[:, 1], np.arange(J),  # epigraph
            J + js, J + members[:, 0], J + members[:, 1],  # time
            2 * J + cs % T, 2 * J + tp,  # capacity
        ]
    )  # fmt: skip
    cols = np.concatenate([cs, cp, cp, np.full(J, n_var - 1), cs, cp, cp, cs, cp])
    vals = np.concatenate(
        [
            -(b.throughputs * scale[:, None]).ravel(), -a_pair[:, 0], -a_pair[:, 1], np.ones(J),
            np.ones(n_single), np.ones(n_pair), np.ones(n_pair),
            np.repeat(k, T), k[members[:, 0]],
        ]
    )  # fmt: skip
    A = sp.csr_matrix((vals, (rows, cols)), shape=(2 * J + T, n_var))
    rhs = np.concatenate([np.zeros(J), np.ones(J), b.capacity])
    c = np.zeros(n_var)
    c[-1] = -1.0
    res = opt.linprog(c, A_ub=A, b_ub=rhs, bounds=(0.0, None), method=METHOD)
    if res.status != FEASIBLE:  # x = 0, s = 0 is always feasible: only numerical trouble
        raise SolverError(f"packed max-min LP: HiGHS status {res.status}: {res.message}")
    v = np.asarray(res.x, dtype=np.float64)
    single, pair = finish(inputs, v[:n_single].reshape(J, T), v[n_single:-1].reshape(P, T))
    return PackedAllocation(single, pair, float(v[-1]))


def finish(
    inputs: PackedInputs, single: FloatArray, pair: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Clip to ``[0, 1]`` and scale away solver-tolerance overshoot (≈1e-9), so the shares are
    feasible exactly (POP's merge and the tests rely on it).

    A job over its time budget by factor ``f_j > 1`` scales its singles by ``1/f_j``; a pair by
    the smaller factor of its two members (it only ever shrinks, so no job goes over again);
    then a type over capacity scales its whole column down.
    """
    b = inputs.base
    single = np.clip(single, 0.0, 1.0) + 0.0  # + 0.0 turns clipping's -0.0 into 0.0
    pair = np.clip(pair, 0.0, 1.0) + 0.0
    f = np.minimum(1.0, 1.0 / np.maximum(time_used(inputs, single, pair), 1e-300))
    single *= f[:, None]
    if inputs.n_pairs:
        pair *= f[inputs.pairs].min(axis=1)[:, None]
    used = gpus_used(inputs, single, pair)
    col = np.where(used > b.capacity, b.capacity / np.where(used > 0.0, used, 1.0), 1.0)
    return single * col[None, :], pair * col[None, :]


def time_used(inputs: PackedInputs, single: FloatArray, pair: FloatArray) -> FloatArray:
    """``(J,)``: each job's total time share, alone and in pairs."""
    out = single.sum(axis=1)
    per_pair = pair.sum(axis=1)
    for m in (0, 1):
        out = out + np.bincount(inputs.pairs[:, m], per_pair, minlength=len(out))
    return np.asarray(out, dtype=np.float64)


def gpus_used(inputs: PackedInputs, single: FloatArray, pair: FloatArray) -> FloatArray:
    """``(T,)``: GPUs of each type held (a pair holds its gang once)."""
    k = inputs.base.scale_factors.astype(np.float64)
    pair_k = k[inputs.pairs[:, 0]] if inputs.n_pairs else np.zeros(0)
    return np.asarray(k @ single + pair_k @ pair, dtype=np.float64)


def effective_throughputs(inputs: PackedInputs, single: FloatArray, pair: FloatArray) -> FloatArray:
    """``(J,)``: each job's steps/s, ``Σ_t thr[j, t] x[j, t]`` plus its share in every pair."""
    out = (inputs.base.throughputs * single).sum(axis=1)
    for m in (0, 1):
        got = (inputs.pair_throughputs[:, :, m] * pair).sum(axis=1)
        out = out + np.bincount(inputs.pairs[:, m], got, minlength=len(out))
    return np.asarray(out, dtype=np.float64)


def normalised(inputs: PackedInputs, single: FloatArray, pair: FloatArray) -> FloatArray:
    """``(J,)``: the LP's per-job value, effective throughput times ``k / (w · prop)``."""
    return effective_throughputs(inputs, single, pair) * _job_scale(inputs.base)


def _job_scale(b: GavelInputs) -> FloatArray:
    """``k[j] / (w[j] · prop[j])``, the factor turning steps/s into the LP's normalised value."""
    prop = proportional_throughputs(b.throughputs, b.capacity)
    if b.n_jobs and float(b.capacity.sum()) > 0.0 and float(prop.min()) <= 0.0:
        j = int(np.argmin(prop))
        raise InvalidProblem(
            f"job {b.job_ids[j]}: isolated throughput is 0 on every type with GPUs, so Gavel's "
            "normalisation divides by 0",
            field="throughputs",
            index=j,
        )
    return np.asarray(
        b.scale_factors / (b.weights() * np.where(prop > 0.0, prop, 1.0)), dtype=np.float64
    )

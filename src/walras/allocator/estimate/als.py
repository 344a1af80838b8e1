"""Weighted low-rank fit of log-throughputs by alternating least squares (ridge regularised).

Model, for job ``j`` and GPU type ``t`` (``L = log T`` where ``T`` is known, weight ``w > 0``)::

    L[j, t] ≈ a_j + b_t + u_j · v_t          (u_j, v_t ∈ R^r)

minimising, over ``a, b, U, V`` and the per-group means ``ā_g, ū_g``::

    F = Σ_{(j,t) known} w_jt (L_jt − a_j − b_t − u_j·v_t)²
        + λ Σ_j |u_j − ū_g(j)|² + λ Σ_g |ū_g|² + λ Σ_t |v_t|² + γ Σ_{j in a group} (a_j − ā_g(j))²

``a_j`` is the job's speed and ``b_t`` the type's speed-up (``T = e^{a_j} · e^{b_t}`` when
``r = 0``: one number per job times one per type, a rank-1 matrix of throughputs); ``u_j·v_t``
lets types favour some jobs more than others (a V100 helps a transformer more than an RL agent).
The ridge ``λ`` pulls a job's interaction towards its group's (0 without a group): a job known on
one type only gets its group's interaction, not an arbitrary one. ``γ`` counts the group's mean
speed as ``γ`` pseudo-observations of ``a_j`` (jobs with the same profile run at similar speeds).
The ``λ|ū_g|²`` term matters: without it a group whose members share one ``u`` pays no ridge on
``u`` at all, and ``(u, v) → (cu, v/c)`` lowers ``F`` for ever (ALS drifts and never converges).
For the other blocks fixed, ``ū_g = Σ_{j∈g} u_j / (|g| + 1)`` and ``ā_g`` = mean of ``a_j`` over
the group minimise ``F``, so every step below is an exact block minimisation and ``F`` never
increases.

Steps:

1. **Additive start** (closed form): ``r = 0`` makes ``F`` a linear least-squares problem in
   ``(a, b, ā)``; ``scipy.sparse.linalg.lsqr`` solves it (min-norm, so the gauge ``a + c, b − c``
   is fixed). For ``r = 0`` this *is* the answer: exact when the data are exactly additive and the
   known entries connect every job and type (the bipartite graph is connected).
2. **Alternate** (``r ≥ 1``), starting from ``V`` = the top-``r`` right singular vectors of the
   additive residuals (scaled by √σ; known entries only, zeros elsewhere):
   rows and group means jointly: ``(a_j, u_j)`` and ``(ā_g, ū_g)`` minimising ``F`` for ``b, V``
   fixed (a ``(r+1)×(r+1)`` solve per job and per group, closed form in :func:`_rows`);
   columns: ``(b_t, v_t) = argmin Σ_j w (L − a_j − b_t − u_j·v_t)² + λ|v_t|²``.
   All batched with numpy. Stop when no fitted ``L`` moves by more than ``tol`` in a sweep.

Why hand-written: scipy has no matrix completion; scikit-learn is not a dependency and its
``IterativeImputer`` does not fit a shared low-rank model; ``fancyimpute`` is unmaintained; the
model above (biases, weights, group priors, ``n × 3..10`` matrices) is ~100 lines of numpy.

Worked example (``r = 0``): jobs x, y; types k80, v100; known ``T = [[1, 4], [2, ?]]``. Then
``a_x + b_k80 = 0``, ``a_x + b_v100 = log 4``, ``a_y + b_k80 = log 2``, so the missing
``a_y + b_v100 = log 2 + log 4 − 0 = log 8``: y is twice as fast as x on a K80, so on a V100 too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse
import scipy.sparse.linalg

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class LogFit:
    """Fitted parameters (see the module docstring); rows/columns without data are zero.

    ``group_a``/``group_u``: ``ā_g``, ``ū_g`` (zero for a group with no job that has data).
    """

    a: FloatArray
    b: FloatArray
    u: FloatArray
    v: FloatArray
    group_a: FloatArray
    group_u: FloatArray
    row_known: BoolArray
    col_known: BoolArray
    group_known: BoolArray
    iterations: int
    converged: bool

    def predict(self) -> FloatArray:
        """``a_j + b_t + u_j · v_t`` for every entry (meaningful where row and column have data)."""
        out: FloatArray = self.a[:, None] + self.b[None, :] + self.u @ self.v.T
        return out


def fit(
    logs: FloatArray,
    weights: FloatArray,
    group: IntArray,
    n_groups: int,
    *,
    rank: int,
    ridge: float,
    group_weight: float,
    max_iter: int,
    tol: float,
) -> LogFit:
    """Fit the model to ``logs`` where ``weights > 0`` (other entries of ``logs`` are ignored).

    ``group[j]``: the group index of job ``j`` in ``0..n_groups-1``, or −1 for none.
    """
    n, m = logs.shape
    w = np.where(weights > 0, weights, 0.0)
    y = np.where(w > 0, logs, 0.0)
    row_known: BoolArray = np.asarray((w > 0).any(axis=1))
    col_known: BoolArray = np.asarray((w > 0).any(axis=0))
    grouped = (group >= 0) & row_known
    group_known = np.zeros(n_groups, dtype=bool)
    group_known[group[grouped]] = True
    gamma = np.where(grouped, group_weight, 0.0)

    a, b, group_a = _additive(y, w, group, n_groups, gamma)
    u = np.zeros((n, rank))
    v = np.zeros((m, rank))
    group_u = np.zeros((n_groups, rank))
    iterations, converged = 0, True
    if rank > 0 and row_known.any():
        resid = np.where(w > 0, y - a[:, None] - b[None, :], 0.0)
        _, sigma, vt = np.linalg.svd(resid, full_matrices=False)
        k = min(rank, len(sigma))
        v[:, :k] = vt[:k].T * np.sqrt(sigma[:k])
        prev = a[:, None] + b[None, :]
        converged = False
        for iterations in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
            a, u, group_a, group_u = _rows(
                y, w, b, v, gamma, group, grouped, n_groups, ridge, row_known
            )
            b, v = _cols(y, w, a, u, ridge, col_known)
            pred = a[:, None] + b[None, :] + u @ v.T
            mask = row_known[:, None] & col_known[None, :]
            step = float(np.max(np.abs(pred - prev)[mask], initial=0.0))
            prev = pred
            if step <= tol:
                converged = True
                break
    # ā_g as a plain mean: equal to the optimum when γ > 0, and still the group's typical speed
    # (what a job with no data of its own borrows) when γ = 0.
    count = np.bincount(group[grouped], minlength=n_groups).astype(np.float64)
    total = np.bincount(group[grouped], weights=a[grouped], minlength=n_groups)
    group_a = total.astype(np.float64) / np.maximum(count, 1.0)
    return LogFit(
        a=a,
        b=b,
        u=u,
        v=v,
        group_a=group_a,
        group_u=group_u,
        row_known=row_known,
        col_known=col_known,
        group_known=group_known,
        iterations=iterations,
        converged=converged,
    )


def _additive(
    y: FloatArray, w: FloatArray, group: IntArray, n_groups: int, gamma: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Step 1: weighted least squares for ``(a, b, ā)`` with ``u = v = 0`` (min-norm, lsqr)."""
    n, m = y.shape
    jj, tt = np.nonzero(w > 0)
    if len(jj) == 0:
        return np.zeros(n), np.zeros(m), np.zeros(n_groups)
    sw = np.sqrt(w[jj, tt])
    k = len(jj)
    rows = [np.arange(k), np.arange(k)]
    cols = [jj, n + tt]
    data = [sw, sw]
    rhs = [sw * y[jj, tt]]
    gj = np.nonzero(gamma > 0)[0]
    if len(gj):
        sg = np.sqrt(gamma[gj])
        extra = k + np.arange(len(gj))
        rows += [extra, extra]
        cols += [gj, n + m + group[gj]]
        data += [sg, -sg]
        rhs.append(np.zeros(len(gj)))
    size = n + m + n_groups
    design = scipy.sparse.csr_matrix(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))),
        shape=(k + len(gj), size),
    )
    # atol/btol at the limit of float64: the answer should be exact to solver precision for
    # consistent (exactly additive) data; iter_lim well above lsqr's need for these small sizes.
    x = scipy.sparse.linalg.lsqr(
        design, np.concatenate(rhs), atol=1e-15, btol=1e-15, conlim=1e12, iter_lim=20 * size
    )[0]
    return x[:n].copy(), x[n : n + m].copy(), x[n + m :].copy()


def _ridge_solve(gram: FloatArray, rhs: FloatArray) -> FloatArray:
    out = np.linalg.solve(gram, rhs[..., None])[..., 0]
    return np.asarray(out, dtype=np.float64)


def _rows(
    y: FloatArray,
    w: FloatArray,
    b: FloatArray,
    v: FloatArray,
    gamma: FloatArray,
    group: IntArray,
    grouped: BoolArray,
    n_groups: int,
    ridge: float,
    known: BoolArray,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Row block, jointly with the group means: ``(a_j, u_j)`` and ``(ā_g, ū_g)``.

    With ``x_j = (a_j, u_j)``, ``x̄_g = (ā_g, ū_g)``, ``G_j = Σ_t w [1, v_t][1, v_t]ᵀ``,
    ``h_j = Σ_t w (L − b_t) [1, v_t]``, prior ``P_j = diag(γ_j, λ, …, λ)`` and
    ``Q = diag(0, λ, …, λ)`` (the ``λ|ū_g|²`` term): for fixed ``x̄`` each job's optimum is
    ``x_j = M_j (h_j + P_j x̄)`` with ``M_j = (G_j + P_j)⁻¹``; substituting it, ``x̄_g`` solves
    ``[Σ_{j∈g} (P_j − P_j M_j P_j) + Q] x̄_g = Σ_{j∈g} P_j M_j h_j``. Solving both at once (instead
    of alternating jobs and means) keeps the sweep count that of the ungrouped problem.
    """
    n = len(gamma)
    r = v.shape[1]
    x = np.concatenate([np.ones((len(b), 1)), v], axis=1)  # (m, r+1): [1, v_t]
    a, u = np.zeros(n), np.zeros((n, r))
    group_a, group_u = np.zeros(n_groups), np.zeros((n_groups, r))
    if not known.any():
        return a, u, group_a, group_u
    wk = w[known]
    gram = np.einsum("jt,tp,tq->jpq", wk, x, x)
    rhs = np.einsum("jt,tp->jp", wk * (y[known] - b[None, :]), x)
    prior = np.concatenate([gamma[known][:, None], np.full((len(wk), r), ridge)], axis=1)
    idx = np.arange(r + 1)
    gram[:, idx, idx] += prior
    inv = np.linalg.inv(gram)  # (k, r+1, r+1); positive definite: see the module docstring
    mh = np.einsum("jpq,jq->jp", inv, rhs)
    means = np.zeros((n_groups, r + 1))
    gk = grouped[known]
    if n_groups and gk.any():
        g = group[known][gk]
        pk, ik = prior[gk], inv[gk]
        lhs = np.zeros((n_groups, r + 1, r + 1))
        lhs[:, idx[1:], idx[1:]] += ridge
        contrib = -pk[:, :, None] * ik * pk[:, None, :]
        contrib[:, idx, idx] += pk
        np.add.at(lhs, g, contrib)
        right = np.zeros((n_groups, r + 1))
        np.add.at(right, g, pk * mh[gk])
        # A group whose γ is 0 has a zero (ā, ā) entry: pinv gives ā = 0, which no job reads.
        means = np.einsum("gpq,gq->gp", np.linalg.pinv(lhs), right)
    prior_x = np.zeros((len(wk), r + 1))
    prior_x[gk] = means[group[known][gk]]
    sol = np.einsum("jpq,jq->jp", inv, rhs + prior * prior_x)
    a[known], u[known] = sol[:, 0], sol[:, 1:]
    return a, u, means[:, 0].copy(), means[:, 1:].copy()


def _cols(
    y: FloatArray, w: FloatArray, a: FloatArray, u: FloatArray, ridge: float, known: BoolArray
) -> tuple[FloatArray, FloatArray]:
    """Column block: ``(b_t, v_t)`` for every type with data, in one batched solve."""
    m = w.shape[1]
    r = u.shape[1]
    z = np.concatenate([np.ones((len(a), 1)), u], axis=1)  # (n, r+1): [1, u_j]
    gram = np.einsum("jt,jp,jq->tpq", w, z, z)
    rhs = np.einsum("jt,jp->tp", w * (y - a[:, None]), z)
    idx = np.arange(1, r + 1)
    gram[:, idx, idx] += ridge
    b, v = np.zeros(m), np.zeros((m, r))
    if known.any():
        sol = _ridge_solve(gram[known], rhs[known])
        b[known], v[known] = sol[:, 0], sol[:, 1:]
    return b, v

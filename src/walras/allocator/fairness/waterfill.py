"""The PS-DSF server procedure on one node, as an exact water-fill (docs/algorithms.md#ps-dsf).

Fix node ``i``. For each tenant ``n`` eligible there, let ``b_n ≥ 0`` be its tasks on *other*
nodes, ``γ_n`` its monopoly tasks here, ``φ_n`` its weight and ``u_n = max(0, D_n − b_n)`` the
room left under its demand cap. Raising a level ``ℓ ≥ 0`` gives

    x_n(ℓ) = clip(ℓ φ_n γ_n − b_n, 0, u_n),     so that the VDS  (b_n + x_n) / (φ_n γ_n) = ℓ

for every tenant strictly inside its range.

- **TDM** (node time-shared): stop at the largest ``ℓ`` with ``Σ_n x_n(ℓ)/γ_n ≤ 1``. The
  used time is piecewise linear in ``ℓ`` with break points ``b_n/(φ_nγ_n)`` (slope ``+φ_n``) and
  ``(b_n+u_n)/(φ_nγ_n)`` (slope ``−φ_n``), so one sort and one cumulative sum find ``ℓ`` exactly
  (no bisection). This is the exact maximiser of ``Σ φ_n log(b_n + x_n)`` over the node's block,
  so repeating it node by node is block-coordinate ascent on the Eisenberg–Gale program.
- **RDM** (resources divisible): progressive filling. Resource ``r``'s use
  ``Σ_n d_{n,r} x_n(ℓ)`` is piecewise linear with the same break points; the first resource to
  reach capacity freezes every unfrozen tenant that demands it (that resource is their
  bottleneck); filling continues for the others. At most ``M`` rounds of one sort each.

Worked example (TDM): one node, two tenants with ``γ = (10, 20)``, ``φ = (1, 1)``, ``b = (0, 0)``:
used time ``= ℓ + ℓ = 1`` at ``ℓ = 1/2``, so ``x = (5, 10)`` and each gets half the node's time.

Called by ``fairness.solver`` (every Gauss–Seidel step) and ``fairness.distributed.node_update``
(one node agent's step). Both work on the node's eligible tenants only (arrays of length ``U``).
"""

from __future__ import annotations

import numpy as np

from walras.allocator.fairness.problem import FloatArray, IntArray


def _breakpoints(
    gamma: FloatArray, phi: FloatArray, b: FloatArray, upper: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Levels where each tenant starts (``lo``) and stops at its cap (``hi``, may be inf)."""
    rate = phi * gamma
    lo = b / rate
    with np.errstate(invalid="ignore"):
        hi = (b + upper) / rate  # inf + finite is inf: uncapped tenants never stop
    return lo, hi


def _first_crossing(
    pos: FloatArray, delta: FloatArray, base: float, target: FloatArray
) -> FloatArray:
    """Smallest ``ℓ`` where ``base + Σ slope·length`` reaches each column's ``target``.

    ``pos`` (E,) are sorted, finite event levels, ``delta`` (E, C) the slope change at each
    event for each of ``C`` columns (the curve is ``base`` below ``pos[0]``). Returns
    ``(C,)`` levels, ``inf`` where a column never reaches its target.
    """
    slope = np.cumsum(delta, axis=0)  # slope just after each event
    # Value of each curve at each event: `base` at the first, then accumulate slope × gap.
    value = np.empty_like(slope)
    value[0] = base
    if len(pos) > 1:
        value[1:] = base + np.cumsum(slope[:-1] * np.diff(pos)[:, None], axis=0)
    need = target[None, :] - value
    reached = need <= 0
    cols = np.arange(delta.shape[1])
    hit = reached.any(axis=0)
    k = np.where(hit, np.argmax(reached, axis=0), len(pos))
    # Before the first event the curve is flat at `base`; after event k-1 it rises with
    # slope[k-1] > 0 (it rose to reach the target) until event k.
    prev = np.maximum(k - 1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = pos[prev] + need[prev, cols] / slope[prev, cols]
    out = np.where(k == 0, pos[0], out)
    out = np.where(~hit & ~(slope[-1] > 0), np.inf, out)
    return out


def _tdm_fill_uncapped(
    gamma: FloatArray, phi: FloatArray, b: FloatArray
) -> tuple[FloatArray, float]:
    """:func:`tdm_fill` without caps: the hot path of every sweep, kept to a dozen numpy calls.

    With start levels ``lo`` sorted, the used time at ``lo_k`` is ``lo_k·Φ_k − S_k`` where
    ``Φ_k = Σ_{j≤k} φ_j`` and ``S_k = Σ_{j≤k} φ_j lo_j``; past the last start below the answer the
    curve is ``ℓ·Φ_k − S_k``, so ``ℓ = (1 + S_k)/Φ_k``.
    """
    rate = phi * gamma
    lo = b / rate
    order = np.argsort(lo)
    lo_s = lo[order]
    cum_phi = np.cumsum(phi[order])
    cum_s = np.cumsum(phi[order] * lo_s)
    k = int(np.count_nonzero(lo_s * cum_phi - cum_s < 1.0)) - 1
    level = float((1.0 + cum_s[k]) / cum_phi[k])
    x = level * rate - b
    np.maximum(x, 0.0, out=x)
    return x, level


def tdm_fill(
    gamma: FloatArray, phi: FloatArray, b: FloatArray, upper: FloatArray
) -> tuple[FloatArray, float]:
    """TDM water-fill on one node. Returns ``(x, level)``; ``level`` is inf if all caps fit.

    Args:
        gamma: ``(U,)`` monopoly tasks, all ``> 0``.
        phi: ``(U,)`` weights ``> 0``.
        b: ``(U,)`` tasks elsewhere, ``≥ 0``.
        upper: ``(U,)`` room under the cap, ``≥ 0`` (``inf`` if uncapped).
    """
    if len(gamma) == 0:
        return np.zeros(0), float("inf")
    if np.isinf(upper).all():
        return _tdm_fill_uncapped(gamma, phi, b)
    x = np.zeros_like(gamma)
    live = upper > 0
    if not live.any():
        return x, float("inf")
    if np.sum(upper[live] / gamma[live]) <= 1.0:
        x[live] = upper[live]
        return x, float("inf")
    g, p, bb, u = gamma[live], phi[live], b[live], upper[live]
    lo, hi = _breakpoints(g, p, bb, u)
    capped = np.isfinite(hi)
    pos = np.concatenate([lo, hi[capped]])
    delta = np.concatenate([p, -p[capped]])
    order = np.argsort(pos, kind="stable")
    level = float(_first_crossing(pos[order], delta[order, None], 0.0, np.ones(1))[0])
    x[live] = np.clip(level * p * g - bb, 0.0, u)
    return x, level


def _rdm_fill_uncapped(
    gamma: FloatArray, phi: FloatArray, b: FloatArray, demand: FloatArray, capacity: FloatArray
) -> tuple[FloatArray, float]:
    """:func:`rdm_fill` without caps (the hot path): :func:`rdm_fill_levels` without the levels."""
    x, levels, _ = rdm_fill_levels(gamma, phi, b, demand, capacity)
    finite = levels[np.isfinite(levels)]
    return x, float(finite.max()) if len(finite) else 0.0


def rdm_fill_levels(
    gamma: FloatArray, phi: FloatArray, b: FloatArray, demand: FloatArray, capacity: FloatArray
) -> tuple[FloatArray, FloatArray, IntArray]:
    """Uncapped RDM progressive filling, with the bottleneck structure it found.

    Returns ``(x, levels, frozen_by)``: ``levels[r]`` is the level at which resource ``r``
    saturated (``inf`` if it did not), ``frozen_by[n]`` the resource that froze tenant ``n`` (the
    first saturated one it demands; ``-1`` if none did). Every tenant then has VDS
    ``levels[frozen_by[n]]`` if it got tasks here, and at least that if not.

    With the unfrozen tenants' start levels ``lo`` sorted, resource ``r``'s use at ``lo_k`` is
    ``lo_k·W_{k,r} − S_{k,r}`` (``W`` and ``S`` cumulative sums of ``d_r·rate`` and
    ``d_r·rate·lo``), so each resource's saturation level is read off after one sort.
    """
    U = len(gamma)
    x = np.zeros(U)
    levels = np.full(len(capacity), np.inf)
    frozen_by: IntArray = np.full(U, -1, dtype=np.int64)
    rate = phi * gamma
    lo = b / rate
    active = np.arange(U)
    room = capacity.astype(np.float64, copy=True)
    while len(active):
        order = active[np.argsort(lo[active])]
        lo_s = lo[order]
        w = demand[order] * rate[order, None]  # (A, M)
        W = np.cumsum(w, axis=0)
        S = np.cumsum(w * lo_s[:, None], axis=0)
        below = lo_s[:, None] * W - S < room[None, :]
        k = np.count_nonzero(below, axis=0) - 1  # last start below saturation, per resource
        cols = np.arange(len(room))
        Wk = W[k, cols]
        with np.errstate(divide="ignore", invalid="ignore"):
            sat = np.where(Wk > 0, (room + S[k, cols]) / Wk, np.inf)
        sat[(k < 0) | ~(demand[active] > 0).any(axis=0)] = np.inf
        star = float(sat.min())
        if not np.isfinite(star):
            break  # nothing left can saturate a resource: only reachable with zero demand
        xa = np.maximum(star * rate[active] - b[active], 0.0)
        now = (sat <= star * (1.0 + 1e-12)) & ~np.isfinite(levels)
        levels[now] = star
        demands_now = demand[active][:, now] > 0
        hit = demands_now.any(axis=1)
        frozen_by[active[hit]] = np.flatnonzero(now)[np.argmax(demands_now[hit], axis=1)]
        x[active[hit]] = xa[hit]
        room = room - demand[active[hit]].T @ xa[hit]
        np.maximum(room, 0.0, out=room)
        active = active[~hit]
    return x, levels, frozen_by


def rdm_fill(
    gamma: FloatArray,
    phi: FloatArray,
    b: FloatArray,
    upper: FloatArray,
    demand: FloatArray,
    capacity: FloatArray,
) -> tuple[FloatArray, float]:
    """RDM progressive filling on one node. Returns ``(x, level)`` (level of the last freeze).

    Args:
        gamma, phi, b, upper: as in :func:`tdm_fill`.
        demand: ``(U, M)`` per-task demand of the node's eligible tenants.
        capacity: ``(M,)`` the node's capacity.
    """
    if np.isinf(upper).all():
        return _rdm_fill_uncapped(gamma, phi, b, demand, capacity)
    U, M = demand.shape
    x = np.zeros(U)
    frozen = ~(upper > 0)
    used = np.zeros(M)
    level = 0.0
    lo_all, hi_all = _breakpoints(gamma, phi, b, upper)
    while not frozen.all():
        act = np.flatnonzero(~frozen)
        lo, hi = lo_all[act], hi_all[act]
        rate = phi[act] * gamma[act]
        d = demand[act]
        wanted = (d > 0).any(axis=0)
        cols = np.flatnonzero(wanted)
        capped = np.isfinite(hi)
        pos = np.concatenate([lo, hi[capped]])
        slope_change = np.concatenate(
            [rate[:, None] * d[:, cols], -(rate[capped, None] * d[capped][:, cols])]
        )
        order = np.argsort(pos, kind="stable")
        # Each resource's curve is used[r] + Σ d x(ℓ); solve for the level where it hits c_r.
        cross = _first_crossing(pos[order], slope_change[order], 0.0, capacity[cols] - used[cols])
        star = float(cross.min()) if len(cross) else float("inf")
        if not np.isfinite(star):
            x[act] = upper[act]
            break
        level = star
        x[act] = np.clip(star * rate - b[act], 0.0, upper[act])
        saturated = cols[cross <= star * (1.0 + 1e-12)]
        hit = (d[:, saturated] > 0).any(axis=1) | (x[act] >= upper[act])
        frozen[act[hit]] = True
        used = demand[frozen].T @ x[frozen]
    return x, level

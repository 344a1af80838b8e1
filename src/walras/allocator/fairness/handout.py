"""Per-job time fractions from tenants' PS-DSF node times: own tenant first, then a fill that
leaves no GPU idle while a job that can use it waits (the PS-DSF paper's Theorem 2, per job).

PS-DSF (TDM) gives each tenant ``n`` a fraction ``y[n, k] = x[n, k] / γ[n, k]`` of node ``k``'s
time (``Σ_n y[n, k] ≤ 1``). Jobs, not tenants, run: job ``j`` is a gang of ``g_j`` GPUs that runs
on one node at a time, so its targets are time fractions ``t[j, k] ≥ 0`` with ``Σ_k t[j, k] ≤ 1``
(its row), using ``t[j, k] · g_j`` GPUs of node ``k`` on average (``Σ_j t[j, k] g_j ≤ G_k``).
:func:`hand_out` builds ``t`` in two phases, each a water-fill over nodes:

1. **Own.** Tenant ``n``'s budget on node ``k`` is ``B[n, k] = y[n, k] · G_k`` GPUs. It goes to
   the tenant's jobs usable on ``k``, at equal time fractions (raised together until the budget
   or a job's row runs out).
2. **Fill.** What is left of a node, ``G_k − Σ_j t[j, k] g_j``, goes the same way to every job
   usable on ``k`` whose row is not full, whatever its tenant.

In both phases a job is offered its nodes in order of its own speed: first every node of its
fastest usable type, then the next type, and so on (``preference``). Each such level is handed out
in two steps: a packing (equal time for the level's candidates over the level's whole budget, then
each job, largest gang first, onto the one node whose budget holds its time whole, split only when
none does: every node a job is spread over is one more restart when the realiser moves it), then a
water-fill node by node of whatever the packing could not place. Equal time is the tenant-level
rule (a job's weight inside its tenant does not buy it more time).

What holds (the tests check each on random instances):

- **Work conservation (Theorem 2's condition, per job).** After the fill, every node ``k`` is
  either fully handed out (``Σ_j t[j, k] g_j = G_k``) or every job usable on ``k`` has a full row
  (``Σ_k t[j, k] = 1``). Proof: the fill's water-fill of node ``k`` at a job's level stops only
  when the node's budget is spent or no candidate has row left; budgets only shrink and rows only
  grow afterwards.
- **The tenant level is kept.** Each tenant's own phase receives exactly ``min(B[n, k], what its
  usable jobs' remaining rows can take)`` on node ``k`` before any other tenant's job is offered
  that time, and the fill only hands out time no tenant's own phase used. So every tenant gets at
  least its PS-DSF time ``y[n, k]`` on every node where one of its usable jobs still has room, and
  PS-DSF's sharing incentive and envy-freeness (which compare tenants' node times) carry over to
  every tenant that can use its share; the Theorem 2 certificate is a property of ``x`` and is
  unchanged. What no longer holds exactly is Theorem 2's ordering on the filled times: a tenant
  may receive more than ``y`` on a node that the tenants entitled to it could not use.

Worked example: one 4-GPU node, tenants A (``y = 0.5``) and B (``y = 0.5``); A has one 1-GPU job,
B two 1-GPU jobs. Own: A's job gets ``min(1, 2/1) = 1`` (row full, 1 GPU of its 2), B's jobs
``1`` each (2 GPUs). Fill: 1 GPU is left and every row is full, so it stays idle, and the node's
usable jobs all run all the time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# Time fractions below this are rounding, not a share (targets are compared with 0 downstream).
_TINY = 1e-12


@dataclass(frozen=True, slots=True)
class Handout:
    """Per-job targets (see the module docstring).

    Attributes:
        targets: ``(J, K)`` time fraction of job ``j`` on node ``k`` (own + fill).
        own: ``(J, K)`` the part handed out from the job's own tenant's time.
        fill: ``(J, K)`` the work-conserving part.
        idle: ``(K,)`` GPUs of each node no usable job could take (time average).
    """

    targets: FloatArray
    own: FloatArray
    fill: FloatArray
    idle: FloatArray


def _array(value: object, name: str, ndim: int, dtype: type) -> npt.NDArray[np.generic]:
    try:
        arr: npt.NDArray[np.generic] = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidProblem(f"{name} is not numeric: {exc}", field=name) from exc
    if arr.ndim != ndim:
        raise InvalidProblem(f"{name} must be {ndim}-dimensional, got {arr.shape}", field=name)
    return arr


def _validate(
    tenant_time: object,
    job_tenant: object,
    usable: object,
    gang_gpus: object,
    node_gpus: object,
    preference: object | None,
) -> tuple[FloatArray, IntArray, BoolArray, FloatArray, FloatArray, FloatArray]:
    y = np.asarray(_array(tenant_time, "tenant_time", 2, np.float64), dtype=np.float64)
    owner = np.asarray(_array(job_tenant, "job_tenant", 1, np.int64), dtype=np.int64)
    ok = np.asarray(_array(usable, "usable", 2, np.bool_), dtype=bool)
    gpus = np.asarray(_array(gang_gpus, "gang_gpus", 1, np.float64), dtype=np.float64)
    cap = np.asarray(_array(node_gpus, "node_gpus", 1, np.float64), dtype=np.float64)
    n_tenants, n_nodes = y.shape
    n_jobs = owner.shape[0]
    if ok.shape != (n_jobs, n_nodes):
        raise InvalidProblem(f"usable must be {(n_jobs, n_nodes)}, got {ok.shape}", field="usable")
    if gpus.shape != (n_jobs,) or cap.shape != (n_nodes,):
        raise InvalidProblem("gang_gpus must be (J,) and node_gpus (K,)", field="gang_gpus")
    if not (np.isfinite(y).all() and (y >= 0).all()):
        raise InvalidProblem("tenant_time must be finite and >= 0", field="tenant_time")
    if not (np.isfinite(cap).all() and (cap >= 0).all()):
        bad = int(np.flatnonzero(~(np.isfinite(cap) & (cap >= 0)))[0])
        raise InvalidProblem(f"node {bad}: node_gpus must be finite and >= 0", field="node_gpus")
    if n_jobs and not (np.isfinite(gpus).all() and (gpus > 0).all()):
        bad = int(np.flatnonzero(~(np.isfinite(gpus) & (gpus > 0)))[0])
        raise InvalidProblem(f"job {bad}: gang_gpus must be finite and > 0", field="gang_gpus")
    if n_jobs and ((owner < 0) | (owner >= n_tenants)).any():
        bad = int(np.flatnonzero((owner < 0) | (owner >= n_tenants))[0])
        raise InvalidProblem(
            f"job {bad}: job_tenant {int(owner[bad])} is not in [0, {n_tenants})",
            field="job_tenant",
        )
    if preference is None:
        pref = np.ones((n_jobs, n_nodes))
    else:
        pref = np.asarray(_array(preference, "preference", 2, np.float64), dtype=np.float64)
        if pref.shape != (n_jobs, n_nodes) or not np.isfinite(pref).all():
            raise InvalidProblem(
                f"preference must be a finite {(n_jobs, n_nodes)} matrix", field="preference"
            )
    # Agents' tasks (psdsf-distributed) may not have converged: a node over-booked by the tenants
    # is scaled back to its whole time.
    col = y.sum(axis=0)
    y = np.where(col > 1.0, y / np.maximum(col, 1e-300), y)
    return y, owner, ok, gpus, cap, pref


def _levels(ok: BoolArray, pref: FloatArray) -> IntArray:
    """``(J, K)`` rank of node ``k``'s speed among job ``j``'s usable speeds (0 = fastest);
    -1 where the job cannot use the node."""
    # All rows at once (a loop of np.unique per job was a twentieth of a PS-DSF simulation):
    # each row's usable speeds sorted fastest first (unusable nodes last, as −inf), a speed's
    # level is the number of distinct speeds before it, and the levels go back to their nodes.
    n_jobs, n_nodes = ok.shape
    speeds = np.where(ok, pref, -np.inf)
    order = np.argsort(-speeds, axis=1, kind="stable")
    ranked = np.take_along_axis(speeds, order, axis=1)
    new = np.ones(ranked.shape, dtype=np.int64)
    new[:, 0] = 0
    new[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    level = np.empty((n_jobs, n_nodes), dtype=np.int64)
    np.put_along_axis(level, order, np.cumsum(new, axis=1), axis=1)
    level[~ok] = -1
    return level


def _water(budget: float, room: FloatArray, gpus: FloatArray) -> FloatArray:
    """Equal time ``τ`` to every candidate, each capped by its ``room``, with
    ``Σ min(τ, room) · gpus ≤ budget`` spent as far as it goes; returns the times."""
    if budget <= 0 or room.size == 0:
        return np.zeros_like(room)
    if float((room * gpus).sum()) <= budget:
        return room.copy()
    order = np.argsort(room, kind="stable")
    r, g = room[order], gpus[order]
    # Spending at level τ = r[i]: Σ_{m<i} r[m] g[m] + r[i] Σ_{m≥i} g[m].
    below = np.concatenate(([0.0], np.cumsum(r * g)[:-1]))
    above = np.cumsum(g[::-1])[::-1]
    spent = below + r * above
    i = int(np.searchsorted(spent, budget, side="right"))  # first level that overspends
    if i >= spent.shape[0]:  # the total above, summed in another order, rounded below budget
        return room.copy()
    tau = float((budget - below[i]) / above[i])
    out: FloatArray = np.minimum(room, tau)
    return out


def _pack_level(
    left: FloatArray,
    on_level: BoolArray,
    rows: FloatArray,
    gpus: FloatArray,
    out: FloatArray,
    prior: FloatArray,
) -> None:
    """One level's share, kept on as few nodes as possible: equal time over the level's whole
    budget, then each job (largest gang first) onto the node with the least budget that holds
    its time whole, else the one with the most (split); nodes where the job already has time
    (``out`` or ``prior``) first. Arrays are the caller's block: ``left`` ``(C,)``, ``on_level``
    ``(n, C)``, ``rows`` and ``gpus`` ``(n,)``, ``out`` and ``prior`` ``(n, C)``."""
    room = np.maximum(1.0 - rows, 0.0)
    reach = on_level & (left > 0)[None, :]
    live = (room > _TINY) & reach.any(axis=1)
    if not live.any():
        return
    cand = np.flatnonzero(live)
    reach = reach[cand]
    want = _water(float(left[reach.any(axis=0)].sum()), room[cand], gpus[cand])
    for i in np.lexsort((cand, -gpus[cand])).tolist():
        j = int(cand[i])
        need = float(want[i]) * float(gpus[j])
        while need > _TINY * float(gpus[j]):
            ks = np.flatnonzero(reach[i] & (left > _TINY))
            if ks.size == 0:
                break
            held = (out[j, ks] + prior[j, ks]) > 0
            whole = left[ks] >= need
            pick = whole if whole.any() else np.ones_like(whole)
            # Held nodes first; then the tightest whole fit, or (split) the most budget.
            size = left[ks[pick]] if whole.any() else -left[ks[pick]]
            k = int(ks[pick][np.lexsort((size, ~held[pick]))[0]])
            take = min(need, float(left[k]))
            out[j, k] += take / gpus[j]
            rows[j] += take / gpus[j]
            left[k] = max(0.0, float(left[k]) - take)
            need -= take


def _fill(
    budget: FloatArray,
    jobs: IntArray,
    level: IntArray,
    rows: FloatArray,
    gpus: FloatArray,
    out: FloatArray,
    prior: FloatArray,
) -> FloatArray:
    """Hand ``budget`` (K,) GPUs to ``jobs`` (ascending indices) level by level; adds to ``out``
    and ``rows`` in place and returns what is left of the budget. ``prior``: ``(J, K)`` time
    the jobs already have from an earlier phase (the packing keeps a job where it runs).

    Each level is first packed (:func:`_pack_level`: each job on one node where it can, since
    every node a job runs on is one more restart when the realiser moves it), then what the
    packing could not place is water-filled node by node (equal time among the node's
    candidates), which is what the guarantees in the module docstring rest on. The work is done
    on the block of ``jobs`` × nodes with a budget (tenants' node times are sparse).
    """
    remaining = budget.copy()
    cols = np.flatnonzero(remaining > 0)
    if jobs.size == 0 or cols.size == 0:
        return remaining
    left = remaining[cols]
    sub = level[np.ix_(jobs, cols)]
    r, g = rows[jobs], gpus[jobs]
    block = np.zeros((jobs.size, cols.size))
    before = prior[np.ix_(jobs, cols)]
    for lv in range(int(sub.max(initial=-1)) + 1):
        _pack_level(left, sub == lv, r, g, block, before)
        for k in np.flatnonzero(left > 0).tolist():
            cand = np.flatnonzero(sub[:, k] == lv)
            if cand.size == 0:
                continue
            room = np.maximum(1.0 - r[cand], 0.0)
            live = room > _TINY
            if not live.any():
                continue
            cand, room = cand[live], room[live]
            t = _water(float(left[k]), room, g[cand])
            block[cand, k] += t
            r[cand] += t
            left[k] = max(0.0, float(left[k] - (t * g[cand]).sum()))
    out[np.ix_(jobs, cols)] += block
    rows[jobs] = r
    remaining[cols] = left
    return remaining


def hand_out(
    tenant_time: object,
    job_tenant: object,
    usable: object,
    gang_gpus: object,
    node_gpus: object,
    preference: object | None = None,
) -> Handout:
    """Per-job time fractions from tenants' node times (see the module docstring).

    Args:
        tenant_time: ``(N, K)`` PS-DSF time fraction ``y[n, k]`` of node ``k`` for tenant ``n``
            (columns summing above 1 are scaled back to 1).
        job_tenant: ``(J,)`` tenant index of each job.
        usable: ``(J, K)`` whether job ``j``'s whole gang can run on node ``k``.
        gang_gpus: ``(J,)`` GPUs of job ``j``'s whole gang (``g_j > 0``).
        node_gpus: ``(K,)`` GPUs of node ``k`` Walras may use (``G_k``).
        preference: ``(J, K)`` job ``j``'s speed on node ``k`` (higher is offered first);
            ``None``: every usable node alike.

    Raises:
        InvalidProblem: naming the input (and job or node) that is malformed.
    """
    y, owner, ok, gpus, cap, pref = _validate(
        tenant_time, job_tenant, usable, gang_gpus, node_gpus, preference
    )
    n_jobs, n_nodes = ok.shape
    level = _levels(ok, pref)
    rows = np.zeros(n_jobs)
    own = np.zeros((n_jobs, n_nodes))
    none = np.zeros((n_jobs, n_nodes))
    for n in range(y.shape[0]):
        _fill(y[n] * cap, np.flatnonzero(owner == n), level, rows, gpus, own, none)
    used = (own * gpus[:, None]).sum(axis=0)
    fill = np.zeros((n_jobs, n_nodes))
    everyone = np.arange(n_jobs, dtype=np.int64)
    idle = _fill(np.maximum(cap - used, 0.0), everyone, level, rows, gpus, fill, own)
    targets = own + fill
    targets[targets < _TINY] = 0.0
    return Handout(targets=targets, own=own, fill=fill, idle=idle)

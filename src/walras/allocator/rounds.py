"""Rounds realiser: fractional allocations to this round's gang placements (ALGORITHMS.md §3).

Both policies produce fractions: price discovery a time share ``X[j, g]`` of job ``j`` on GPU type
``g``; PS-DSF tasks per node, which the operator turns into a share per node. Kubernetes runs
whole pods, so Walras realises the fractions over rounds (default 360 s). The operator (every
policy) and the simulator call :func:`plan_round` once per round, then :func:`advance` to update
the history that it persists in ``FungibleJob.status.received``.

Priority (Gavel, paper 003 §2)::

    priority[j, g] = targets[j, g] / (received[j, g] / elapsed[j])
                   = targets[j, g] * elapsed[j] / received[j, g]      (+inf when received == 0)

``received[j, g]`` counts the rounds job ``j`` ran in group ``g`` and ``elapsed[j]`` the rounds it
was eligible, so ``received / elapsed`` is its realised share. A pair whose realised share lags its
target has priority > 1 and goes first. Pairs are visited by priority, descending, with explicit
tie-breaks so that the plan is a pure function of the input:

1. larger deficit ``targets * elapsed - received`` (rounds owed; orders the ``+inf`` pairs of
   jobs that have waited longest first),
2. larger target,
3. lower job index,
4. lower group index.

For each pair, if job ``j`` is not yet placed this round, the realiser tries to place its whole
gang (``replicas`` pods of ``gpus_per_pod`` GPUs, each pod on one node, all nodes in group ``g``);
it commits only if every pod fits (gang all-or-nothing), and a job is placed at most once per
round. Jobs with a positive target that end up nowhere are listed in ``RoundPlan.unplaced``.

Worked example: one group of one 2-GPU node, three 1-GPU jobs with target 2/3 each. Round 1: all
priorities are ``+inf``; the target ties, so jobs 0 and 1 run. Round 2: job 2 still has ``+inf``,
jobs 0 and 1 have ``(2/3) * 1 / 1 = 2/3``: jobs 2 and 0 run. Round 3: priorities 2/3 (job 0),
4/3 (job 1), 4/3 (job 2): jobs 1 and 2 run. After three rounds each job ran exactly twice.

Stickiness and preemption (how they interact, and why)
------------------------------------------------------
A pod restart costs about 10 s (Hadar, paper 003 §5: checkpoint, reschedule, reload), small
against a 360 s round but not free, and repeated moves churn API writes. So the default is *keep*:

- A job that runs its full gang in group ``g`` (``current``) and is selected again in ``g`` keeps
  exactly the same nodes and pod counts (``kept=True``), provided those nodes still have room.
  The operator then leaves its pods alone.
- To make "still have room" the normal case, GPUs of running jobs are *reserved* until their own
  pair is visited: a job that is not kept is packed first onto GPUs that no running job holds, and
  only if that fails onto any free GPU. So a higher-priority job displaces a running job only when
  it cannot run otherwise; the displaced job is then packed elsewhere (``kept=False``) or, if
  nothing fits, is not placed.
- Preemption is the time slice ending: a running job that is not selected this round, because
  jobs further behind their targets filled the capacity, is simply absent from the plan, and the
  operator deletes its pods at the round boundary (the workload checkpoints). A running job whose
  top pair is now another group moves there (Gavel's migration across types); that is how its
  per-type shares converge.
- The realiser never trades a restart against priority: a job behind its target is not held back
  to spare a running job its 10 s, because over a 360 s round the lagging job's loss is larger,
  and holding it back would break convergence of the realised shares.

Capacity
--------
``node_free[k]`` is node ``k``'s GPUs usable by Walras this round: capacity minus non-Walras use.
GPUs of Walras's own running pods count as free here; the realiser decides afresh who keeps them.

Packing (a job that is not kept): fewest nodes first, then best fit. If one node can hold the
whole gang, take the one that leaves the fewest GPUs free (ties: lower node index). Otherwise fill
the nodes that hold the most pods (ties: lower node index) until the remainder fits on one more
node, and put the remainder on the best-fitting such node.

Tolerances: targets in ``[-1e-9, 0)`` are treated as 0 (solver noise); a targets row may sum to
``1 + 1e-6``. ``received`` rows are not required to sum to at most ``elapsed``: history persisted by
an operator across restarts may be slightly inconsistent, and the priority stays well defined.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

__all__ = [
    "JobPlacement",
    "RoundPlan",
    "advance",
    "as_current",
    "plan_round",
    "priorities",
    "realised_share",
]

NEG_TOL = 1e-9
"""Targets in ``[-NEG_TOL, 0)`` are solver noise and count as 0."""

ROW_SUM_TOL = 1e-6
"""A targets row may sum to ``1 + ROW_SUM_TOL`` (solvers stop at a tolerance)."""

_BIG = np.iinfo(np.int64).max

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class JobPlacement:
    """Where one job runs this round.

    Attributes:
        job: job index (row of ``targets``).
        group: placement group (column of ``targets``) every node below belongs to.
        nodes: ``(node index, replicas on it)`` pairs, sorted by node index; replicas sum to the
            job's gang size.
        kept: the placement is exactly the job's ``current`` one (its pods stay where they are).
    """

    job: int
    group: int
    nodes: tuple[tuple[int, int], ...]
    kept: bool


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One round's placements.

    Attributes:
        placements: one entry per placed job, sorted by job index.
        unplaced: jobs with a positive target somewhere that were not placed, ascending.
    """

    placements: tuple[JobPlacement, ...]
    unplaced: tuple[int, ...]


# --------------------------------------------------------------------------- validation


def _float_array(
    value: object, name: str, shape: tuple[int, ...], *, lower: float = 0.0
) -> FloatArray:
    """``value`` as float64 of ``shape``, finite and ``>= lower``; the error names the entry.

    Checked with two reductions (NaN propagates through min/max) rather than boolean temporaries:
    the PS-DSF inputs are (jobs x nodes) and dense.
    """
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise InvalidProblem(f"{name} has shape {arr.shape}, expected {shape}", field=name)
    if arr.size == 0:
        return arr
    lo, hi = float(arr.min()), float(arr.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise _at(name, ~np.isfinite(arr), "is not finite")
    if lo < lower:
        raise _at(name, arr < lower, "is negative")
    return arr


def _int_array(value: object, name: str, shape: tuple[int, ...], *, lower: int = 0) -> IntArray:
    """``value`` as int64 of ``shape`` (integral floats accepted), ``>= lower``."""
    raw = np.asarray(value)
    if raw.shape != shape:
        raise InvalidProblem(f"{name} has shape {raw.shape}, expected {shape}", field=name)
    if raw.dtype.kind in "iub":
        arr = raw.astype(np.int64, copy=False)
    elif raw.dtype.kind == "f":
        bad = ~np.isfinite(raw) | (raw != np.round(raw))
        if bad.any():
            raise _at(name, bad, "is not an integer")
        arr = raw.astype(np.int64)
    else:
        raise InvalidProblem(f"{name} must hold integers, got dtype {raw.dtype}", field=name)
    if arr.size and int(arr.min()) < lower:
        what = "is negative" if lower == 0 else f"must be >= {lower}"
        raise _at(name, arr < lower, what)
    return arr


def _at(name: str, bad: npt.NDArray[np.bool_], what: str) -> InvalidProblem:
    """An error naming the first offending job/node of array ``name``."""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    where = _describe(name, first)
    return InvalidProblem(f"{where}: {name} {what}", field=name, index=first[0])


def _describe(name: str, index: tuple[int, ...]) -> str:
    if name in ("node_group", "node_free"):
        return f"node {index[0]}"
    if name == "current":
        return f"job {index[0]} on node {index[1]}"
    if len(index) == 2:
        return f"job {index[0]}, group {index[1]}"
    return f"job {index[0]}"


@dataclass(frozen=True, slots=True)
class _Problem:
    targets: FloatArray
    received: FloatArray
    elapsed: FloatArray
    replicas: IntArray
    gpus_per_pod: IntArray
    node_group: IntArray
    node_free: IntArray
    current: IntArray | None


def _validate(
    targets: object,
    received: object,
    elapsed: object,
    replicas: object,
    gpus_per_pod: object,
    node_group: object,
    node_free: object,
    current: object | None,
) -> _Problem:
    t_raw = np.asarray(targets, dtype=np.float64)
    if t_raw.ndim != 2:
        raise InvalidProblem(
            f"targets must be a (jobs, groups) matrix, got shape {t_raw.shape}", field="targets"
        )
    n_jobs, n_groups = t_raw.shape
    t = _float_array(t_raw, "targets", (n_jobs, n_groups), lower=-NEG_TOL)
    if t.size and float(t.min()) < 0.0:
        t = np.maximum(t, 0.0)  # solver noise in [-NEG_TOL, 0)
    row = t.sum(axis=1)
    if (row > 1.0 + ROW_SUM_TOL).any():
        j = int(np.argmax(row > 1.0 + ROW_SUM_TOL))
        raise InvalidProblem(
            f"job {j}: targets row sums to {row[j]:.9g} > 1 (a job runs in one group at a time)",
            field="targets",
            index=j,
        )
    rec = _float_array(received, "received", (n_jobs, n_groups))
    ela = _float_array(elapsed, "elapsed", (n_jobs,))
    rep = _int_array(replicas, "replicas", (n_jobs,), lower=1)
    gpp = _int_array(gpus_per_pod, "gpus_per_pod", (n_jobs,), lower=1)
    ng_raw = np.asarray(node_group)
    if ng_raw.ndim != 1:
        raise InvalidProblem(
            f"node_group must be a vector, got shape {ng_raw.shape}", field="node_group"
        )
    n_nodes = ng_raw.shape[0]
    ng = _int_array(ng_raw, "node_group", (n_nodes,))
    out = ng >= n_groups
    if out.any():
        raise _at("node_group", out, f"is outside [0, {n_groups}) (targets has {n_groups} groups)")
    free = _int_array(node_free, "node_free", (n_nodes,))
    cur: IntArray | None = None
    if current is not None:
        cur = _int_array(current, "current", (n_jobs, n_nodes))
    return _Problem(t, rec, ela, rep, gpp, ng, free, cur)


# --------------------------------------------------------------------------- priorities


def priorities(targets: object, received: object, elapsed: object) -> FloatArray:
    """Gavel priority ``targets * elapsed / received`` per (job, group); ``+inf`` if none received.

    Pairs with a zero target get priority 0 (they are never placed). Inputs are validated like
    :func:`plan_round`'s.
    """
    t_raw = np.asarray(targets, dtype=np.float64)
    if t_raw.ndim != 2:
        raise InvalidProblem(
            f"targets must be a (jobs, groups) matrix, got shape {t_raw.shape}", field="targets"
        )
    n_jobs = t_raw.shape[0]
    p = _validate(
        t_raw, received, elapsed, np.ones(n_jobs), np.ones(n_jobs), np.zeros(0), np.zeros(0), None
    )
    return _priorities(p.targets, p.received, p.elapsed)


def _priorities(t: FloatArray, rec: FloatArray, ela: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = t * ela[:, None] / rec
    prio = np.where(rec > 0, ratio, np.inf)
    return np.where(t > 0, prio, 0.0)


# --------------------------------------------------------------------------- packing


def _pack(avail: IntArray, replicas: int, gpus: int) -> list[tuple[int, int]] | None:
    """Fewest nodes, then best fit: ``(position, pods)`` for a gang on nodes with ``avail`` GPUs.

    Positions index ``avail`` (a group's nodes in ascending node order), so ties go to the lower
    node index: argmin returns the first minimum and the sorts are stable.
    """
    need = replicas * gpus
    if int(avail.max()) >= need:
        # One node holds it all: the one left with the fewest free GPUs.
        i = int(np.argmin(np.where(avail >= need, avail, _BIG)))
        return [(i, replicas)]
    pods = avail // gpus
    if int(pods.sum()) < replicas:
        return None
    order = np.argsort(-pods, kind="stable")
    cum = np.cumsum(pods[order])
    m = int(np.searchsorted(cum, replicas))  # order[0..m] suffice; order[m] would be the last
    rest_pods = replicas - int(cum[m - 1]) if m > 0 else replicas
    # Best fit for the remainder among the nodes not filled (order[m] always qualifies); scan them
    # in node order so that equal leftovers go to the lower index.
    rest = np.sort(order[m:])
    left = np.where(pods[rest] >= rest_pods, avail[rest], _BIG)
    last = int(rest[int(np.argmin(left))])
    out = [(int(i), int(pods[i])) for i in order[:m]]
    out.append((last, rest_pods))
    return out


# --------------------------------------------------------------------------- the round


def plan_round(
    targets: object,
    received: object,
    elapsed: object,
    replicas: object,
    gpus_per_pod: object,
    node_group: object,
    node_free: object,
    current: object | None = None,
) -> RoundPlan:
    """Choose this round's gang placements from fractional targets and the rounds history.

    Args:
        targets: ``(J, G)`` long-run fraction of time job ``j`` should run in group ``g``; rows sum
            to at most 1. A group is a GPU type (price discovery) or a single node (PS-DSF).
        received: ``(J, G)`` rounds job ``j`` has run in group ``g`` so far.
        elapsed: ``(J,)`` rounds job ``j`` has been eligible so far.
        replicas: ``(J,)`` gang size (pods that must run together).
        gpus_per_pod: ``(J,)`` GPUs each pod needs on its node.
        node_group: ``(K,)`` group of each node, in ``[0, G)``.
        node_free: ``(K,)`` GPUs on each node usable by Walras this round.
        current: ``(J, K)`` replicas of job ``j`` running on node ``k`` now (sticky placement).

    Returns:
        The placements (sorted by job) and the jobs with a positive target left unplaced.

    Raises:
        InvalidProblem: naming the job or node whose input is malformed.
    """
    p = _validate(
        targets, received, elapsed, replicas, gpus_per_pod, node_group, node_free, current
    )
    n_jobs, n_groups = p.targets.shape
    # Work on the positive pairs only: PS-DSF targets are (jobs x nodes) and sparse.
    jj, gg = np.nonzero(p.targets > 0)
    t_pair = p.targets[jj, gg]
    r_pair = p.received[jj, gg]
    e_pair = p.elapsed[jj]
    with np.errstate(divide="ignore", invalid="ignore"):
        prio = np.where(r_pair > 0, t_pair * e_pair / r_pair, np.inf)
    deficit = t_pair * e_pair - r_pair
    # np.lexsort sorts by the last key first.
    order = np.lexsort((gg, jj, -t_pair, -deficit, -prio))
    pair_jobs: list[int] = jj[order].tolist()
    pair_groups: list[int] = gg[order].tolist()

    # Per-group working copies: a group's nodes in ascending order, their free and reserved GPUs.
    by_group = np.argsort(p.node_group, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(p.node_group, minlength=n_groups))))
    group_nodes = [by_group[bounds[g] : bounds[g + 1]] for g in range(n_groups)]
    position = np.empty(p.node_group.shape[0], dtype=np.int64)
    position[by_group] = np.arange(by_group.shape[0]) - bounds[p.node_group[by_group]]
    pos_of: list[int] = position.tolist()
    free = [p.node_free[nodes] for nodes in group_nodes]  # fancy indexing copies
    group_free: list[int] = [int(f.sum()) for f in free]
    gpus_of: list[int] = p.gpus_per_pod.tolist()
    replicas_of: list[int] = p.replicas.tolist()
    demand = [r * q for r, q in zip(replicas_of, gpus_of, strict=True)]

    cur_group, cur_nodes, reserved_by_node = _current_placements(p)
    reserved = [reserved_by_node[nodes] for nodes in group_nodes]
    group_reserved: list[int] = [int(r.sum()) for r in reserved]
    holds = [g >= 0 for g in cur_group]  # does job j still reserve its current GPUs?

    def release(j: int) -> None:
        g, gpus = cur_group[j], gpus_of[j]
        for k, n in cur_nodes[j]:
            reserved[g][pos_of[k]] -= n * gpus
        group_reserved[g] -= demand[j]
        holds[j] = False

    placed: dict[int, JobPlacement] = {}
    total_free = sum(group_free)
    for j, g in zip(pair_jobs, pair_groups, strict=True):
        if total_free <= 0:
            break
        if j in placed:
            continue
        if g == cur_group[j] and holds[j]:
            release(j)  # its own pair: the reservation goes, whether it keeps its nodes or moves
        if group_free[g] < demand[j]:
            continue
        gpus, f = gpus_of[j], free[g]
        choice: list[tuple[int, int]] | None = None  # (position in group, pods)
        kept = False
        if g == cur_group[j]:
            mine = [(pos_of[k], n) for k, n in cur_nodes[j]]
            if all(f[i] >= n * gpus for i, n in mine):
                choice, kept = mine, True
        if choice is None:
            if group_reserved[g] > 0:
                choice = _pack(np.maximum(f - reserved[g], 0), replicas_of[j], gpus)
            if choice is None:
                choice = _pack(f, replicas_of[j], gpus)
        if choice is None:
            continue
        for i, n in choice:
            f[i] -= n * gpus
        group_free[g] -= demand[j]
        total_free -= demand[j]
        if holds[j]:
            release(j)  # placed in another group before its own pair came up
        nodes = group_nodes[g]
        where = tuple(sorted((int(nodes[i]), n) for i, n in choice))
        placed[j] = JobPlacement(job=j, group=g, nodes=where, kept=kept)

    wanted = np.flatnonzero(np.bincount(jj, minlength=n_jobs) > 0).tolist()
    unplaced = tuple(j for j in wanted if j not in placed)
    return RoundPlan(
        placements=tuple(placed[j] for j in sorted(placed)),
        unplaced=unplaced,
    )


def _current_placements(p: _Problem) -> tuple[list[int], list[list[tuple[int, int]]], IntArray]:
    """Per job, its current group (``-1`` if it cannot be kept) and nodes, and reserved GPUs.

    A current placement can be kept only if it is the full gang, all in one group, with a positive
    target there. Only those reserve their GPUs.
    """
    n_jobs = p.targets.shape[0]
    cur_group = [-1] * n_jobs
    cur_nodes: list[list[tuple[int, int]]] = [[] for _ in range(n_jobs)]
    reserved = np.zeros(p.node_free.shape[0], dtype=np.int64)
    if p.current is None:
        return cur_group, cur_nodes, reserved
    rows, cols = np.nonzero(p.current)  # row-major: grouped by job, nodes ascending
    if rows.shape[0] == 0:
        return cur_group, cur_nodes, reserved
    counts = p.current[rows, cols]
    groups = p.node_group[cols]
    total = np.bincount(rows, weights=counts.astype(np.float64), minlength=n_jobs)
    g_min = np.full(n_jobs, np.iinfo(np.int64).max)
    g_max = np.full(n_jobs, -1)
    np.minimum.at(g_min, rows, groups)
    np.maximum.at(g_max, rows, groups)
    one_group = g_min == g_max
    g_safe = np.where(one_group, g_min, 0)
    ok = (total == p.replicas) & one_group & (p.targets[np.arange(n_jobs), g_safe] > 0)
    keep_entry = ok[rows]
    np.add.at(reserved, cols[keep_entry], counts[keep_entry] * p.gpus_per_pod[rows[keep_entry]])
    starts = np.searchsorted(rows, np.arange(n_jobs + 1))
    cols_l: list[int] = cols.tolist()
    counts_l: list[int] = counts.tolist()
    bounds: list[int] = starts.tolist()
    for j in np.flatnonzero(ok).tolist():
        cur_group[j] = int(g_min[j])
        a, b = bounds[j], bounds[j + 1]
        cur_nodes[j] = list(zip(cols_l[a:b], counts_l[a:b], strict=True))
    return cur_group, cur_nodes, reserved


# --------------------------------------------------------------------------- history


def advance(
    received: object, elapsed: object, plan: RoundPlan, eligible_mask: object
) -> tuple[FloatArray, FloatArray]:
    """The history after a round: ``received[j, g] += 1`` per placement, ``elapsed += eligible``.

    A job that ran was eligible by definition, so ``elapsed`` also grows for placed jobs whose
    ``eligible_mask`` entry is false. Inputs are not modified.
    """
    rec = np.asarray(received, dtype=np.float64)
    if rec.ndim != 2:
        raise InvalidProblem(
            f"received must be a (jobs, groups) matrix, got shape {rec.shape}", field="received"
        )
    n_jobs, n_groups = rec.shape
    rec = _float_array(rec, "received", (n_jobs, n_groups)).copy()
    ela = _float_array(elapsed, "elapsed", (n_jobs,)).copy()
    mask = np.asarray(eligible_mask)
    if mask.shape != (n_jobs,) or mask.dtype.kind != "b":
        raise InvalidProblem(
            f"eligible_mask must be a bool vector of shape {(n_jobs,)}, got {mask.dtype} "
            f"{mask.shape}",
            field="eligible_mask",
        )
    ran = np.zeros(n_jobs, dtype=bool)
    for pl in plan.placements:
        if not (0 <= pl.job < n_jobs and 0 <= pl.group < n_groups):
            raise InvalidProblem(
                f"job {pl.job}: placement in group {pl.group} is outside received's shape "
                f"{(n_jobs, n_groups)}",
                field="plan",
                index=pl.job,
            )
        rec[pl.job, pl.group] += 1.0
        ran[pl.job] = True
    ela += (mask | ran).astype(np.float64)
    return rec, ela


def as_current(plan: RoundPlan, n_jobs: int, n_nodes: int) -> IntArray:
    """The ``(J, K)`` replicas-per-node matrix of a plan: next round's ``current``."""
    out = np.zeros((n_jobs, n_nodes), dtype=np.int64)
    for pl in plan.placements:
        for k, n in pl.nodes:
            out[pl.job, k] += n
    return out


def realised_share(received: object, elapsed: object) -> FloatArray:
    """``received / elapsed`` per (job, group); 0 for jobs never eligible."""
    rec = np.asarray(received, dtype=np.float64)
    ela = np.asarray(elapsed, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = rec / ela[:, None]
    return np.where(ela[:, None] > 0, share, 0.0)

"""One round of the realiser: Gavel priorities, sticky keep, reservations, gang packing.

The formula, tie-breaks and the stickiness/preemption rules are in the package docstring
(:mod:`walras.allocator.rounds`). Called by the operator and the simulator each round.
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.rounds.packing import pack
from walras.allocator.rounds.results import JobPlacement, RoundPlan
from walras.allocator.rounds.validation import FloatArray, IntArray, Problem, validate

ORDERS = ("gavel", "deficit", "behind", "balanced")
"""``plan_round``'s visiting orders (see its ``order`` argument)."""


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
    p = validate(
        t_raw, received, elapsed, np.ones(n_jobs), np.ones(n_jobs), np.zeros(0), np.zeros(0), None
    )
    prio = _priority(p.targets, p.elapsed[:, None], p.received)
    return np.where(p.targets > 0, prio, 0.0)


def _priority(t: FloatArray, e: FloatArray, r: FloatArray) -> FloatArray:
    """Elementwise ``t * e / r`` (Gavel), ``+inf`` where nothing was received yet."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = t * e / r
    return np.where(r > 0, ratio, np.inf)


def plan_round(
    targets: object,
    received: object,
    elapsed: object,
    replicas: object,
    gpus_per_pod: object,
    node_group: object,
    node_free: object,
    current: object | None = None,
    hold: float | FloatArray = 0.0,
    backfill: object | None = None,
    order: str = "gavel",
    hold_fit: float | object | None = None,
    rank: object | None = None,
    rank_group: object | None = None,
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
        hold: credit (one, or ``(J,)`` one per job: each job's restart priced at its own measured
            cost), in the units of ``received``, that a job running its whole gang in a group
            gets on that group's pair: its priority there is computed with
            ``received − hold``. A running job so keeps its slice until it is ``hold`` ahead of
            its target, so it is served in blocks instead of alternating every round (each
            switch restarts its pods). 0 is Gavel's priority.
        backfill: ``(J, G)`` bool, where each job *could* run; GPUs left free after every
            positive-target pair was tried go to unplaced jobs that can use them (work
            conservation beyond the targets). ``None``: only positive targets are placed.
        order: ``"gavel"`` visits pairs by Gavel's priority ``targets * elapsed / received``;
            ``"deficit"`` by the deficit ``targets * elapsed - received`` (seconds owed, plus
            ``hold`` on a running gang's own pair), so a running gang switches only when a deficit
            elsewhere exceeds its own by ``hold`` (blocks; ``walras.core.switching`` derives the
            credit from the restart cost); ``"behind"`` by ``elapsed - received / targets``
            (seconds behind the job's own schedule: the deficit normalised by the target, as
            Gavel's ratio is), the credit counting as ``hold`` seconds of schedule;
            ``"balanced"`` by ``(targets * elapsed - received) / sqrt(targets)``, between the two
            (the deficit favours large targets, the normalised key none), the credit adding
            ``hold`` to the key. Ties as in the package docstring.
        hold_fit: the credit (one, or ``(J,)`` one per job) used instead of ``hold`` when every
            job with a positive target fits in the free GPUs at once (not oversubscribed: only
            *where* jobs run is at stake). ``None``: ``hold`` always.
        rank: ``(J,)`` precedence of each job inside its ``rank_group`` (``(J,)`` ints; one group
            when ``None``): the pairs of one rank group in one group keep the positions the
            order gives them, but take them higher rank first (ties: in that order). So a rank
            group's share of the visit is unchanged, and its lowest ranks are the ones left out
            when it gets fewer GPUs. ``None``: every job the same rank.

    Returns:
        The placements (sorted by job) and the jobs with a positive target left unplaced.

    Raises:
        InvalidProblem: naming the job or node whose input is malformed.
    """
    p = validate(targets, received, elapsed, replicas, gpus_per_pod, node_group, node_free, current)
    n_jobs, n_groups = p.targets.shape
    # Work on the positive pairs only: PS-DSF targets are (jobs x nodes) and sparse.
    jj, gg = np.nonzero(p.targets > 0)
    t_pair = p.targets[jj, gg]
    r_pair = p.received[jj, gg]
    e_pair = p.elapsed[jj]
    hold_arr = np.asarray(hold, dtype=np.float64)
    if hold_arr.ndim not in (0, 1) or (hold_arr.ndim == 1 and hold_arr.shape != (n_jobs,)):
        raise InvalidProblem(
            f"hold must be one number or one per job ({n_jobs}), got shape {hold_arr.shape}",
            field="hold",
        )
    if hold_arr.size and not (np.isfinite(hold_arr).all() and float(hold_arr.min()) >= 0):
        raise InvalidProblem(f"hold must be finite numbers >= 0, got {hold}", field="hold")
    if order not in ORDERS:
        raise InvalidProblem(
            f"order must be one of {', '.join(map(repr, ORDERS))}, got {order!r}", field="order"
        )
    credit: float | FloatArray = float(hold_arr) if hold_arr.ndim == 0 else hold_arr[jj]
    if hold_fit is not None:
        fit = np.broadcast_to(np.asarray(hold_fit, dtype=np.float64), (n_jobs,))
        if fit.size and not (np.isfinite(fit).all() and float(fit.min()) >= 0):
            raise InvalidProblem(
                "hold_fit must be finite numbers >= 0 (one, or one per job)", field="hold_fit"
            )
        wanted_gpus = int((p.replicas * p.gpus_per_pod)[np.unique(jj)].sum())
        if wanted_gpus <= int(p.node_free.sum()):
            credit = fit[jj]  # every job can run at once: only *where* is at stake
    # Where each job runs now, once: the credit below and the visit further down both read it.
    now_placed = _current_placements(p)
    if np.any(np.asarray(credit) > 0) and p.current is not None:
        # Only a job that can be kept where it is (whole gang, one group) earns the credit.
        running = now_placed[0]
        on_own = np.array([running[j] == g for j, g in zip(jj.tolist(), gg.tolist(), strict=True)])
        if on_own.size:
            # "behind" keys in seconds of the job's own schedule, so its credit (seconds of
            # schedule) becomes credit * target seconds of received service.
            # "balanced" divides the deficit by sqrt(target): credit * sqrt(target) of received
            # service adds exactly ``credit`` to its key.
            scale = {"behind": t_pair, "balanced": np.sqrt(t_pair)}.get(order)
            less = r_pair - (credit if scale is None else credit * scale)
            if order == "gavel":
                less = np.maximum(less, 0.0)  # Gavel's ratio needs received >= 0
            r_pair = np.where(on_own, less, r_pair)
    deficit = t_pair * e_pair - r_pair
    if order == "deficit":
        prio = deficit
    elif order == "behind":
        prio = e_pair - r_pair / t_pair  # seconds behind its own schedule; t_pair > 0 here
    elif order == "balanced":
        prio = deficit / np.sqrt(t_pair)  # t_pair > 0 here
    else:
        prio = _priority(t_pair, e_pair, r_pair)
    # np.lexsort sorts by the last key first.
    visit = np.lexsort((gg, jj, -t_pair, -deficit, -prio))
    if rank is not None:
        visit = _by_rank(visit, jj, gg, rank, rank_group, n_jobs)
    pair_jobs: list[int] = jj[visit].tolist()
    pair_groups: list[int] = gg[visit].tolist()

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

    cur_group, cur_nodes, reserved_by_node = now_placed
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
                choice = pack(np.maximum(f - reserved[g], 0), replicas_of[j], gpus)
            if choice is None:
                choice = pack(f, replicas_of[j], gpus)
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

    if backfill is not None and total_free > 0:
        usable = np.asarray(backfill, dtype=bool)
        if usable.shape != (n_jobs, n_groups):
            raise InvalidProblem(
                f"backfill must be a (jobs, groups) bool matrix of shape {(n_jobs, n_groups)}, "
                f"got {usable.shape}",
                field="backfill",
            )
        # Work conservation: GPUs no positive-target pair could use go to waiting jobs that can
        # run there, most wanted first (largest target anywhere, then lower index); a job prefers
        # its current group (no restart), then the group with the most room.
        best = p.targets.max(axis=1) if n_groups else np.zeros(n_jobs)
        waiting = [j for j in np.lexsort((np.arange(n_jobs), -best)).tolist() if j not in placed]
        for j in waiting:
            if total_free <= 0:
                break
            groups = [g for g in np.flatnonzero(usable[j]).tolist() if group_free[g] >= demand[j]]
            groups.sort(key=lambda g: (g != cur_group[j], -group_free[g], g))
            for g in groups:
                gpus, f = gpus_of[j], free[g]
                choice = None
                kept = False
                if g == cur_group[j]:
                    mine = [(pos_of[k], n) for k, n in cur_nodes[j]]
                    if all(f[i] >= n * gpus for i, n in mine):
                        choice, kept = mine, True
                if choice is None:
                    choice = pack(f, replicas_of[j], gpus)
                if choice is None:
                    continue
                for i, n in choice:
                    f[i] -= n * gpus
                group_free[g] -= demand[j]
                total_free -= demand[j]
                nodes = group_nodes[g]
                where = tuple(sorted((int(nodes[i]), n) for i, n in choice))
                placed[j] = JobPlacement(job=j, group=g, nodes=where, kept=kept)
                break

    if order != "gavel" and p.current is not None:
        placed = _keep_first(placed, p, group_nodes, pos_of, cur_group, cur_nodes)
    wanted = np.flatnonzero(np.bincount(jj, minlength=n_jobs) > 0).tolist()
    unplaced = tuple(j for j in wanted if j not in placed)
    return RoundPlan(
        placements=tuple(placed[j] for j in sorted(placed)),
        unplaced=unplaced,
    )


def _by_rank(
    visit: IntArray,
    jj: IntArray,
    gg: IntArray,
    rank: object,
    rank_group: object | None,
    n_jobs: int,
) -> IntArray:
    """``visit`` with, among the pairs of one (rank group, group), the higher rank first in the
    same positions (``plan_round``'s ``rank``)."""
    r = np.asarray(rank, dtype=np.float64)
    if r.shape != (n_jobs,) or not np.isfinite(r).all():
        raise InvalidProblem(
            f"rank must be one finite number per job ({n_jobs}), got shape {r.shape}",
            field="rank",
        )
    if rank_group is None:
        grp = np.zeros(n_jobs, dtype=np.int64)
    else:
        grp = np.asarray(rank_group, dtype=np.int64)
        if grp.shape != (n_jobs,):
            raise InvalidProblem(
                f"rank_group must be one integer per job ({n_jobs}), got shape {grp.shape}",
                field="rank_group",
            )
    if visit.size < 2:
        return visit
    jobs, groups = jj[visit], gg[visit]
    position = np.arange(visit.size)
    # The k-th position of a (rank group, group) gets its k-th pair by rank: both sorts list
    # the pairs of one (rank group, group) together, the first by position, the second by rank.
    slots = np.lexsort((position, groups, grp[jobs]))
    occupants = np.lexsort((position, -r[jobs], groups, grp[jobs]))
    out = visit.copy()
    out[slots] = visit[occupants]
    return out


def _keep_first(
    placed: dict[int, JobPlacement],
    p: Problem,
    group_nodes: list[IntArray],
    pos_of: list[int],
    cur_group: list[int],
    cur_nodes: list[list[tuple[int, int]]],
) -> dict[int, JobPlacement]:
    """The same jobs in the same groups, with every gang that stays in its group kept in place.

    The visit order decides *who* runs *where*; the nodes it packs are a by-product. A job placed
    early (a lagging job, a job moving in) may take GPUs of a running job whose own pair comes
    later and that then stays in its group on other nodes: a restart that changes nothing the
    targets care about. So the nodes are chosen again: first every selected gang whose group is
    its current one, on its current nodes; then the others, packed (``pack``) into what is left
    of their group, in the order they were selected. If some gang no longer fits (fragmentation
    with multi-GPU pods), the visit's own placements are kept as they were.
    """
    free = [p.node_free[nodes].copy() for nodes in group_nodes]
    out: dict[int, JobPlacement] = {}
    gpus_of = p.gpus_per_pod
    for j, pl in placed.items():
        if cur_group[j] != pl.group:
            continue
        f, gpus = free[pl.group], int(gpus_of[j])
        mine = [(pos_of[k], n) for k, n in cur_nodes[j]]
        if all(f[i] >= n * gpus for i, n in mine):
            for i, n in mine:
                f[i] -= n * gpus
            out[j] = JobPlacement(job=j, group=pl.group, nodes=tuple(cur_nodes[j]), kept=True)
    for j, pl in placed.items():
        if j in out:
            continue
        f = free[pl.group]
        choice = pack(f, int(p.replicas[j]), int(gpus_of[j]))
        if choice is None:
            return placed
        for i, n in choice:
            f[i] -= n * int(gpus_of[j])
        nodes = group_nodes[pl.group]
        where = tuple(sorted((int(nodes[i]), n) for i, n in choice))
        out[j] = JobPlacement(job=j, group=pl.group, nodes=where, kept=False)
    return out


def _current_placements(p: Problem) -> tuple[list[int], list[list[tuple[int, int]]], IntArray]:
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

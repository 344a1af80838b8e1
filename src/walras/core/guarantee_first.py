"""Guarantees per round: which (job, group) pairs the realiser visits before every other.

The quota layer (``walras.allocator.quotas``) puts each tenant's guarantee into the policy's
targets, which are long-run time fractions; the realiser serves targets over rounds, visiting
jobs by the time they are owed. On its own it therefore meets a guarantee on average, not in
every round: a job at a target of 1 that has run every round yields its GPUs to jobs further
behind, and a borrower's gang keeps a whole type for its slice. So that a tenant holds its
guarantee in each round, the realiser first visits, per tenant ``t`` and GPU type ``g`` with a
guarantee ``G_tg``:

    the jobs of t's subtree whose largest target is on a group of type g and whose gang has
    at most G_tg GPUs, largest gang first (then the realiser's own deficit
    ``target · elapsed − received``, then namespace/name), each whose gang still fits in what
    is left of G_tg,

each on that group. The pass decides how many GPUs the tenant holds, not which of its jobs
take turns: among gangs of one size the job owed most goes first, as in the realiser's order, so
two jobs sharing a guarantee of one GPU still alternate. Largest gang first fills the guarantee
as fully as whole gangs can: gang sizes of 1, 2, 4 and 8 GPUs each divide the next, and for such
sizes taking the largest that fits reaches the largest subset sum within the limit. These pairs
go before the others in the realiser's order (``plan_round``'s ``first``); the rest of the round
is unchanged, so borrowers keep what the guarantees leave, and a running borrower gives up its
GPUs only where a guaranteed gang needs them. A tenant can hold more than its targets this way
(a job at a target of 0.3 runs every round), never more than its guarantee beyond them.

Policies that place gangs themselves (``Solution.placements``) are not realised and get none.
Pure: the solution and the snapshot's validated tenants in, a mask out.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from walras.core import governance, policies, snapshot

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def guaranteed_pairs(
    sol: policies.Solution,
    snap: snapshot.Snapshot,
    targets: FloatArray,
    received: FloatArray,
    elapsed: FloatArray,
) -> BoolArray | None:
    """The ``(J, G)`` mask of the module docstring; ``None`` when no tenant has a guarantee.

    ``received`` ``(J, G)`` and ``elapsed`` ``(J,)``: the realiser's history, whose deficit
    orders a tenant's gangs of one size (so its own jobs still take turns)."""
    tenants = snap.tenants
    wanted = [
        (name, gpu_type, float(q.guaranteed))
        for name, spec in sorted(tenants.items())
        for gpu_type, q in sorted(spec.quotas.items())
        if q.guaranteed
    ]
    if not wanted or sol.placements is not None or not sol.jobs:
        return None
    out = np.zeros(targets.shape, dtype=bool)
    gangs = [int(job.replicas) * int(sol.gpus_per_pod[r]) for r, job in enumerate(sol.jobs)]
    for name, gpu_type, guaranteed in wanted:
        cols = [c for c, t in enumerate(sol.group_type) if t == gpu_type]
        if not cols:
            continue
        candidates: list[tuple[int, float, int, int]] = []
        for r, job in enumerate(sol.jobs):
            if gangs[r] > guaranteed or not governance.in_subtree(job.tenant, name, tenants):
                continue
            # Only on the job's own main group (its largest target): the guarantee holds GPUs
            # for jobs that want that type most, it never pulls a job onto a type it was given
            # only a sliver of (a K80 guarantee would otherwise run V100 jobs on K80s).
            c = int(np.argmax(targets[r]))
            if c in cols and targets[r, c] > 0:
                deficit = float(targets[r, c] * elapsed[r] - received[r, c])
                candidates.append((-gangs[r], -deficit, r, c))
        used = 0
        for _, _, r, c in sorted(candidates):
            if used + gangs[r] <= guaranteed:
                out[r, c] = True
                used += gangs[r]
    return out if out.any() else None

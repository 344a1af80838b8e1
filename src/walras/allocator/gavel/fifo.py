"""Gavel's FIFO: ``fifo_perf`` (heterogeneity-aware) and ``fifo`` (agnostic), greedy, no LP.

Gavel's ``FIFOPolicy`` gives each job a whole type (time fraction 1.0) or nothing, in arrival
(job id) order, and the round mechanism then runs exactly the jobs it gave a type. One call:

1. ``free[t] = capacity[t]``. Queue every active job without a remembered type, by job id.
2. Walk the remembered jobs by job id. A finished one (no longer among the inputs) frees its
   slot: if the queue head's gang fits in ``free`` of that type *as counted so far* and its
   throughput there is > 0, the head takes the type. Either way the finished job is forgotten.
   A running one subtracts its gang from ``free`` of its type.
3. ``types`` = types with ``free > 0``, in sorted type-name order. While both the queue and
   ``types`` are non-empty: pop the head; ``fits`` = the types in ``types`` with
   ``free ≥ gang``; if none, stop (the popped head waits for the next call). Choose a type:
   - ``fifo_perf``: the one in ``fits`` with the highest throughput (first one on ties);
   - ``fifo``: Gavel draws ``i = rng.randrange(len(fits))``, but then uses the *last* type of
     ``types`` (a leftover loop variable in Gavel's code), which need not fit. The draw only
     decides which entry of ``types`` is dropped when the chosen type's ``free`` reaches 0.
   If the job's throughput on the chosen type is > 0, it takes the type (``free`` −= gang) and,
   when ``free`` hits exactly 0, entry ``fits[i]`` of ``types`` is removed (``i`` the chosen index
   for ``fifo_perf``, the random draw for ``fifo``). Otherwise the job gets nothing this call.

State across calls, kept in the object as in Gavel: ``fifo`` remembers each job's type until
the job finishes (a job never moves), and its random generator (Python's ``random.Random(seed)``,
bit-identical to Gavel's). ``fifo_perf`` forgets all types at every call.

Because of the leftover-variable quirk, ``fifo`` can overbook a type (``Σ k·x > capacity``): for
example with free (k80 2, p100 2, v100 1), a 2-GPU head job is given v100, where only 1 GPU is
free. Gavel's round mechanism then runs only what fits, so the simulator must not assume the
``fifo`` allocation is feasible. ``fifo_perf`` never overbooks.

Worked example (``fifo_perf``): types (k80, p100, v100) with 1 GPU each; jobs 0, 1, 2 of one GPU
with throughputs (1, 2, 3), (1, 2, 3), (5, 1, 1). Job 0 takes v100 (fastest), job 1 p100 (v100
is full), job 2 k80: the output is the permutation matrix of types (2, 1, 0).
"""

from __future__ import annotations

import random

import numpy as np

from walras.allocator.gavel.inputs import FloatArray, GavelInputs


class Fifo:
    """``fifo_perf`` (``aware=True``) or ``fifo`` (``aware=False``, seeded as in Gavel)."""

    def __init__(self, *, aware: bool, seed: int = 0) -> None:
        self.aware = aware
        self.name = "fifo_perf" if aware else "fifo"
        self._rng = random.Random(seed)
        self._assigned: dict[int, int] = {}  # job id -> rank of its type in sorted-name order

    def allocate(self, inputs: GavelInputs) -> FloatArray:
        J, T = inputs.n_jobs, inputs.n_types
        order = inputs.type_order()  # rank -> column
        ids = [int(i) for i in inputs.job_ids]
        row_of = {job: j for j, job in enumerate(ids)}
        thr = inputs.throughputs[:, order]  # columns by rank from here on
        gang = {job: int(inputs.scale_factors[j]) for j, job in enumerate(ids)}
        free = [float(c) for c in inputs.capacity[order]]
        if self.aware:
            self._assigned = {}
        queue = [job for job in sorted(ids) if job not in self._assigned]

        for job in sorted(self._assigned):
            rank = self._assigned[job]
            if rank >= T:
                # Fewer types than when it was assigned (a tenant's quota columns come and go):
                # the job queues again, in id order.
                del self._assigned[job]
                if job in row_of:
                    queue = sorted([*queue, job])
                continue
            if job in row_of:
                free[rank] -= gang[job]
                continue
            if queue:  # a finished job: the queue head may take its type
                head = queue[0]
                if gang[head] <= free[rank] and thr[row_of[head], rank] > 0.0:
                    queue.pop(0)
                    self._assigned[head] = rank
                    free[rank] -= gang[head]
            del self._assigned[job]

        types = sorted(r for r in range(T) if free[r] > 0)
        while queue and types:
            job = queue.pop(0)
            fits = [i for i, r in enumerate(types) if free[r] >= gang[job]]
            if not fits:
                break
            if self.aware:
                values = [thr[row_of[job], types[i]] for i in fits]
                pick = int(np.argmax(values))  # first maximum, as Gavel's strict '>' scan
                rank = types[fits[pick]]
            else:
                pick = self._rng.randrange(len(fits))
                rank = types[-1]  # Gavel's leftover loop variable, not fits[pick]
            if thr[row_of[job], rank] > 0.0:
                self._assigned[job] = rank
                free[rank] -= gang[job]
                if free[rank] == 0:
                    types.pop(fits[pick])

        x = np.zeros((J, T))
        for job, rank in self._assigned.items():
            x[row_of[job], order[rank]] = 1.0
        return x

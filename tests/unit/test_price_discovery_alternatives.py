"""Price discovery's per-type alternatives ("on k80 you would get 0.90") for too-large gangs.

A job short of a full share gets, per GPU type it has throughput on, the share that type alone
would give it at the current prices (``pricing.best_response`` with every other type masked).
Under POP (``policies.sharded``) a shard's view offers a fraction of each type: here 7 K80 and
8 V100, as in the shard of a POP k = 4 simulation of Gavel's stream that crashed. An 8-GPU gang
with throughput on both can only run on the V100s there (the main solve masks K80 for it), so no
share of K80 can run it and it gets no K80 alternative. Asking the pricing screen for one raised
"demand exceeds the capacity of every type the job has throughput on" every round.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from tests.unit.snapshot_helpers import cluster, job, with_work

from walras.core import policies, snapshot


def test_a_gang_larger_than_a_types_capacity_gets_no_alternative_there() -> None:
    jobs = [job("gang", {"v100": 5.0, "k80": 1.0}, replicas=8)]
    jobs += [job(f"s{i}", {"v100": 4.0, "k80": 1.0}) for i in range(6)]
    snap = cluster(with_work(jobs)).freeze(now=1000.0)
    view = snapshot.cluster_view(snap)
    assert view.gpu_types == ("k80", "v100")
    shard = dataclasses.replace(view, type_capacity=np.array([7.0, 8.0]))
    policy = policies.create("price-discovery", {"backend": "numpy"})
    sol = policy.solve(snap, shard)
    assert not sol.issues
    by_name = {j.name: r for r, j in enumerate(sol.jobs)}
    gang = sol.jobs[by_name["gang"]]
    # It competes with six jobs for the 8 V100s it needs all of, so it is short of a full share
    # and offered alternatives, but only where 8 GPUs exist.
    assert sol.targets[by_name["gang"]].sum() < 0.999
    assert sol.targets[by_name["gang"], 0] == 0.0
    assert set(sol.alternatives[gang.key]) == {"v100"}
    # Short single-GPU jobs still get both types' alternatives (both can hold them).
    short = [j for r, j in enumerate(sol.jobs) if j.name != "gang" and sol.targets[r].sum() < 0.999]
    assert all(set(sol.alternatives[j.key]) == {"v100", "k80"} for j in short)

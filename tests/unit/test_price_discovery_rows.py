"""Price discovery's problem rows kept across rounds (``_RowMemo``) give the solve of a policy
that never saw an earlier round.

The oracle is a fresh policy object (no memo) given the same warm-start prices: on the same
snapshot it must produce the same targets and issues, bit for bit, after the cluster changed
under a memo filled on the old cluster (a new node, a tainted node) and for several jobs of one
kind (they share a row, and each keeps its own issue).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tests.unit import snapshot_helpers as helpers

from walras.core import policies, snapshot


def _policy() -> Any:
    config = policies.PolicyConfig("price-discovery", {"price-discovery": {"backend": "numpy"}}, 1)
    return policies.build(config)


def _same_as_fresh(policy: Any, store: snapshot.Store, now: float) -> policies.Solution:
    snap = store.freeze(now)
    view = snapshot.cluster_view(snap)
    fresh = _policy()
    fresh._warm = policy._warm  # the same warm start: only the memo differs
    got, want = policy.solve(snap, view), fresh.solve(snap, view)
    assert [j.key for j in got.jobs] == [j.key for j in want.jobs]
    np.testing.assert_array_equal(got.targets, want.targets)
    np.testing.assert_array_equal(got.gpus_per_pod, want.gpus_per_pod)
    assert got.issues == want.issues
    return got


def test_rows_follow_the_cluster_and_keep_each_jobs_issue() -> None:
    jobs = helpers.workload()
    # Two jobs of one kind that no node can hold yet (no node is in zone a), and one 4-GPU gang.
    jobs += [
        helpers.job(f"zoned-{i}", {"v100": 4.0, "k80": 1.0}, selector={"zone": "a"})
        for i in range(2)
    ]
    jobs.append(helpers.job("wide", {"v100": 6.0}, replicas=2, gpus=4))
    store = helpers.cluster(jobs)
    policy = _policy()
    first = _same_as_fresh(policy, store, 0.0)
    assert {i.key for i in first.issues} == {("ns", "zoned-0"), ("ns", "zoned-1")}
    # A node in zone a: the zoned jobs become solvable on the new view.
    store.upsert("node", helpers.node("v100-9", "v100", 8, zone="a"))
    second = _same_as_fresh(policy, store, 1.0)
    assert not second.issues
    assert {("ns", "zoned-0"), ("ns", "zoned-1")} <= {j.key for j in second.jobs}
    # The zone-a node tainted: the zoned jobs fit nowhere again, each with its own issue.
    tainted = helpers.node("v100-9", "v100", 8, zone="a")
    tainted["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    store.upsert("node", tainted)
    third = _same_as_fresh(policy, store, 2.0)
    assert {i.key for i in third.issues} == {("ns", "zoned-0"), ("ns", "zoned-1")}
    # Unchanged cluster, a job gone: rows are reused, the solve is the fresh one's.
    store.delete("job", "ns", "j03")
    _same_as_fresh(policy, store, 3.0)

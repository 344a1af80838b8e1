"""Snapshot → policy → realise on API dicts, without any Kubernetes client.

Oracles: feasibility of the targets (Σ d x ≤ R, rows ≤ 1; TDM time on every node ≤ 1), stable
order independent of event order, independence of the solvable jobs from the impossible ones,
the per-node GPU capacity of every round's placements, the fixed point of sticky placements (a
second round over the pods the first created writes nothing), and PS-DSF's own Theorem 2
certificate on the shared tenant model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tests.unit.snapshot_helpers import cluster, job, node, pool, workload

from walras.allocator import fairness, pricing
from walras.core import crd, history, policies, realise, snapshot
from walras.core.tenants import fairness_problem, psdsf_problem, tenant_model


def test_snapshot_order_is_independent_of_event_order() -> None:
    a = cluster(workload()).freeze(now=0.0)
    b = cluster(workload(), order=3).freeze(now=0.0)
    assert a == b
    assert [j.key for j in a.jobs] == sorted(j.key for j in a.jobs)
    view = snapshot.cluster_view(a)
    assert view.gpu_types == ("k80", "v100")
    assert view.type_capacity.tolist() == [12.0, 16.0]


def test_cluster_view_excludes_unusable_nodes_and_foreign_gpus() -> None:
    store = cluster([])
    cordoned = node("v100-9", "v100", 8)
    cordoned["spec"] = {"unschedulable": True}
    store.upsert("node", cordoned)
    store.upsert("node", node("cpu-0", "none", 0))  # in no pool
    store.upsert(
        "pod",
        {
            "metadata": {"namespace": "other", "name": "p"},
            "spec": {
                "nodeName": "v100-0",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
            },
            "status": {"phase": "Running"},
        },
    )
    view = snapshot.cluster_view(store.freeze(now=0.0))
    assert [n.name for n in view.nodes] == ["k80-0", "k80-1", "k80-2", "v100-0", "v100-1"]
    assert view.type_capacity.tolist() == [12.0, 13.0]  # 3 GPUs on v100-0 are not Walras's


def test_price_discovery_targets_are_feasible() -> None:
    snap = cluster(workload()).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("price-discovery", {"backend": "numpy"}).solve(snap, view)
    demand = np.array([[j.replicas] * 2 for j in sol.jobs], dtype=float)
    assert np.all(sol.targets >= 0)
    assert np.all(sol.targets.sum(axis=1) <= 1 + 1e-9)
    assert np.all((demand * sol.targets).sum(axis=0) <= view.type_capacity * (1 + 1e-6))
    assert set(sol.prices) == {"k80", "v100"} and all(p >= 0 for p in sol.prices.values())
    # Expected throughput is a·x of the solved targets.
    rates = np.array([[j.throughput[t] for t in sol.groups] for j in sol.jobs])
    assert sol.expected_throughput == pytest.approx((rates * sol.targets).sum(axis=1))


def test_impossible_jobs_are_dropped_and_do_not_change_the_others() -> None:
    bad = [
        job("zz-a100", {"a100": 4.0}),
        job("zz-huge", {"v100": 1.0, "k80": 1.0}, replicas=100),
        job("zz-mars", {"v100": 1.0}, selector={"zone": "mars"}),
    ]
    clean = cluster(workload()).freeze(now=0.0)
    mixed = cluster(workload() + bad).freeze(now=0.0)
    pol = policies.create("price-discovery", {"backend": "numpy"})
    sol_clean = pol.solve(clean, snapshot.cluster_view(clean))
    sol_mixed = policies.create("price-discovery", {"backend": "numpy"}).solve(
        mixed, snapshot.cluster_view(mixed)
    )
    reasons = {i.key[1]: (i.reason, i.field) for i in sol_mixed.issues}
    assert reasons == {
        "zz-a100": ("NoPoolForThroughput", "spec.throughput"),
        "zz-huge": ("GangTooLarge", "spec.replicas"),
        "zz-mars": ("NoMatchingNodes", "spec.template.spec.nodeSelector"),
    }
    assert [j.key for j in sol_mixed.jobs] == [j.key for j in sol_clean.jobs]
    np.testing.assert_allclose(sol_mixed.targets, sol_clean.targets, atol=1e-9)


def test_alternatives_are_single_type_best_responses() -> None:
    snap = cluster(workload()).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("price-discovery", {"backend": "numpy"}).solve(snap, view)
    prices = np.array([sol.prices[t] for t in sol.groups])
    for key, alts in sol.alternatives.items():
        r = next(i for i, j in enumerate(sol.jobs) if j.key == key)
        for g, gpu_type in enumerate(sol.groups):
            a = np.zeros((1, 2))
            a[0, g] = sol.jobs[r].throughput[gpu_type]
            problem = pricing.PricingProblem(
                throughput=a, capacity=view.type_capacity, demand=[sol.jobs[r].replicas]
            )
            assert alts[gpu_type] == pytest.approx(pricing.best_response(problem, prices)[0, g])


def test_realise_respects_node_capacity_and_is_a_fixed_point() -> None:
    store = cluster(workload())
    snap = store.freeze(now=100.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("price-discovery", {"backend": "numpy"}).solve(snap, view)
    hists = {j.key: history.History() for j in sol.jobs}
    plan = realise.realise(sol, snap, view, hists, round_no=5)
    used: dict[str, int] = {}
    for c in plan.creates:
        used[c.node] = used.get(c.node, 0) + c.gpus
        spec = c.manifest["spec"]
        meta = c.manifest["metadata"]
        assert spec["schedulerName"] == crd.SCHEDULER_NAME
        assert spec["automountServiceAccountToken"] is False
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(c.gpus)
        assert meta["name"] == f"{c.job.name}-r5-{c.replica}"
        assert meta["labels"][crd.LABEL_JOB] == c.job.name
        assert meta["annotations"][crd.ANN_NODE] == c.node
        assert {crd.ANN_ROUND, crd.ANN_GPU_TYPE, crd.ANN_TIME_SLICE, crd.ANN_PRICE} <= set(
            meta["annotations"]
        )
    capacity = {n.name: int(g) for n, g in zip(view.nodes, view.node_gpus, strict=True)}
    assert all(used[n] <= capacity[n] for n in used)
    for jr in plan.jobs.values():
        if jr.group:
            assert all(n.startswith(jr.gpu_type) for n in jr.nodes)
    assert plan.deletes == ()
    # The pods exist now (created, bound): the same round again keeps every placement.
    for c in plan.creates:
        pod = {**c.manifest, "spec": {**c.manifest["spec"], "nodeName": c.node}}
        store.upsert("pod", pod)
    again = realise.realise(sol, store.freeze(now=101.0), view, hists, round_no=6)
    assert again.creates == () and again.deletes == ()
    assert all(jr.kept for jr in again.jobs.values() if jr.group)


def test_pods_of_deleted_jobs_and_gone_nodes_are_deleted() -> None:
    store = cluster([job("a", {"v100": 1.0})])
    for name, node_name, terminating in (
        ("gone-r1-0", "v100-0", False),
        ("a-r1-0", "v100-7", True),
    ):
        meta: dict[str, Any] = {
            "namespace": "ns",
            "name": name,
            "labels": {crd.LABEL_JOB: name.split("-r")[0], crd.LABEL_REPLICA: "0"},
        }
        if terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        store.upsert("pod", {"metadata": meta, "spec": {"nodeName": node_name}})
    snap = store.freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("price-discovery", {"backend": "numpy"}).solve(snap, view)
    plan = realise.realise(sol, snap, view, {}, round_no=2)
    reasons = {d.pod.name: d.reason for d in plan.deletes}
    assert reasons == {"gone-r1-0": "JobGone", "a-r1-0": "NodeGone"}


def test_incremental_round_keeps_running_gangs() -> None:
    store = cluster([job("a", {"v100": 1.0}, replicas=8)])
    snap = store.freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("price-discovery", {"backend": "numpy"}).solve(snap, view)
    first = realise.realise(sol, snap, view, {}, round_no=1)
    for c in first.creates:
        store.upsert("pod", {**c.manifest, "spec": {**c.manifest["spec"], "nodeName": c.node}})
    store.upsert("job", job("b", {"v100": 1.0}, replicas=8))
    snap2 = store.freeze(now=0.0)
    sol2 = policies.create("price-discovery", {"backend": "numpy"}).solve(snap2, view)
    plan = realise.realise(sol2, snap2, view, {}, round_no=2, incremental=True)
    assert plan.jobs[("ns", "a")].kept and plan.deletes == ()
    assert {c.job.name for c in plan.creates} == {"b"}


def test_psdsf_problem_tenant_model() -> None:
    jobs = [
        job("a1", {"v100": 2.0, "k80": 1.0}, replicas=2, tenant="t1", gpus=2, cpu="4"),
        job("a2", {"v100": 3.0}, replicas=1, tenant="t1", cpu="8"),
        job("b1", {"k80": 1.5}, replicas=3, ns="other"),
    ]
    nodes = [node("v100-0", "v100", 8), node("k80-0", "k80", 4)]
    problem, tenants, node_names = psdsf_problem(jobs, nodes, [pool("v100"), pool("k80")])
    assert tenants == ["other", "t1"] and node_names == ["k80-0", "v100-0"]
    np.testing.assert_array_equal(problem.demand[1], [2.0, 8.0, 0.0])  # elementwise max per pod
    np.testing.assert_array_equal(problem.demand[0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(problem.eligible, [[True, False], [True, True]])
    # Rates normalised per job by its slowest type in the cluster (walras.core.tenants): a1
    # {v100: 2, k80: 1} -> {2, 1}; a2 {v100: 3} -> {1}; b1 {k80: 1.5} -> {1}; a tenant's rate on a
    # node is its jobs' largest there.
    np.testing.assert_array_equal(problem.throughput, [[1.0, 0.0], [1.0, 2.0]])
    # Cap: replicas at their best normalised rate: t1 = 2·2 + 1·1, other = 3·1.
    np.testing.assert_array_equal(problem.cap, [3.0, 5.0])
    # γ: tasks that fit alone × rate, e.g. t1 on v100-0: min(8/2, 32/8) = 4 tasks × 2.
    gamma = fairness.monopoly_tasks(problem)
    assert gamma[1, 1] == pytest.approx(4 * 2.0)
    assert gamma[0, 0] == pytest.approx(4 * 1.0)


def test_psdsf_policy_targets_fit_every_node_in_time() -> None:
    jobs = [*workload()[:6], job("t2", {"k80": 2.0}, replicas=2, tenant="t2")]
    snap = cluster(jobs).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create("psdsf").solve(snap, view)
    assert sol.groups == tuple(n.name for n in view.nodes)
    gpus = np.array([j.replicas * int(g) for j, g in zip(sol.jobs, sol.gpus_per_pod, strict=True)])
    time_share = (sol.targets * gpus[:, None]).sum(axis=0) / view.node_gpus
    assert np.all(time_share <= 1 + 1e-6)
    assert np.all(sol.targets.sum(axis=1) <= 1 + 1e-9)
    tm = tenant_model(list(sol.jobs), view.nodes, snap.pools)
    result = fairness.solve(fairness_problem(tm), mode="tdm")
    assert fairness.certificate(fairness_problem(tm), result.tasks, "tdm") <= 1e-6
    assert sol.tenant_tasks == pytest.approx(
        dict(zip(tm.tenants, np.asarray(result.totals).tolist(), strict=True))
    )


def test_psdsf_distributed_without_agents_fails_clearly() -> None:
    snap = cluster(workload()[:2]).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    with pytest.raises(policies.PolicyUnavailableError, match="node agents"):
        policies.create("psdsf-distributed").solve(snap, view)


def test_psdsf_distributed_aligns_agent_tasks_by_name() -> None:
    """Agents that converged to the central solution give the central policy's targets, whatever
    order they list tenants and nodes in (and extra stale names are ignored)."""
    jobs = [*workload()[:4], job("t2", {"k80": 2.0}, replicas=2, tenant="t2")]
    snap = cluster(jobs).freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    central = policies.create("psdsf").solve(snap, view)
    tm = tenant_model(list(central.jobs), view.nodes, snap.pools)
    tasks = np.asarray(fairness.solve(fairness_problem(tm), mode="tdm").tasks)
    tenants, nodes = list(tm.tenants)[::-1], [*list(tm.node_names)[::-1], "gone-node"]
    shuffled = np.zeros((len(tenants), len(nodes)))
    for n, tenant in enumerate(tenants):
        for k, name in enumerate(nodes[:-1]):
            shuffled[n, k] = tasks[tm.tenants.index(tenant), tm.node_names.index(name)]

    def reader() -> tuple[np.ndarray, list[str], list[str]]:
        return shuffled, tenants, nodes

    dist = policies.create(
        "psdsf-distributed", handle=policies.Handle(distributed_reader=reader)
    ).solve(snap, view)
    np.testing.assert_allclose(dist.targets, central.targets, atol=1e-12)
    assert dist.tenant_tasks == pytest.approx(central.tenant_tasks)

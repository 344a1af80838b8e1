"""PS-DSF uses the cluster: Theorem 2's condition (the PS-DSF paper) on every realised round.

``psdsf`` and ``psdsf-distributed`` run through the scheduling core (``walras.core.cycle.plan``,
the code both shells run) for several rounds on random clusters: GPU types with random speeds,
nodes of 2–8 GPUs, some labelled ``zone=east``, jobs of several tenants with gangs of 1–4 pods
(in the last test some pinned to ``zone=east`` by their template's ``nodeSelector``), each
round's pods applied to the store as the operator's writes would. Oracle, by brute force over the
realised plan: for every node with free GPUs, no active job waits that could run there
(positive throughput on the node's GPU type, its nodeSelector matches, its whole gang fits in
the free GPUs). The agents' tasks for ``psdsf-distributed`` are the central ones scaled by 1.3
(agents that have not converged over-book nodes), which must not break the condition either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walras.allocator import fairness
from walras.core import crd, cycle, policies, snapshot, tenants
from walras.testing import devcluster

SETTINGS = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
ROUNDS = 4


def _store(seed: int, selectors: bool = False) -> snapshot.Store:
    rng = np.random.default_rng(seed)
    types = ["a100", "v100", "t4"][: int(rng.integers(1, 4))]
    store = snapshot.Store()
    for t in types:
        store.upsert(
            "pool",
            {
                "metadata": {"name": t, "generation": 1},
                "spec": {"gpuType": t, "nodeSelector": {crd.GPU_TYPE_LABEL: t}},
            },
        )
    for k in range(int(rng.integers(1, 6))):
        node = devcluster.gpu_node_manifest(
            f"n{k}",
            gpu_type=types[k % len(types)],
            gpus=int(rng.choice([2, 4, 8])),
            cpu="64",
            memory="512Gi",
            labels={"zone": "east" if rng.random() < 0.5 else "west"},
        )
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        store.upsert("node", node)
    for j in range(int(rng.integers(1, 14))):
        pod_spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": str(int(rng.choice([1, 1, 2])))}},
                }
            ]
        }
        if rng.random() < 0.2 and selectors:
            pod_spec["nodeSelector"] = {"zone": "east"}
        store.upsert(
            "job",
            {
                "metadata": {
                    "namespace": f"tenant-{int(rng.integers(0, 3))}",
                    "name": f"job-{j}",
                    "uid": f"uid-{j}",
                    "generation": 1,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                },
                "spec": {
                    "replicas": int(rng.choice([1, 1, 2, 4])),
                    # Raw steps/s spanning two orders of magnitude, some types unusable.
                    "throughput": {
                        t: float(rng.choice([0.0, 1.0, 3.0, 60.0]) * rng.uniform(0.5, 2))
                        for t in types
                    },
                    "template": {"spec": pod_spec},
                },
            },
        )
    return store


def _apply(store: snapshot.Store, plan: cycle.CyclePlan) -> None:
    """What the operator's writes do: deleted pods go, created pods run on their node."""
    for delete in plan.realisation.deletes:
        store.delete("pod", delete.pod.namespace, delete.pod.name)
    for create in plan.realisation.creates:
        pod = dict(create.manifest)
        pod["metadata"] = {**pod["metadata"], "uid": "uid-" + create.name}
        pod["spec"] = {**pod["spec"], "nodeName": create.node}
        pod["status"] = {"phase": crd.PHASE_RUNNING}
        store.upsert("pod", pod)


def _violations(plan: cycle.CyclePlan) -> list[str]:
    """Nodes with free GPUs and a waiting job that could run there (brute force)."""
    snap, view = plan.snapshot, plan.view
    used = {n.name: 0 for n in view.nodes}
    for jr in plan.realisation.jobs.values():
        job = next(j for j in snap.jobs if j.key == jr.key)
        for node, pods in jr.node_pods:
            used[node] += pods * job.gpus_per_pod("nvidia.com/gpu")
    waiting = [
        job
        for job in plan.solution.jobs
        if not plan.realisation.jobs[job.key].group and not job.finished
    ]
    out = []
    for k, node in enumerate(view.nodes):
        free = int(view.node_gpus[k] - view.node_foreign[k]) - used[node.name]
        gpu_type = view.gpu_types[view.node_type[k]]
        for job in waiting:
            fits = job.replicas * job.gpus_per_pod("nvidia.com/gpu") <= free
            selected = all(node.labels.get(a) == b for a, b in job.node_selector.items())
            if fits and selected and job.throughput.get(gpu_type, 0.0) > 0:
                out.append(f"round {plan.round_no}: {node.name} has {free} free, {job.name} waits")
    return out


def _central_reader(store: snapshot.Store, scale: float) -> policies.DistributedReader:
    def read() -> tuple[np.ndarray, list[str], list[str]]:
        snap = store.freeze(now=0.0)
        view = snapshot.cluster_view(snap)
        tm = tenants.tenant_model(list(snap.active_jobs), view.nodes, snap.pools, snap.tenants)
        tasks = np.asarray(fairness.solve(tenants.fairness_problem(tm), mode="tdm").tasks)
        return tasks * scale, list(tm.tenants), list(tm.node_names)

    return read


def _run(store: snapshot.Store, policy: policies.Policy, hold_s: float = 0.0) -> list[str]:
    state = cycle.CycleState()
    found: list[str] = []
    for r in range(1, ROUNDS + 1):
        now = 100.0 * r
        snap = store.freeze(now=now)
        plan = cycle.plan(state, policy, snap, now=now, round_no=r, hold_s=hold_s)
        found += _violations(plan)
        _apply(store, plan)
    return found


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), hold_rounds=st.sampled_from([0.0, 2.0]))
def test_psdsf_leaves_no_gpu_idle_while_a_job_that_can_use_it_waits(
    seed: int, hold_rounds: float
) -> None:
    # Also with the realiser's hold (blocks instead of alternation), in seconds of 100 s rounds.
    store = _store(seed)
    assert _run(store, policies.create("psdsf"), hold_s=100.0 * hold_rounds) == []


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_psdsf_distributed_too_even_with_unconverged_agents(seed: int) -> None:
    store = _store(seed)
    reader = _central_reader(store, 1.3)
    policy = policies.create("psdsf-distributed", handle=policies.Handle(distributed_reader=reader))
    assert _run(store, policy) == []


# Jobs pinned by a nodeSelector: the realiser's backfill mask (``realise._backfill_mask``) offers
# a waiting job only groups with a node its filters accept, so no GPU a pinned job could use idles
# while it waits (before that, 10 of seeds 0-299 left GPUs idle beside a pinned job).
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_psdsf_with_node_selectors(seed: int) -> None:
    store = _store(seed, selectors=True)
    assert _run(store, policies.create("psdsf")) == []

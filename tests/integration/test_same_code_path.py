"""One scheduling core, two shells: ``walras simulate --semantics walras`` and the real operator on
the local control plane place the same jobs on the same GPU types and nodes, round after round.

The scenario: the first 12 jobs of Gavel's ``static_multi_seed0_n100`` trace (Gavel's job types and
scale factors 1, 2, 4 and 8; 23 GPUs asked for) on 3 GPU types of 2 nodes × 4 GPUs (24 GPUs).
Both policies give jobs time fractions on several types, so from round to round jobs are preempted,
resumed and moved between types (the test checks that the scenario does this). ``totalWork`` is
raised to 1e9 steps so no job finishes within the rounds compared, and every job exists before
round 1, so every round is a full one (no arrival or completion triggers an incremental round).

- **Simulator**: ``walras.sim.walras_mechanics.run`` (what ``--semantics walras`` runs) with an
  observer that records each cycle's ``CyclePlan.realisation``.
- **Operator**: the simulator's own node, pool and job manifests created on the API server (kwok
  nodes), and the real ``walras.operator.loop.RoundLoop`` (``walras.kube.writes.Api``, a
  ``snapshot.Store`` fed by the real watch handler, ``handlers.Watcher.apply``, from a LIST before
  each round instead of kopf's watch) on a clock that starts at the jobs' creation time and
  advances by exactly ``round_s`` per round, as the simulator's does. Each round's pods are
  created, bound and run by the API server and kwok; the placement is read back from the pods on
  the API server once the round's binds and deletions have settled.

The two sequences of {job → (GPU type, (node, pods) …)} must be identical. The simulator's pods
never touch an API server and the operator's never touch the simulator, so agreement means the
decisions come from the shared code (``walras.core.cycle.plan``), which a spy on it confirms: every
plan either shell acted on is one that function returned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import BASE, create_pool, install, list_pods, wait_for

from walras.core import crd, cycle, model, policies, snapshot
from walras.kube import client as kubeclient
from walras.kube import writes as kubeapi
from walras.operator import handlers, loop
from walras.sim import walras_mechanics
from walras.sim.config import SimConfig
from walras.sim.scenario import Scenario, load_scenario
from walras.sim.tally import Tally
from walras.sim.trace import read_trace
from walras.testing import devcluster

pytestmark = pytest.mark.slow

TRACE = Path(__file__).resolve().parents[1] / "data" / "gavel" / "static_multi_seed0_n100.trace"
N_JOBS = 12
CLUSTER = "v100=8,p100=8,k80=8"
GPUS_PER_NODE = "4"
ROUND_S = 360.0
ROUNDS = 8
# Far more steps than any job can do in ROUNDS rounds (the fastest rate in Gavel's table is 699
# steps/s, and 8 × 360 s × 699 steps/s = 2.0e6 ≪ 1e9), so nothing completes.
TOTAL_STEPS = 10**9

# job name -> (GPU type, ((node, pods on it), ...) sorted by node)
Placement = dict[str, tuple[str, tuple[tuple[str, int], ...]]]


class _EnoughRoundsError(Exception):
    """Stops the simulator once the compared rounds are recorded (its jobs never finish)."""


def _scenario(arrival: float) -> Scenario:
    trace = read_trace(TRACE)
    jobs = tuple(
        dataclasses.replace(j, total_steps=TOTAL_STEPS, arrival_s=arrival)
        for j in trace.jobs[:N_JOBS]
    )
    return load_scenario(
        dataclasses.replace(trace, jobs=jobs), cluster=CLUSTER, gpus_per_node=GPUS_PER_NODE
    )


def _planned(plan: cycle.CyclePlan) -> Placement:
    """The placement a plan realises: every job with pods this round."""
    return {
        key[1]: (jr.gpu_type, tuple(sorted(jr.node_pods)))
        for key, jr in sorted(plan.realisation.jobs.items())
        if jr.node_pods
    }


# ------------------------------------------------------------------ simulator


def simulate(policy: str, arrival: float, rounds: int) -> list[cycle.CyclePlan]:
    """The first ``rounds`` cycles of ``walras simulate --semantics walras`` (all full rounds)."""
    sc = _scenario(arrival)
    plans: list[cycle.CyclePlan] = []

    def observe(plan: cycle.CyclePlan) -> None:
        plans.append(plan)
        if len(plans) >= rounds:
            raise _EnoughRoundsError

    config = SimConfig(semantics="walras", round_s=ROUND_S, restart_s=0.0)
    with pytest.raises(_EnoughRoundsError):
        walras_mechanics.run(
            sc.workload,
            sc.cluster,
            policy,
            config,
            Tally(sc.workload, sc.cluster.n_gpus),
            observer=observe,
        )
    return plans


# ------------------------------------------------------------------ the real cluster


def _real_job(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A simulator FungibleJob as a user submits it (the API server assigns uid and times)."""
    meta = manifest["metadata"]
    return {**manifest, "metadata": {"namespace": meta["namespace"], "name": meta["name"]}}


def _real_node(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A simulator node as a kwok node: same name, labels and allocatable (kwok adds Ready)."""
    meta = manifest["metadata"]
    allocatable = dict(manifest["status"]["allocatable"])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": meta["name"],
            "labels": dict(meta["labels"]),
            "annotations": {devcluster.KWOK_NODE_ANNOTATION: devcluster.KWOK_NODE_VALUE},
        },
        "status": {"capacity": allocatable, "allocatable": dict(allocatable)},
    }


def _submit_jobs(kube: Any, sc: Scenario) -> float:
    """Create every job within one second of the API server's clock; returns that second.

    ``creationTimestamp`` has one-second resolution and is the job's arrival for the policies
    (Gavel's job order and time since arrival), so the simulator's arrivals are set to it; one
    common second keeps every job's arrival at the first round, as in the simulator. A batch that
    straddles a second boundary is deleted and submitted again at the start of the next second.
    """
    ns = walras_mechanics.NAMESPACE
    path = f"{BASE}/namespaces/{ns}/fungiblejobs"
    for _ in range(5):
        time.sleep(1.0 - time.time() % 1.0)
        for j in range(sc.workload.n_jobs):
            body = _real_job(walras_mechanics.job_manifest(sc.workload, j))
            devcluster.request(kube, "POST", path, body=body)
        items = devcluster.request(kube, "GET", path)["items"]
        stamps = {i["metadata"]["creationTimestamp"] for i in items}
        if len(items) == sc.workload.n_jobs and len(stamps) == 1:
            arrival = model.parse_time(stamps.pop())
            assert arrival is not None
            return arrival
        for item in items:
            devcluster.request(kube, "DELETE", f"{path}/{item['metadata']['name']}")
        wait_for(lambda: not devcluster.request(kube, "GET", path)["items"], 30, "jobs deleted")
    raise AssertionError("could not create the jobs within one second in 5 attempts")


def _mirror(kube: Any, watcher: handlers.Watcher, seen: dict[str, set[tuple[str, str]]]) -> None:
    """The watch handlers' job, by LIST: every object as MODIFIED, vanished ones as DELETED."""
    for kind, (path, selector) in handlers.kinds_paths().items():
        query = {"labelSelector": selector} if selector else None
        items = devcluster.request(kube, "GET", path, query=query)["items"]
        now: set[tuple[str, str]] = set()
        for obj in items:
            meta = obj["metadata"]
            now.add((meta.get("namespace") or "", meta["name"]))
            watcher.apply(kind, {"type": "MODIFIED", "object": obj})
        for ns, name in sorted(seen.get(kind, set()) - now):
            gone = {"metadata": {"namespace": ns, "name": name}}
            watcher.apply(kind, {"type": "DELETED", "object": gone})
        seen[kind] = now


def _settled(kube: Any) -> list[dict[str, Any]] | None:
    """The Walras pods once every one is bound and running and none is being deleted."""
    pods = list_pods(kube, walras_mechanics.NAMESPACE)
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") is not None:
            return None
        if not pod["spec"].get("nodeName") or pod.get("status", {}).get("phase") != "Running":
            return None
    return pods


def _observed(pods: list[dict[str, Any]], node_type: Mapping[str, str]) -> Placement:
    """The placement on the API server: per job, its pods' nodes and those nodes' GPU type."""
    per_job: dict[str, dict[str, int]] = {}
    for pod in pods:
        job = pod["metadata"]["labels"][crd.LABEL_JOB]
        nodes = per_job.setdefault(job, {})
        nodes[pod["spec"]["nodeName"]] = nodes.get(pod["spec"]["nodeName"], 0) + 1
    out: Placement = {}
    for job, nodes in sorted(per_job.items()):
        types = {node_type[n] for n in nodes}
        assert len(types) == 1, f"{job} spans GPU types {sorted(types)}"
        out[job] = (types.pop(), tuple(sorted(nodes.items())))
    return out


async def operate(
    kube: Any, kubeconfig: str, policy: str, arrival: float, rounds: int
) -> list[Placement]:
    """``rounds`` rounds of the real round loop, each read back from the API server."""
    clock_now = [arrival]
    config = loop.LoopConfig(
        policy=policies.PolicyConfig(policy), round_seconds=ROUND_S, clock=lambda: clock_now[0]
    )
    client = kubeclient.api_client(kubeconfig, pool_size=32)  # as walras.operator.main builds it
    store = snapshot.Store()
    rounds_loop = loop.RoundLoop(store, kubeapi.Api(client), config)
    watcher = handlers.Watcher(rounds_loop.cache, rounds_loop)
    node_type = {
        n["metadata"]["name"]: n["metadata"]["labels"][crd.GPU_TYPE_LABEL]
        for n in devcluster.request(kube, "GET", "/api/v1/nodes")["items"]
    }
    seen: dict[str, set[tuple[str, str]]] = {}
    out: list[Placement] = []
    try:
        for r in range(rounds):
            await asyncio.to_thread(_mirror, kube, watcher, seen)
            report = await rounds_loop.run_round(incremental=False)
            assert report.errors == 0, f"round {r + 1}: {report}"
            # What ``RoundLoop.run`` does between rounds: the watch shows the deletions, and the
            # gangs that waited for GPUs still held by deleted pods are bound.
            deadline = time.monotonic() + 60
            while True:
                await asyncio.to_thread(_mirror, kube, watcher, seen)
                await rounds_loop.bind_pending()
                pods = None if rounds_loop.binder.queue else await asyncio.to_thread(_settled, kube)
                if pods is not None:
                    break
                assert time.monotonic() < deadline, f"round {r + 1}: pods did not settle"
                await asyncio.sleep(0.1)
            out.append(_observed(pods, node_type))
            clock_now[0] += ROUND_S
    finally:
        client.close()
    return out


def _setup_cluster(kube: Any, sc: Scenario) -> float:
    install(kube)
    devcluster.create_namespace(kube, walras_mechanics.NAMESPACE)
    for node in sc.cluster.nodes:
        manifest = walras_mechanics.node_manifest(node.name, node.gpu_type, len(node.gpu_ids))
        devcluster.request(kube, "POST", "/api/v1/nodes", body=_real_node(manifest))
    devcluster.wait_nodes_ready(kube, [n.name for n in sc.cluster.nodes])
    for gpu_type in sc.cluster.gpu_types:
        pool = walras_mechanics.pool_manifest(gpu_type)
        body = {"apiVersion": crd.API_VERSION, "kind": crd.POOL_KIND, **pool}
        body["metadata"] = {"name": pool["metadata"]["name"]}  # generation is the server's
        create_pool(kube, body)
    return _submit_jobs(kube, sc)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[cycle.CyclePlan]:
    """Record every plan ``walras.core.cycle.plan`` returns (both shells look it up per call)."""
    returned: list[cycle.CyclePlan] = []
    real: Callable[..., cycle.CyclePlan] = cycle.plan

    def spy(*args: Any, **kwargs: Any) -> cycle.CyclePlan:
        result = real(*args, **kwargs)
        returned.append(result)
        return result

    monkeypatch.setattr(cycle, "plan", spy)
    return returned


def test_the_simulator_plans_only_through_the_core_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a control plane: every cycle the simulator acts on is one ``cycle.plan`` made."""
    returned = _counting(monkeypatch)
    plans = simulate("price-discovery", 0.0, 3)
    assert len(plans) == 3 and all(a is b for a, b in zip(plans, returned, strict=True))


@pytest.mark.parametrize("policy", ["price-discovery", "max-min-fairness"])
def test_simulator_and_operator_place_alike(
    policy: str,
    kube: Any,
    control_plane: devcluster.ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both shells reach the scheduling core through the very same module object.
    assert vars(loop)["cycle"] is cycle and vars(walras_mechanics)["cycle"] is cycle
    placeholder = _scenario(0.0)
    arrival = _setup_cluster(kube, placeholder)

    returned = _counting(monkeypatch)
    plans = simulate(policy, arrival, ROUNDS)
    assert len(returned) == ROUNDS and all(a is b for a, b in zip(plans, returned, strict=True))
    assert not any(p.incremental or p.finished for p in plans)
    assert [p.now for p in plans] == [arrival + r * ROUND_S for r in range(ROUNDS)]
    simulated = [_planned(p) for p in plans]

    returned.clear()
    operated = asyncio.run(operate(kube, control_plane.admin_kubeconfig, policy, arrival, ROUNDS))
    assert len(returned) == ROUNDS  # one plan per round, from the same function
    assert not any(p.finished for p in returned)
    # The API server holds exactly what the operator's plans said (nothing lost in the writes).
    assert [_planned(p) for p in returned] == operated

    for r, (sim_round, real_round) in enumerate(zip(simulated, operated, strict=True)):
        assert sim_round == real_round, f"round {r + 1} differs"
    assert len(simulated) == len(operated) == ROUNDS

    # Not a trivial scenario: jobs are preempted and move between GPU types.
    preempted = {j for a, b in itertools.pairwise(simulated) for j in set(a) - set(b)}
    moved = {
        j for a, b in itertools.pairwise(simulated) for j in set(a) & set(b) if a[j][0] != b[j][0]
    }
    assert preempted and moved, (preempted, moved)

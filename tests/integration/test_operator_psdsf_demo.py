"""PS-DSF uses the cluster: the demo's 12 jobs under ``psdsf`` and ``psdsf-distributed``.

The workload of ``python -m walras.demo --jobs 12 --waves 1`` (``walras.demo.workload``: Gavel's
throughputs, three tenants with Tenant objects weighing 1, 1 and 2, two 4-GPU kwok nodes of each
of k80, p100 and v100), with ``walras operator`` at the demo's 3 s rounds; for
``psdsf-distributed`` one ``walras agent --node-name`` process per node plus the aggregator.
After each of 10 rounds (the operator's ``walras_rounds_total`` counter has moved, so that
round's writes are done) the test reads the pods from the API and checks, by brute force over the
realised placement:

- PS-DSF's Theorem 2 condition: no node has free GPUs while a waiting job could run there
  (positive throughput on the node's GPU type and its whole gang fits in the node's free GPUs;
  under PS-DSF a gang runs on one node);
- the issue's acceptance: every pool is at least 95% allocated whenever a job that can use it
  waits (with 4-GPU nodes a pool with a free GPU is at most 7/8 allocated, so this means full).

Per-round pool utilisation and waiting jobs are printed (``pytest -s``), never asserted beyond
the above. Timeouts only bound a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import BASE, GPU, alive, install, start_operator, wait_for

from walras.core import crd, model
from walras.demo import workload
from walras.testing import devcluster

pytestmark = pytest.mark.slow

ROUNDS = 10
ROUND_SECONDS = 3.0  # the demo's default
WALRAS = str(Path(sys.executable).parent / "walras")


def _setup(kube: Any) -> workload.Workload:
    install(kube)
    load = workload.build(12, *workload.load_throughputs())
    for name, gpu_type, gpus in load.nodes:
        devcluster.create_gpu_node(kube, name, gpu_type=gpu_type, gpus=gpus, wait=False)
    devcluster.wait_nodes_ready(kube, [name for name, _, _ in load.nodes])
    for gpu_type in sorted({t for _, t, _ in load.nodes}):
        devcluster.request(
            kube, "POST", f"{BASE}/resourcepools", body=workload.pool_manifest(gpu_type)
        )
    for namespace in sorted({job.namespace for job in load.jobs}):
        devcluster.create_namespace(kube, namespace)
        body = workload.tenant_manifest(namespace)
        devcluster.request(kube, "POST", f"{BASE}/tenants", body=body)
    for job in load.jobs:
        path = f"{BASE}/namespaces/{job.namespace}/fungiblejobs"
        devcluster.request(kube, "POST", path, body=workload.job_manifest(job))
    return load


def _agents(
    control_plane: devcluster.ControlPlane, nodes: list[str], log_dir: Path
) -> list[subprocess.Popen[bytes]]:
    """One ``walras agent`` per node and the aggregator (the chart's DaemonSet and Deployment)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = []
    for args, name in [*((["--node-name", n], n) for n in nodes), (["--aggregate"], "aggregator")]:
        cmd = [WALRAS, "agent", "--kubeconfig", control_plane.admin_kubeconfig, *args]
        with (log_dir / f"agent-{name}.log").open("ab") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
    return procs


def _next_round(op: Any, seen: int) -> int:
    """Wait until the operator has finished a round after round ``seen``; its number."""
    done: int = wait_for(lambda: op.rounds() > seen and op.rounds(), 120, "the next round")
    return done


def _round_state(kube: Any, load: workload.Workload) -> tuple[dict[str, int], list[str]]:
    """GPUs the round's plan gives each node, and the waiting jobs' names.

    The plan is what the operator wrote: every live Walras pod on its node (``spec.nodeName``
    once bound, the planned node in its ``walras.dev/node`` annotation until then: a gang's new
    pods bind as soon as the pods it replaces have gone, between rounds).
    """
    used = {name: 0 for name, _, _ in load.nodes}
    running: set[tuple[str, str]] = set()
    for pod in devcluster.request(kube, "GET", "/api/v1/pods")["items"]:
        planned = (pod["metadata"].get("annotations") or {}).get(crd.ANN_NODE)
        node = pod["spec"].get("nodeName") or planned
        job = (pod["metadata"].get("labels") or {}).get(crd.LABEL_JOB)
        if job and node in used and alive(pod):
            used[node] += int(model.pod_requests(pod["spec"]).get(GPU, 0.0))
            running.add((pod["metadata"]["namespace"], job))
    waiting = [j.name for j in load.jobs if (j.namespace, j.name) not in running]
    return used, waiting


def _check(
    load: workload.Workload, used: dict[str, int], waiting: list[str], round_no: int
) -> list[str]:
    """Violations of Theorem 2's condition and of the pool acceptance (brute force)."""
    jobs = {j.name: j for j in load.jobs}
    out = []
    pools: dict[str, list[int]] = {}
    for name, gpu_type, gpus in load.nodes:
        pools.setdefault(gpu_type, [0, 0])
        pools[gpu_type][0] += used[name]
        pools[gpu_type][1] += gpus
    for name, gpu_type, gpus in load.nodes:
        free = gpus - used[name]
        for job in (jobs[w] for w in waiting):
            # The demo's pods ask for one GPU each: the gang needs `replicas` GPUs on one node.
            if job.throughput.get(gpu_type, 0.0) > 0 and job.replicas <= free:
                out.append(f"round {round_no}: {name} has {free} free GPUs, {job.name} waits")
                allocated, capacity = pools[gpu_type]
                if allocated < 0.95 * capacity:
                    out.append(f"round {round_no}: pool {gpu_type} {allocated}/{capacity}")
    return out


@pytest.fixture
def cleanup(kube: Any) -> Iterator[list[Any]]:
    """Processes to stop (operator, agents) after the test; then a clean cluster."""
    procs: list[Any] = []
    yield procs
    for proc in procs:
        proc.terminate()  # OperatorProcess.terminate waits; agents are waited for below
    for proc in procs:
        if isinstance(proc, subprocess.Popen):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    devcluster.reset(kube)


@pytest.mark.parametrize("policy", ["psdsf", "psdsf-distributed"])
def test_demo_pools_are_used_whenever_a_job_that_can_use_them_waits(
    kube: Any,
    control_plane: devcluster.ControlPlane,
    tmp_path: Path,
    cleanup: list[Any],
    policy: str,
) -> None:
    load = _setup(kube)
    if policy == "psdsf-distributed":
        cleanup.extend(_agents(control_plane, [n for n, _, _ in load.nodes], tmp_path))
    op = start_operator(control_plane, tmp_path, policy=policy, round_seconds=ROUND_SECONDS)
    cleanup.append(op)
    violations: list[str] = []
    placed_rounds = 0
    seen = 0
    while placed_rounds < ROUNDS:
        seen = _next_round(op, seen)
        used, waiting = _round_state(kube, load)
        if sum(used.values()) == 0:
            continue  # the distributed policy places nothing until the agents have published
        placed_rounds += 1
        by_pool: dict[str, list[int]] = {}
        for name, gpu_type, gpus in load.nodes:
            by_pool.setdefault(gpu_type, [0, 0])
            by_pool[gpu_type][0] += used[name]
            by_pool[gpu_type][1] += gpus
        print(
            f"[{policy}] round {seen}: "
            + " ".join(f"{t} {a}/{c}" for t, (a, c) in sorted(by_pool.items()))
            + f"; waiting {sorted(waiting)}",
            flush=True,
        )
        violations += _check(load, used, waiting, seen)
    assert op.alive()
    assert violations == []

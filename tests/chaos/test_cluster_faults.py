"""Faults in the cluster under a running operator: a node deleted under running gangs, and etcd
restarted while jobs are being created. The invariants hold afterwards
(``walras.testing.invariants``), and the user is told what happened.

Bounds are counted in the operator's own rounds of ``ROUND_S`` seconds (never wall-clock):

- **Node lost.** Each job that had pods on the deleted node gets a Warning Event ``NodeLost``
  naming it (``walras.core.lost_nodes``) in the first round that sees the node gone, and is
  running again on the remaining nodes (which have room for every gang) within two rounds: one
  that deletes its pods (forced: no kubelet will confirm) and places the gang, one to spare
  for a pod deletion the watch shows late.
- **etcd restarted.** The API server stays up; its watches may end or fall behind. A watch that
  fails resumes at most the outage's length + 1 s after etcd is back (``walras.kube.watch``'s
  back-off, reset once the server answers), so every job whose creation succeeded has its status
  within two rounds of the restart (2 · 10 s ≥ the outage + 1 s).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from chaos_helpers import assert_invariants, gpu_cluster, has_status, operator
from operator_helpers import create_job, get_job, job_manifest, list_pods, wait_for

from walras.testing import devcluster

ROUND_S = 10.0


def events(api: Any, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(
        api, "GET", f"/api/v1/namespaces/{namespace}/events"
    )["items"]
    return [e for e in items if e.get("reason") == reason]


def running(api: Any, namespace: str, name: str) -> bool:
    return (get_job(api, namespace, name).get("status") or {}).get("phase") == "Running"


def test_a_deleted_node_is_named_to_each_job_that_ran_there(
    chaos_plane: devcluster.ControlPlane, chaos_api: Any, tmp_path: Path
) -> None:
    ns = devcluster.unique_name("nodelost")
    devcluster.create_namespace(chaos_api, ns)
    gpu_type = gpu_cluster(chaos_api, ns, nodes=3, gpus=4)
    names = [f"j{i}" for i in range(4)]
    for name in names:  # 4 gangs of 2 one-GPU pods: 8 GPUs, which 2 nodes of 4 still hold
        create_job(chaos_api, ns, job_manifest(name, {gpu_type: 1.0}, replicas=2))
    op = operator(chaos_plane, tmp_path, identity="nodelost", round_seconds=ROUND_S)
    try:
        wait_for(lambda: all(running(chaos_api, ns, n) for n in names), 120, "every job running")
        by_node: dict[str, set[str]] = {}
        for pod in list_pods(chaos_api, ns):
            node = pod["spec"].get("nodeName")
            if node:
                by_node.setdefault(node, set()).add(pod["metadata"]["labels"]["walras.dev/job"])
        lost = max(sorted(by_node), key=lambda n: len(by_node[n]))
        affected = by_node[lost]
        t0 = time.monotonic()
        devcluster.delete_nodes(chaos_api, [lost])
        start = op.rounds()

        def told() -> bool:
            named = {
                e["involvedObject"]["name"]
                for e in events(chaos_api, ns, "NodeLost")
                if f"node {lost}" in e["message"]
            }
            return named >= affected

        wait_for(lambda: told() or op.rounds() > start + 1, 120, "the NodeLost Events")
        assert told(), f"jobs {sorted(affected)} were not told that node {lost} is gone"
        told_s = time.monotonic() - t0
        start = op.rounds()
        wait_for(
            lambda: all(running(chaos_api, ns, n) for n in names) or op.rounds() > start + 2,
            180,
            "every job running again",
        )
        assert all(running(chaos_api, ns, n) for n in names)
        print(
            f"node lost: {len(affected)} jobs told {told_s:.1f} s after the delete, all running "
            f"again {time.monotonic() - t0:.1f} s after it (rounds of {ROUND_S:g} s)"
        )
        assert not any(p["spec"].get("nodeName") == lost for p in list_pods(chaos_api, ns))
        assert_invariants(chaos_api, ns, {(ns, n): 2 for n in names}, op)
    finally:
        op.terminate()
        devcluster.delete_namespace(chaos_api, ns)


def test_jobs_created_around_an_etcd_restart_all_get_their_status(
    chaos_plane: devcluster.ControlPlane, chaos_api: Any, tmp_path: Path
) -> None:
    ns = devcluster.unique_name("etcd")
    devcluster.create_namespace(chaos_api, ns)
    gpu_type = gpu_cluster(chaos_api, ns, nodes=4, gpus=8)
    op = operator(chaos_plane, tmp_path, identity="etcd", round_seconds=ROUND_S)
    created: list[str] = []
    stop = threading.Event()

    def load() -> None:  # jobs created one after another, through the restart
        i = 0
        while not stop.is_set():
            try:
                create_job(chaos_api, ns, job_manifest(f"j{i}", {gpu_type: 1.0}, replicas=2))
                created.append(f"j{i}")
            except Exception:  # etcd is down: the API server refuses the write
                stop.wait(0.2)
            i += 1
            stop.wait(0.1)

    thread = threading.Thread(target=load, daemon=True)
    try:
        thread.start()
        wait_for(lambda: len(created) >= 5, 60, "jobs created before the restart")
        t0 = time.monotonic()
        devcluster.restart_component(chaos_plane, "etcd", down_s=2.0)
        back = time.monotonic()
        wait_for(lambda: len(created) >= 15, 120, "jobs created after the restart")
        stop.set()
        thread.join(timeout=30)
        start = op.rounds()
        wait_for(
            lambda: all(has_status(chaos_api, ns, n) for n in created) or op.rounds() > start + 2,
            300,
            "every created job's status",
        )
        missing = [n for n in created if not has_status(chaos_api, ns, n)]
        assert not missing, f"no status within two rounds of the etcd restart: {missing}"
        print(
            f"etcd restart: back {back - t0:.1f} s after the stop; {len(created)} jobs, every "
            f"status {time.monotonic() - back:.1f} s after it was back"
        )
        # 32 GPUs hold 16 gangs of 2; the rest wait: none over a node's GPUs either way.
        assert_invariants(chaos_api, ns, {(ns, n): 2 for n in created}, op)
    finally:
        stop.set()
        op.terminate()
        devcluster.delete_namespace(chaos_api, ns)

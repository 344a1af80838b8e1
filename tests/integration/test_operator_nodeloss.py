"""Scenario 5: node loss. A deleted node's jobs are placed on the remaining nodes at the next round.

Three 4-GPU nodes, two 4-pod jobs that fit on one node each. The node of one running job is
deleted (there is no node controller or pod GC in the test control plane, so its pods stay bound
to a node that no longer exists until the operator force-deletes them). The job must run again,
with every pod on an existing node, and the pool shows one node less.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import (
    alive,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    get_pool,
    install,
    job_manifest,
    list_nodes,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow


def running_nodes(kube: Any, namespace: str, job: str) -> set[str]:
    pods = [p for p in list_pods(kube, namespace, job) if alive(p) and p["spec"].get("nodeName")]
    if len(pods) != 4 or any((p.get("status") or {}).get("phase") != "Running" for p in pods):
        return set()
    return {p["spec"]["nodeName"] for p in pods}


def test_jobs_of_a_lost_node_are_placed_elsewhere(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-nodeloss")
    devcluster.create_namespace(kube, namespace)
    nodes = create_nodes(kube, "v100", "v100", 3, 4)
    create_pool(kube, pool_manifest("v100", "v100"))
    for name in ("a", "b"):
        create_job(kube, namespace, job_manifest(name, {"v100": 1.0}, replicas=4))
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        where = wait_for(lambda: running_nodes(kube, namespace, "a"), 60, "job a to run")
        wait_for(lambda: running_nodes(kube, namespace, "b"), 60, "job b to run")
        lost = sorted(where)[0]
        devcluster.delete_nodes(kube, [lost])

        def replaced() -> set[str]:
            now = running_nodes(kube, namespace, "a")
            existing = {n["metadata"]["name"] for n in list_nodes(kube)}
            return now if now and lost not in now and now <= existing else set()

        new_where = wait_for(replaced, 60, "job a to run on the remaining nodes")
        assert lost not in new_where
        # The pods on the lost node are gone (force-deleted), not stuck terminating.
        wait_for(
            lambda: all(p["spec"].get("nodeName") != lost for p in list_pods(kube, namespace)),
            30,
            "pods of the lost node to be removed",
        )
        wait_for(lambda: get_pool(kube, "v100")["status"]["nodes"] == 2, 30, "pool to shrink")
        assert get_job(kube, namespace, "a")["status"]["phase"] == "Running"
        assert set(nodes) - {lost} >= new_where
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

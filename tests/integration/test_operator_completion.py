"""Job completion: all pods Succeeded, or ``totalWork`` reached, makes a job Succeeded; its pods
are cleaned up and its GPUs go to a waiting job at the next solve.

One 4-GPU node. ``pods-finish`` (2 pods) carries kwok's completion annotation; ``work-done`` (2
pods, throughput 1 work/s, ``totalWork`` 3) finishes by accounting; ``waiting`` (4 pods) needs the
whole node, so it can start only after both others finished.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import (
    alive,
    condition,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow


def test_completed_jobs_free_their_gpus(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-done")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "g", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    create_job(
        kube, namespace, job_manifest("pods-finish", {"g": 1.0}, replicas=2, complete_after_ms=1500)
    )
    create_job(kube, namespace, job_manifest("work-done", {"g": 1.0}, replicas=2, total_work=3.0))
    # Rounds of 8 s: the arrival of `waiting` and the completions trigger incremental rounds, which
    # fill free GPUs without preempting, so `pods-finish` runs its 1.5 s uninterrupted.
    op = start_operator(control_plane, tmp_path, round_seconds=8.0)
    try:
        wait_for(
            lambda: (
                get_job(kube, namespace, "pods-finish").get("status", {}).get("phase") == "Running"
            ),
            60,
            "the first jobs to run",
        )
        create_job(kube, namespace, job_manifest("waiting", {"g": 1.0}, replicas=4))

        def phase(name: str) -> str:
            return str((get_job(kube, namespace, name).get("status") or {}).get("phase"))

        wait_for(lambda: phase("pods-finish") == "Succeeded", 60, "pods-finish to succeed")
        wait_for(lambda: phase("work-done") == "Succeeded", 60, "work-done to succeed")
        done = get_job(kube, namespace, "work-done")
        assert condition(done, "Allocated")["reason"] == "TotalWorkDone"
        assert done["status"]["workDone"] >= 3.0
        assert condition(get_job(kube, namespace, "pods-finish"), "Allocated")["reason"] == (
            "Completed"
        )
        # Their pods are cleaned up and the waiting gang gets the node.
        wait_for(
            lambda: (
                not list_pods(kube, namespace, "pods-finish")
                and not list_pods(kube, namespace, "work-done")
            ),
            30,
            "finished jobs' pods to be deleted",
        )
        wait_for(
            lambda: (
                len(
                    [
                        p
                        for p in list_pods(kube, namespace, "waiting")
                        if alive(p) and p["spec"].get("nodeName")
                    ]
                )
                == 4
            ),
            60,
            "the waiting job to run on the freed GPUs",
        )
        assert phase("pods-finish") == "Succeeded"  # finished jobs stay finished
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

"""Scenario 4: crash recovery. SIGKILL the operator mid-schedule and restart it.

Oversubscribed (6 single-GPU and 2 two-GPU jobs on two 3-GPU nodes), so pods are created and
deleted every round. After the SIGKILL and a restart:

- no duplicate pods: at every sample, each job has at most ``replicas`` live pods, with distinct
  replica indices;
- no lost jobs: every job runs again after the restart;
- the schedule continues: the persisted history (``received``, ``elapsed``) is not reset, and the
  restarted operator uses round numbers above every round used before (fresh pod names).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from operator_helpers import (
    alive,
    create_job,
    create_nodes,
    create_pool,
    install,
    job_manifest,
    list_jobs,
    list_pods,
    node_gpu_usage,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow

JOBS = {**{f"single-{i}": 1 for i in range(6)}, "pair-0": 2, "pair-1": 2}


def check_no_duplicates(kube: Any, namespace: str) -> None:
    by_job: dict[str, list[str]] = {}
    for pod in list_pods(kube, namespace):
        if alive(pod):
            labels = pod["metadata"]["labels"]
            by_job.setdefault(labels["walras.dev/job"], []).append(labels["walras.dev/replica"])
    for job, replicas in by_job.items():
        assert len(replicas) <= JOBS[job], (job, replicas)
        assert len(set(replicas)) == len(replicas), (job, replicas)
    for node, (used, capacity) in node_gpu_usage(kube).items():
        assert used <= capacity, (node, used, capacity)


def total_received(kube: Any, namespace: str) -> dict[str, float]:
    out = {}
    for job in list_jobs(kube, namespace):
        status = job.get("status") or {}
        out[job["metadata"]["name"]] = sum((status.get("received") or {}).values()) + float(
            status.get("elapsed") or 0.0
        )
    return out


def test_sigkill_and_restart_continue_the_schedule(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-crash")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "g", "g", 2, 3)
    create_pool(kube, pool_manifest("g", "g"))
    for name, replicas in JOBS.items():
        create_job(kube, namespace, job_manifest(name, {"g": 1.0}, replicas=replicas))
    first = start_operator(control_plane, tmp_path, round_seconds=2.0, name="first")
    second = None
    try:
        wait_for(lambda: first.rounds() >= 4, 60, "four rounds before the crash")
        # Kill just after a round boundary, while its writes are in flight.
        seen = first.rounds()
        wait_for(lambda: first.rounds() > seen, 30, "a round boundary")
        time.sleep(0.05)
        first.kill()
        before = total_received(kube, namespace)
        rounds_before = max(
            int(p["metadata"]["annotations"]["walras.dev/round"])
            for p in list_pods(kube, namespace)
        )
        check_no_duplicates(kube, namespace)

        second = start_operator(control_plane, tmp_path, round_seconds=2.0, name="second")
        ran_after: set[str] = set()
        start = second.rounds()

        def watching() -> bool:
            # At least 8 rounds; up to 20 while some job has not been seen running yet (each
            # job's share is about 0.6, but binds wait for preempted pods to go, so a short
            # slice can fall between two samples).
            done = second.rounds() - start
            seen_all = ran_after | kept_jobs(kube, namespace, rounds_before) == set(JOBS)
            return done < 8 or (done < 20 and not seen_all)

        while watching():
            check_no_duplicates(kube, namespace)
            for pod in list_pods(kube, namespace):
                annotations = pod["metadata"]["annotations"]
                new = int(annotations["walras.dev/round"]) > rounds_before
                if alive(pod) and pod["spec"].get("nodeName") and new:
                    ran_after.add(pod["metadata"]["labels"]["walras.dev/job"])
            time.sleep(0.3)
        assert second.alive()
        # Every job ran again after the restart, in pods of new rounds (no name reuse).
        assert ran_after | kept_jobs(kube, namespace, rounds_before) == set(JOBS)
        after = total_received(kube, namespace)
        for name in JOBS:
            assert after[name] > before[name], (name, before[name], after[name])
    finally:
        first.kill()
        if second is not None:
            second.terminate()
        devcluster.reset(kube)


def kept_jobs(kube: Any, namespace: str, rounds_before: int) -> set[str]:
    """Jobs still running in their pre-crash pods (kept by the new operator, also fine)."""
    return {
        p["metadata"]["labels"]["walras.dev/job"]
        for p in list_pods(kube, namespace)
        if alive(p)
        and p["spec"].get("nodeName")
        and int(p["metadata"]["annotations"]["walras.dev/round"]) <= rounds_before
    }

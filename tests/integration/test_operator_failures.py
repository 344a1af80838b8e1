"""Pod failures and ``spec.backoffLimit``: real failures are retried up to the limit, then the job
fails; a preempted or disrupted pod never counts.

Two GPU types on one node each:

- ``crash`` (type ``c``, 1 pod, ``backoffLimit: 2``): its pods exit 1 shortly after they start
  (kwok's ``walras.dev/kwok-fail-after-ms``). It runs three times; the third failure exceeds the
  limit, so it ends Failed with ``status.failures == 3``.
- ``victim`` and ``rival`` (type ``g``, 4 pods each on a 4-GPU node, ``victim`` with
  ``backoffLimit: 0``): price discovery gives each half the time, so Walras preempts them in turn.
  One of ``victim``'s pods is also marked Failed with a ``DisruptionTarget`` condition, as an
  eviction does. Had either counted, ``victim`` (limit 0) would have failed.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import (
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

FAIL_AFTER = "walras.dev/kwok-fail-after-ms"


def with_backoff(manifest: dict[str, Any], limit: int) -> dict[str, Any]:
    manifest["spec"]["backoffLimit"] = limit
    return manifest


def test_backoff_limit_counts_real_failures_only(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    ns = devcluster.unique_name("t-fail")
    devcluster.create_namespace(kube, ns)
    create_nodes(kube, "fc", "c", 1, 4)
    create_nodes(kube, "fg", "g", 1, 4)
    create_pool(kube, pool_manifest("c", "c"))
    create_pool(kube, pool_manifest("g", "g"))
    crash = with_backoff(job_manifest("crash", {"c": 1.0}, replicas=1), 2)
    crash["spec"]["template"]["metadata"] = {"annotations": {FAIL_AFTER: "300"}}
    create_job(kube, ns, crash)
    create_job(kube, ns, with_backoff(job_manifest("victim", {"g": 1.0}, replicas=4), 0))
    create_job(kube, ns, job_manifest("rival", {"g": 1.0}, replicas=4))
    op = start_operator(control_plane, tmp_path, round_seconds=1.0)
    try:
        # Preempted in turn: victim stops running (its pods deleted by Walras) at least once.
        preempted = 0
        was_running = False

        def victim_preempted() -> bool:
            nonlocal preempted, was_running
            running = any(
                p["spec"].get("nodeName") and p["metadata"].get("deletionTimestamp") is None
                for p in list_pods(kube, ns, "victim")
            )
            if was_running and not running:
                preempted += 1
            was_running = running
            return preempted >= 1

        wait_for(victim_preempted, 90, "victim to be preempted", interval=0.1)

        # An eviction-like failure of one of victim's pods: Failed with DisruptionTarget.
        def running_victim_pod() -> dict[str, Any] | None:
            for pod in list_pods(kube, ns, "victim"):
                phase = (pod.get("status") or {}).get("phase")
                if phase == "Running" and pod["metadata"].get("deletionTimestamp") is None:
                    return pod
            return None

        pod = wait_for(running_victim_pod, 60, "a running victim pod")
        name = pod["metadata"]["name"]
        now = "2026-01-01T00:00:00Z"
        devcluster.request(
            kube,
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            body={
                "status": {
                    "phase": "Failed",
                    "reason": "Evicted",
                    "conditions": [
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "TerminationByKubelet",
                            "lastTransitionTime": now,
                        }
                    ],
                }
            },
            content_type="application/strategic-merge-patch+json",
        )

        def crash_failed() -> dict[str, Any] | None:
            job = get_job(kube, ns, "crash")
            return job if (job.get("status") or {}).get("phase") == "Failed" else None

        job = wait_for(crash_failed, 90, "crash to fail after its retries")
        assert job["status"]["failures"] == 3
        allocated = condition(job, "Allocated")
        assert allocated is not None and allocated["reason"] == "PodFailed"
        assert "backoffLimit 2 reached after 3 pod failures" in allocated["message"]
        events = devcluster.request(
            kube,
            "GET",
            f"/api/v1/namespaces/{ns}/events",
            query={"fieldSelector": "involvedObject.name=crash"},
        )["items"]
        retries = sorted(e["message"] for e in events if e["reason"] == "PodFailed")
        assert any("retry 1 of 2" in m for m in retries), retries
        assert any("retry 2 of 2" in m for m in retries), retries

        # Victim was preempted and disrupted, and still runs in its turns: no failure counted.
        start = op.rounds()
        wait_for(lambda: op.rounds() >= start + 2, 60, "two more rounds")
        victim = get_job(kube, ns, "victim")
        assert victim["status"]["phase"] in ("Running", "Pending")
        assert victim["status"].get("failures", 0) == 0
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        devcluster.delete_namespace(kube, ns)

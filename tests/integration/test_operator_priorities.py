"""PriorityClasses on the local control plane (kwok nodes), with the operator's price discovery.

- Run to completion: tenant ``excl`` is guaranteed 1 of 1 ``pr100`` GPU and may use the class
  annotated ``walras.dev/time-sharing: "false"``. Its job of that class runs; a second job of the
  same tenant (default class, equal share) waits every round while the first runs: the first
  job's pod is the same pod, round after round, until it completes (kwok ends it after 12 s);
  then the second job runs.
- Reclaim order: tenant ``prio`` runs ``z-hi`` (a class of value 500 it is allowed) and
  ``a-lo`` (no class; first on ties by name) on the 2 ``pw100`` GPUs; another tenant's job
  arrives and takes one GPU back (equal tenant weights: one GPU each). ``a-lo`` loses it,
  ``z-hi`` keeps its very pod. Without the classes both tests fail (checked when written: the
  second job runs in round 3; ``z-hi`` is the one stopped).

Oracles: the rules of ``walras.core.priorities`` and the pods the API server holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_helpers import (
    BASE,
    alive,
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

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def priority_class(name: str, value: int, *, time_sharing: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if not time_sharing:
        meta["annotations"] = {"walras.dev/time-sharing": "false"}
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": meta,
        "value": value,
    }


def tenant(name: str, namespace: str, classes: list[str], quotas: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"namespaces": [namespace], "priorityClasses": classes, "quotas": quotas},
    }


def with_class(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    manifest["spec"]["template"]["spec"]["priorityClassName"] = name
    return manifest


def running(kube: Any, namespace: str, job: str) -> list[str]:
    """Names of the job's pods bound to a node and alive."""
    return [
        p["metadata"]["name"]
        for p in list_pods(kube, namespace, job)
        if alive(p) and p["spec"].get("nodeName")
    ]


def test_a_run_to_completion_job_keeps_its_pod_until_done_while_another_waits(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    ns = devcluster.unique_name("t-prio-x")
    devcluster.create_namespace(kube, ns)
    klass, tname = devcluster.unique_name("exclusive"), devcluster.unique_name("prio-excl")
    devcluster.request(kube, "POST", CLASSES, body=priority_class(klass, 0, time_sharing=False))
    devcluster.request(
        kube,
        "POST",
        f"{BASE}/tenants",
        body=tenant(tname, ns, [klass], {"pr100": {"guaranteed": 1}}),
    )
    create_nodes(kube, "prx", "pr100", 1, 1)
    create_pool(kube, pool_manifest("pr100", "pr100"))
    create_job(
        kube,
        ns,
        with_class(job_manifest("first", {"pr100": 1.0}, gpus=1, complete_after_ms=12000), klass),
    )
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        [pod] = wait_for(lambda: running(kube, ns, "first"), 120, "the first job's pod")
        create_job(kube, ns, job_manifest("second", {"pr100": 1.0}, gpus=1))
        # Equal shares would alternate every round or two (restart and minimum run time are 0
        # here); the first job's class keeps its pod until kwok completes it.
        while get_job(kube, ns, "first").get("status", {}).get("phase") != "Succeeded":
            rounds = op.rounds()
            wait_for(lambda: op.rounds() > rounds, 60, "one more round")  # noqa: B023
            if get_job(kube, ns, "first").get("status", {}).get("phase") == "Succeeded":
                break
            assert running(kube, ns, "first") in ([pod], [])  # [] only as it completes
            assert running(kube, ns, "second") == []
        wait_for(lambda: running(kube, ns, "second"), 120, "the second job after the first")
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        devcluster.request(kube, "DELETE", f"{BASE}/tenants/{tname}")
        devcluster.request(kube, "DELETE", f"{CLASSES}/{klass}")
        devcluster.delete_namespace(kube, ns)


def test_a_reclaim_takes_the_gpu_of_the_lower_class_first(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    ns, other = devcluster.unique_name("t-prio-a"), devcluster.unique_name("t-prio-b")
    for n in (ns, other):
        devcluster.create_namespace(kube, n)
    klass, tname = devcluster.unique_name("high"), devcluster.unique_name("prio-a")
    devcluster.request(kube, "POST", CLASSES, body=priority_class(klass, 500))
    devcluster.request(kube, "POST", f"{BASE}/tenants", body=tenant(tname, ns, [klass], {}))
    create_nodes(kube, "prw", "pw100", 1, 2)
    create_pool(kube, pool_manifest("pw100", "pw100"))
    create_job(kube, ns, with_class(job_manifest("z-hi", {"pw100": 1.0}, gpus=1), klass))
    create_job(kube, ns, job_manifest("a-lo", {"pw100": 1.0}, gpus=1))
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        wait_for(
            lambda: running(kube, ns, "z-hi") and running(kube, ns, "a-lo"),
            120,
            "z-hi and a-lo on both",
        )
        [hi_pod] = running(kube, ns, "z-hi")
        create_job(kube, other, job_manifest("b1", {"pw100": 1.0}, gpus=1))
        wait_for(lambda: running(kube, other, "b1"), 120, "the other tenant's job")
        # The GPU b1 took was lo's: hi still runs its first pod, then and for the next rounds.
        for _ in range(5):
            assert running(kube, ns, "z-hi") == [hi_pod]
            rounds = op.rounds()
            wait_for(lambda: op.rounds() > rounds, 60, "one more round")  # noqa: B023
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        devcluster.request(kube, "DELETE", f"{BASE}/tenants/{tname}")
        devcluster.request(kube, "DELETE", f"{CLASSES}/{klass}")
        for n in (ns, other):
            devcluster.delete_namespace(kube, n)

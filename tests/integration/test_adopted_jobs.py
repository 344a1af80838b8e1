"""Bring your own Job: Indexed batch/v1 Jobs labelled ``walras.dev/managed`` run through suspend.

One 4-GPU kwok node, one pool. ``a`` and ``b``: Indexed Jobs of 2 pods of 2 GPUs each, so each
gang needs the whole node and the two must take turns (time-sharing). ``plain``: the same Job
without the label. ``uneven``: labelled, ``parallelism`` 2 but ``completions`` 3 (not a gang).
The kube-controller-manager of the local control plane runs the Job controller (it makes and
deletes the Jobs' pods) and the garbage collector (deleting a Job deletes its mirror).

The workload finishing is played by the test: once both gangs have run in several slices, their
bound pods get kwok's completion annotation, kwok marks them Succeeded when it runs them, and the
Job controller marks the Job ``Complete``.

Also: a Job one of whose indexes succeeded while the other still ran restarts with the index left
as its whole gang; a rejected Job fixed in place runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_helpers import (
    condition,
    create_nodes,
    create_pool,
    get_job,
    install,
    list_jobs,
    node_gpu_usage,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow

JOBS = "/apis/batch/v1"
GPU = "nvidia.com/gpu"


def indexed_job(
    name: str,
    *,
    pods: int = 2,
    completions: int | None = None,
    managed: bool = True,
    gpus: int = 2,
) -> dict[str, Any]:
    """An Indexed Job of ``pods`` pods of ``gpus`` GPUs, as a team would write it (no
    suspend)."""
    meta: dict[str, Any] = {"name": name}
    if managed:
        meta["labels"] = {"walras.dev/managed": "true"}
        meta["annotations"] = {"walras.dev/throughput": "g=1", "walras.dev/total-work": "1000"}
    container = {
        "name": "train",
        "image": "registry.example/train:1",
        "resources": {"limits": {GPU: str(gpus)}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "parallelism": pods,
            "completions": pods if completions is None else completions,
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def create(kube: Any, namespace: str, manifest: dict[str, Any], *, suspend: bool) -> None:
    body = {**manifest, "spec": {**manifest["spec"], "suspend": suspend}}
    devcluster.request(kube, "POST", f"{JOBS}/namespaces/{namespace}/jobs", body=body)


def batch_job(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    job: dict[str, Any] = devcluster.request(
        kube, "GET", f"{JOBS}/namespaces/{namespace}/jobs/{name}"
    )
    return job


def pods_of(kube: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(
        kube,
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"labelSelector": f"job-name={job}"},
    )["items"]
    return items


def test_adopted_jobs_time_share_complete_and_leave_others_alone(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-byoj")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "g", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    # `b` is created without suspend: no admission policy is installed here, and no pod of it may
    # run before Walras places it (no kube-scheduler: only Walras binds pods).
    create(kube, namespace, indexed_job("a"), suspend=True)
    create(kube, namespace, indexed_job("b"), suspend=False)
    create(kube, namespace, indexed_job("plain", managed=False), suspend=True)
    create(kube, namespace, indexed_job("uneven", completions=3), suspend=True)

    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        # Slices seen: per Job, the rounds of its pods that ran on the node.
        slices: dict[str, set[str]] = {"a": set(), "b": set()}

        def observe() -> None:
            used, capacity = node_gpu_usage(kube)["g-0"]
            assert used <= capacity, f"node g-0 overcommitted: {used} > {capacity} GPUs"
            for job in slices:
                for pod in pods_of(kube, namespace, job):
                    if pod["spec"].get("nodeName"):
                        ann = pod["metadata"].get("annotations") or {}
                        # Bound only as Walras started it: never before it was placed.
                        assert "walras.dev/round" in ann, pod["metadata"]["name"]
                        slices[job].add(ann["walras.dev/round"])

        def several_slices() -> bool:
            observe()
            return all(len(s) >= 2 for s in slices.values())

        wait_for(several_slices, 120, "both Jobs to run in at least two slices each", 0.3)

        # The mirrors replay in the simulator, as `kubectl get fjob -A -o yaml` prints them
        # (taken while they run: the simulator plays unfinished jobs).
        listing = {"apiVersion": "v1", "kind": "List", "items": list_jobs(kube, namespace)}
        trace = tmp_path / "mirrors.yaml"
        trace.write_text(yaml.safe_dump(listing))
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from walras.cli import main; main()",
                "simulate",
                str(trace),
                "--semantics",
                "walras",
                "--cluster",
                "g=4",
                "--gpus-per-node",
                "4",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr + out.stdout

        # Bad input: a mirror that says why, a Warning Event on the Job, left suspended.
        mirror = wait_for(
            lambda: next(
                (
                    condition(j, "Admitted")
                    for j in list_jobs(kube, namespace)
                    if j["metadata"]["name"] == "uneven"
                ),
                None,
            ),
            30,
            "rejection",
        )
        assert mirror["status"] == "False" and mirror["reason"] == "WorkloadRejected"
        assert "spec.parallelism" in mirror["message"]
        events = devcluster.request(
            kube,
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            query={"fieldSelector": "involvedObject.kind=Job,involvedObject.name=uneven"},
        )["items"]
        assert any(e["type"] == "Warning" and "spec.parallelism" in e["message"] for e in events)
        assert batch_job(kube, namespace, "uneven")["spec"]["suspend"] is True
        assert not pods_of(kube, namespace, "uneven")

        # Each Job finishes while it runs: the test plays the workload exiting 0 by giving every
        # bound pod kwok's completion annotation (a pod deleted at its slice's end before kwok
        # ran it does not complete; its gang's next slice gets the annotation again). Its Job
        # is then Complete and its mirror Succeeded; the other Job then has the node.
        def annotate_bound_pods() -> set[str]:
            observe()
            complete = set()
            for job in ("a", "b"):
                if condition(batch_job(kube, namespace, job), "Complete"):
                    complete.add(job)
                    continue
                for p in pods_of(kube, namespace, job):
                    ann = p["metadata"].get("annotations") or {}
                    if (
                        p["spec"].get("nodeName")
                        and p["metadata"].get("deletionTimestamp") is None
                        and devcluster.COMPLETE_AFTER_ANNOTATION not in ann
                    ):
                        devcluster.request(
                            kube,
                            "PATCH",
                            f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}",
                            body={
                                "metadata": {
                                    "annotations": {devcluster.COMPLETE_AFTER_ANNOTATION: "0"}
                                }
                            },
                            content_type="application/merge-patch+json",
                        )
            return complete if complete == {"a", "b"} else set()

        wait_for(annotate_bound_pods, 180, "both Jobs Complete", 0.3)
        for job in ("a", "b"):
            wait_for(
                lambda job=job: (
                    get_job(kube, namespace, job).get("status", {}).get("phase") == "Succeeded"
                ),
                60,
                f"mirror {job} Succeeded",
            )

        # Deleting a Job deletes its mirror (garbage collector, through the ownerReference).
        devcluster.request(
            kube,
            "DELETE",
            f"{JOBS}/namespaces/{namespace}/jobs/a",
            query={"propagationPolicy": "Background"},
        )

        def mirror_gone() -> bool:
            return "a" not in {j["metadata"]["name"] for j in list_jobs(kube, namespace)}

        wait_for(mirror_gone, 60, "the mirror of a deleted Job to go")

        # The unlabelled Job was never written to, and has no mirror.
        plain = batch_job(kube, namespace, "plain")
        assert plain["spec"]["suspend"] is True
        template_meta = plain["spec"]["template"].get("metadata") or {}
        written = {
            **(template_meta.get("labels") or {}),
            **(template_meta.get("annotations") or {}),
        }
        assert not [k for k in written if k.startswith("walras.dev/")], written
        assert "plain" not in op.log_text()
        assert "plain" not in {j["metadata"]["name"] for j in list_jobs(kube, namespace)}
    finally:
        op.terminate()


def complete_pod(kube: Any, namespace: str, name: str) -> None:
    """Play the pod's process exiting 0: kwok marks it Succeeded."""
    devcluster.request(
        kube,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        body={"metadata": {"annotations": {devcluster.COMPLETE_AFTER_ANNOTATION: "0"}}},
        content_type="application/merge-patch+json",
    )


def bound(kube: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods_of(kube, namespace, job)
        if p["spec"].get("nodeName")
        and p["metadata"].get("deletionTimestamp") is None
        and (p.get("status") or {}).get("phase") == "Running"
    ]


def index_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def test_a_job_whose_indexes_end_apart_restarts_with_the_indexes_left_as_its_gang(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-byoj-idx")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "g", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    # Each gang needs the whole node: `a` and `other` take turns.
    create(kube, namespace, indexed_job("a"), suspend=True)
    create(kube, namespace, indexed_job("other", pods=1, gpus=4), suspend=True)
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        # `a` runs: index 0's process ends (exit 0) while index 1's still runs.
        first = wait_for(
            lambda: (lambda ps: ps if len(ps) == 2 else None)(bound(kube, namespace, "a")),
            120,
            "a's gang of 2 running",
            0.3,
        )
        zero = next(p for p in first if index_of(p) == "0")
        complete_pod(kube, namespace, zero["metadata"]["name"])
        wait_for(
            lambda: (
                (batch_job(kube, namespace, "a").get("status") or {}).get("completedIndexes") == "0"
            ),
            60,
            "index 0 counted as succeeded",
        )
        # Its slice ends (`other` runs), then `a` runs again: the Job controller makes a pod for
        # index 1 only, which is now the whole gang of its mirror, and is bound.
        mirror = wait_for(
            lambda: (lambda j: j if j["spec"]["replicas"] == 1 else None)(
                get_job(kube, namespace, "a")
            ),
            60,
            "the mirror's gang to shrink to the index left",
        )
        assert mirror["spec"]["workloadRef"]["name"] == "a"
        first_names = {p["metadata"]["name"] for p in first}

        def restarted() -> list[dict[str, Any]]:
            return [
                p for p in bound(kube, namespace, "a") if p["metadata"]["name"] not in first_names
            ]

        again = wait_for(restarted, 120, "index 1 running again after a slice end", 0.3)
        assert [index_of(p) for p in again] == ["1"]
        complete_pod(kube, namespace, again[0]["metadata"]["name"])
        wait_for(lambda: condition(batch_job(kube, namespace, "a"), "Complete"), 60, "a Complete")
        wait_for(
            lambda: get_job(kube, namespace, "a").get("status", {}).get("phase") == "Succeeded",
            60,
            "a's mirror Succeeded",
        )
    finally:
        op.terminate()


def test_a_rejected_job_fixed_in_place_is_admitted_and_runs(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-byoj-fix")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "g", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    # parallelism 2 but completions 3: not a gang. Rejected, left suspended.
    create(kube, namespace, indexed_job("uneven", completions=3, gpus=1), suspend=True)
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:
        rejected = wait_for(
            lambda: next(
                (condition(j, "Admitted") for j in list_jobs(kube, namespace)),
                None,
            ),
            60,
            "rejection",
        )
        assert rejected["status"] == "False" and rejected["reason"] == "WorkloadRejected"
        # Fixed in place (parallelism may change on a Job): a gang of 3 pods of 1 GPU.
        devcluster.request(
            kube,
            "PATCH",
            f"{JOBS}/namespaces/{namespace}/jobs/uneven",
            body={"spec": {"parallelism": 3}},
            content_type="application/merge-patch+json",
        )

        def admitted() -> dict[str, Any] | None:
            c = condition(get_job(kube, namespace, "uneven"), "Admitted")
            return c if c and c["status"] == "True" else None

        wait_for(admitted, 60, "the mirror admitted again")
        mirror = get_job(kube, namespace, "uneven")
        assert mirror["spec"]["replicas"] == 3
        assert mirror["status"]["phase"] != "Failed"
        running = wait_for(
            lambda: (lambda ps: ps if len(ps) == 3 else None)(bound(kube, namespace, "uneven")),
            120,
            "the fixed Job's gang of 3 running",
            0.3,
        )
        assert sorted(index_of(p) for p in running) == ["0", "1", "2"]
        assert batch_job(kube, namespace, "uneven")["spec"]["suspend"] is False
    finally:
        op.terminate()

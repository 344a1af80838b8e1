"""Kept suspended until placed, and a JobSet adopted as one gang and run by JobSet's own
controller, on the local control plane.

The MutatingAdmissionPolicies of the chart (``charts/walras/files/suspend-managed-workloads.yaml``,
applied as they are) create labelled Jobs and JobSets suspended; an unlabelled Job is left as
written. The JobSet controller is the real one (``sigs.k8s.io/jobset``, built by
``hack/control-plane.sh build`` with its CRD from the same module), with its defaulting and
validating webhooks: it makes the JobSet's child Jobs, the kube-controller-manager's Job
controller their pods, Walras binds them, kwok runs them, and JobSet's controller sets the
JobSet's ``Completed`` condition.

One 4-GPU kwok node and one pool; the JobSet has two replicated Jobs of 2 pods of 1 GPU each: a
gang of 4 pods, which fits the node only whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    apply_policies,
    condition,
    create_nodes,
    create_pool,
    get_job,
    install,
    list_jobs,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
MANAGED = {"walras.dev/managed": "true"}
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


@pytest.fixture(scope="module")
def jobset_controller(control_plane: devcluster.ControlPlane) -> Iterator[None]:
    """JobSet's controller and webhooks on the session's control plane, for this module."""
    if not devcluster.jobset_available():
        message = (
            "the JobSet controller is not built: run `make tools` (hack/control-plane.sh build)"
        )
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail(message + " [WALRAS_REQUIRE_APISERVER=1]", pytrace=False)
        pytest.skip(message)
    devcluster.start_jobset(control_plane)
    try:
        yield
    finally:
        devcluster.stop_jobset(control_plane)


def job_spec(pods: int, gpus: int) -> dict[str, Any]:
    container = {
        "name": "train",
        "image": "registry.example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return {
        "completionMode": "Indexed",
        "parallelism": pods,
        "completions": pods,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
    }


def batch_job(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": job_spec(2, 1),
    }


def test_labelled_workloads_are_created_suspended_and_a_jobset_runs_as_one_gang(
    kube: Any, control_plane: devcluster.ControlPlane, jobset_controller: None, tmp_path: Path
) -> None:
    install(kube)
    policies = apply_policies(kube)
    try:
        namespace = devcluster.unique_name("t-byoj-set")
        devcluster.create_namespace(kube, namespace)
        jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"

        # A policy is enforced a moment after it is created: dry runs until it is.
        def mutated() -> dict[str, Any] | None:
            made: dict[str, Any] = devcluster.request(
                kube, "POST", jobs, body=batch_job("probe", MANAGED), query={"dryRun": "All"}
            )
            return made if made["spec"].get("suspend") else None

        wait_for(mutated, 60, "the admission policy to be enforced")
        made = devcluster.request(kube, "POST", jobs, body=batch_job("labelled", MANAGED))
        assert made["spec"]["suspend"] is True
        assert made["spec"]["template"]["spec"]["schedulerName"] == "walras"
        plain = devcluster.request(kube, "POST", jobs, body=batch_job("plain", {}))
        assert plain["spec"]["suspend"] is False
        assert plain["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"

        # The Job controller saw the labelled Job suspended: no pod was ever made for it.
        def suspended_seen() -> bool:
            job = devcluster.request(kube, "GET", f"{jobs}/labelled")
            conditions = (job.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Suspended" and c["status"] == "True" for c in conditions)

        wait_for(suspended_seen, 60, "the Job controller to see the Job suspended")
        pods = devcluster.request(
            kube,
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            query={"labelSelector": "job-name=labelled"},
        )["items"]
        assert pods == []
        for name in ("labelled", "plain"):
            devcluster.request(
                kube, "DELETE", f"{jobs}/{name}", query={"propagationPolicy": "Background"}
            )

        # A JobSet of two replicated Jobs of 2 pods, created without suspend.
        create_nodes(kube, "g", "g", 1, 4)
        create_pool(kube, pool_manifest("g", "g"))
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "pair", "labels": MANAGED},
            "spec": {
                "replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": job_spec(2, 1)}},
                    {"name": "workers", "replicas": 1, "template": {"spec": job_spec(2, 1)}},
                ]
            },
        }
        sets = f"{JOBSETS}/namespaces/{namespace}/jobsets"

        # The admission policy applies a JobSet's schema once the API server published it:
        # until then a create is refused with 503 (ServiceUnavailable), and retried.
        def create_jobset() -> dict[str, Any] | None:
            try:
                result: dict[str, Any] = devcluster.request(kube, "POST", sets, body=jobset)
            except ApiException as exc:
                if exc.status != 503:
                    raise
                return None
            return result

        made = wait_for(create_jobset, 120, "the JobSet to be admitted", 1.0)
        assert made["spec"]["suspend"] is True
        # Defaulted by JobSet's own webhook: the API server called it.
        assert made["spec"]["successPolicy"]["operator"] == "All"

        op = start_operator(control_plane, tmp_path, round_seconds=2.0)
        try:

            def mirrored() -> dict[str, Any] | None:
                found = [j for j in list_jobs(kube, namespace) if j["metadata"]["name"] == "pair"]
                return found[0] if found else None

            mirror = wait_for(mirrored, 60, "the JobSet's mirror FungibleJob")
            assert mirror["spec"]["replicas"] == 4  # 2 Jobs x 2 pods: one gang
            assert mirror["spec"]["workloadRef"]["kind"] == "JobSet"

            def started() -> dict[str, Any] | None:
                current: dict[str, Any] = devcluster.request(kube, "GET", f"{sets}/pair")
                return None if current["spec"].get("suspend") else current

            running = wait_for(started, 60, "Walras to start the JobSet")
            for rjob in running["spec"]["replicatedJobs"]:
                template = rjob["template"]["spec"]["template"]
                assert template["metadata"]["annotations"]["walras.dev/nodes"] == "g-0,g-0,g-0,g-0"
                assert template["metadata"]["labels"]["walras.dev/job"] == "pair"
                assert template["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "g-0"}

            # JobSet's controller resumes its two child Jobs with the started templates; the Job
            # controller makes 4 pods, all for g-0, which Walras binds there.
            pods_path = f"/api/v1/namespaces/{namespace}/pods"

            def pods() -> list[dict[str, Any]]:
                found: list[dict[str, Any]] = devcluster.request(
                    kube, "GET", pods_path, query={"labelSelector": f"{JOBSET_NAME}=pair"}
                )["items"]
                return found

            def all_bound() -> list[dict[str, Any]] | None:
                current = pods()
                bound = [p for p in current if p["spec"].get("nodeName")]
                return bound if len(current) == len(bound) == 4 else None

            bound = wait_for(all_bound, 120, "the JobSet's 4 pods to be bound")
            assert {p["spec"]["nodeName"] for p in bound} == {"g-0"}
            child_jobs = devcluster.request(
                kube, "GET", jobs, query={"labelSelector": f"{JOBSET_NAME}=pair"}
            )["items"]
            assert sorted(j["metadata"]["name"] for j in child_jobs) == [
                "pair-leader-0",
                "pair-workers-0",
            ]
            assert all(j["spec"]["suspend"] is False for j in child_jobs)

            # The workload exits 0: each pod gets kwok's completion annotation.
            for p in bound:
                devcluster.request(
                    kube,
                    "PATCH",
                    f"{pods_path}/{p['metadata']['name']}",
                    body={"metadata": {"annotations": {devcluster.COMPLETE_AFTER_ANNOTATION: "0"}}},
                    content_type="application/merge-patch+json",
                )

            # The Job controller completes both Jobs, JobSet's controller the JobSet (its success
            # policy, defaulted by its webhook, is "all Jobs"), and the mirror follows.
            def jobset_completed() -> dict[str, Any] | None:
                current: dict[str, Any] = devcluster.request(kube, "GET", f"{sets}/pair")
                return condition(current, "Completed")

            completed = wait_for(jobset_completed, 120, "JobSet's controller to set Completed")
            assert completed["status"] == "True"
            wait_for(
                lambda: (
                    get_job(kube, namespace, "pair").get("status", {}).get("phase") == "Succeeded"
                ),
                60,
                "the mirror to follow the JobSet's Completed condition",
            )
            devcluster.request(
                kube, "DELETE", f"{sets}/pair", query={"propagationPolicy": "Background"}
            )
            wait_for(lambda: not list_jobs(kube, namespace), 60, "the mirror to go with its JobSet")
        finally:
            op.terminate()
    finally:
        for path in policies:
            devcluster.request(kube, "DELETE", path)

"""A Kubeflow Trainer TrainJob adopted as one gang, against its published CRD.

The Trainer's controller does not run here (docs/workloads.md, "Kinds", says why), so the test
checks what the API server holds: the chart's admission policy creates the labelled TrainJob
suspended, Walras makes its mirror (the gang: ``numNodes`` pods of ``resourcesPerNode`` GPUs) and
starts it with a patch the real schema accepts, and the mirror follows the TrainJob's
``Complete`` condition, which the test writes as the Trainer would.

One 4-GPU kwok node and one pool; the TrainJob asks for 2 nodes of 2 GPUs: the node fits it whole.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    apply_policies,
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

REPO = Path(__file__).resolve().parents[2]
TRAINJOB_CRD = REPO / "tests" / "data" / "trainer" / "trainer.kubeflow.org_trainjobs.yaml"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1"


def train_job() -> dict[str, Any]:
    """A TrainJob as a team writes it for the torch runtime, with Walras's one label."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llm", "labels": {"walras.dev/managed": "true"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": "registry.example/train:1",
                "numNodes": 2,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}},
            },
        },
    }


def test_a_labelled_trainjob_is_created_suspended_mirrored_started_and_followed(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    devcluster.install_crds(kube, [TRAINJOB_CRD])
    policies = apply_policies(kube)
    try:
        namespace = devcluster.unique_name("t-byoj-tj")
        devcluster.create_namespace(kube, namespace)
        create_nodes(kube, "g", "g", 1, 4)
        create_pool(kube, pool_manifest("g", "g"))
        jobs = f"{TRAINJOBS}/namespaces/{namespace}/trainjobs"

        # The policy applies a TrainJob's schema once the API server published it (503 until
        # then), and is enforced a moment after it is created: created again until suspended.
        def create() -> dict[str, Any] | None:
            try:
                made: dict[str, Any] = devcluster.request(
                    kube, "POST", jobs, body=train_job(), query={"dryRun": "All"}
                )
            except ApiException as exc:
                if exc.status != 503:
                    raise
                return None
            return made if made["spec"].get("suspend") else None

        wait_for(create, 120, "the admission policy to suspend TrainJobs", 1.0)
        made = devcluster.request(kube, "POST", jobs, body=train_job())
        assert made["spec"]["suspend"] is True

        op = start_operator(control_plane, tmp_path, round_seconds=2.0)
        try:

            def mirrored() -> dict[str, Any] | None:
                found = [j for j in list_jobs(kube, namespace) if j["metadata"]["name"] == "llm"]
                return found[0] if found else None

            mirror = wait_for(mirrored, 60, "the TrainJob's mirror FungibleJob")
            assert mirror["spec"]["replicas"] == 2
            assert mirror["spec"]["workloadRef"]["kind"] == "TrainJob"
            assert mirror["spec"]["workloadRef"]["uid"] == made["metadata"]["uid"]

            def started() -> dict[str, Any] | None:
                current: dict[str, Any] = devcluster.request(kube, "GET", f"{jobs}/llm")
                return None if current["spec"].get("suspend") else current

            running = wait_for(started, 60, "Walras to start the TrainJob")
            spec = running["spec"]
            assert spec["annotations"]["walras.dev/nodes"] == "g-0,g-0"
            assert spec["labels"]["walras.dev/job"] == "llm"
            assert spec["podSpecOverrides"] == [
                {
                    "targetJobs": [{"name": "node"}],
                    "nodeSelector": {"kubernetes.io/hostname": "g-0"},
                }
            ]

            # The Trainer would report Complete once its JobSet completed: the mirror follows.
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            complete = {
                "type": "Complete",
                "status": "True",
                "reason": "JobsCompleted",
                "message": "TrainJob is completed",
                "lastTransitionTime": now,
            }
            devcluster.request(
                kube,
                "PATCH",
                f"{jobs}/llm/status",
                body={"status": {"conditions": [complete]}},
                content_type="application/merge-patch+json",
            )
            wait_for(
                lambda: (
                    get_job(kube, namespace, "llm").get("status", {}).get("phase") == "Succeeded"
                ),
                60,
                "the mirror to follow the TrainJob's Complete condition",
            )
            devcluster.request(
                kube, "DELETE", f"{jobs}/llm", query={"propagationPolicy": "Background"}
            )
            wait_for(
                lambda: not list_jobs(kube, namespace), 60, "the mirror to go with its TrainJob"
            )
        finally:
            op.terminate()
    finally:
        for path in policies:
            devcluster.request(kube, "DELETE", path)

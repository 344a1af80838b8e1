"""Ownership: Walras touches only pods whose controller ownerReference is their FungibleJob, and
deleting a FungibleJob removes its pods through the garbage collector (kube-controller-manager).

One 4-GPU node. ``train`` (1 pod) runs. Next to it a user creates two pods labelled
``walras.dev/job`` without Walras's ownerReference: ``impostor`` names the live job ``train``
(unbound, Walras's scheduler name, as if Walras had made it) and ``stray`` names no job and runs on
the node. Over several rounds neither is deleted nor bound by Walras. Then the operator stops and
``train`` is deleted: its pod disappears anyway, so the garbage collector did it.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import (
    GPU,
    create_job,
    create_nodes,
    create_pool,
    delete_job,
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


def user_pod(name: str, job: str, *, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "walras",
        "automountServiceAccountToken": False,
        "containers": [
            {"name": "c", "image": "registry.example/x:1", "resources": {"limits": {GPU: "1"}}}
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"walras.dev/job": job}},
        "spec": spec,
    }


def test_user_labelled_pods_are_never_touched_and_job_pods_are_garbage_collected(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    ns = devcluster.unique_name("t-own")
    devcluster.create_namespace(kube, ns)
    (node,) = create_nodes(kube, "own", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    create_job(kube, ns, job_manifest("train", {"g": 1.0}, replicas=1))
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    impostor = devcluster.request(kube, "POST", pods_path, body=user_pod("impostor", "train"))
    stray = devcluster.request(kube, "POST", pods_path, body=user_pod("stray", "ghost", node=node))
    op = start_operator(control_plane, tmp_path, round_seconds=1.0)
    try:
        wait_for(
            lambda: get_job(kube, ns, "train").get("status", {}).get("phase") == "Running",
            60,
            "train to run",
        )
        start = op.rounds()
        wait_for(lambda: op.rounds() >= start + 4, 60, "four more rounds")
        for before in (impostor, stray):
            now = devcluster.request(kube, "GET", f"{pods_path}/{before['metadata']['name']}")
            assert now["metadata"]["uid"] == before["metadata"]["uid"]  # never re-created
            assert now["metadata"].get("deletionTimestamp") is None
        # Walras never bound the impostor, though it carries Walras's scheduler name and job.
        assert not devcluster.request(kube, "GET", f"{pods_path}/impostor")["spec"].get("nodeName")
        owned = [p for p in list_pods(kube, ns, "train") if p["metadata"].get("ownerReferences")]
        assert len(owned) == 1
        ref = owned[0]["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["controller"]) == ("FungibleJob", "train", True)
        assert ref["uid"] == get_job(kube, ns, "train")["metadata"]["uid"]
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
    # With no operator running, only the garbage collector can remove train's pod.
    delete_job(kube, ns, "train")
    owned_name = owned[0]["metadata"]["name"]

    def collected() -> bool:
        names = {p["metadata"]["name"] for p in list_pods(kube, ns)}
        return owned_name not in names

    wait_for(collected, 60, "the garbage collector to delete train's pod")
    remaining = {p["metadata"]["name"] for p in list_pods(kube, ns)}
    assert remaining == {"impostor", "stray"}
    devcluster.delete_namespace(kube, ns)

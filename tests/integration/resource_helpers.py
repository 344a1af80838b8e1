"""Per-node resource accounting read from the API server, for the issue-14 integration tests.

:func:`overcommitted` is the safety oracle "no node goes over any resource": for every node and
every resource it reports, the requests of the pods bound there and not finished (counted as
Kubernetes counts them: ``walras.core.model.pod_requests``) stay within the node's allocatable,
and the pod count within ``allocatable[pods]``. :func:`extended_node` builds a kwok node that
also reports ephemeral storage and hugepages, optionally tainted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from walras.core import model
from walras.testing import devcluster


def overcommitted(kube: Any) -> list[str]:
    """``node: resource used/allocatable`` for every resource any node is over on."""
    nodes = devcluster.request(kube, "GET", "/api/v1/nodes")["items"]
    allocatable = {
        n["metadata"]["name"]: {
            r: model.quantity(v) for r, v in (n.get("status") or {}).get("allocatable", {}).items()
        }
        for n in nodes
    }
    used: dict[str, dict[str, float]] = {name: {} for name in allocatable}
    for pod in devcluster.request(kube, "GET", "/api/v1/pods")["items"]:
        node = pod["spec"].get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        bucket = used.setdefault(node, {})
        for name, value in model.pod_requests(pod["spec"]).items():
            bucket[name] = bucket.get(name, 0.0) + value
        bucket["pods"] = bucket.get("pods", 0.0) + 1
    over = []
    for node, bucket in sorted(used.items()):
        for name, value in sorted(bucket.items()):
            have = allocatable.get(node, {}).get(name, 0.0)
            if value > have * (1 + 1e-9):
                over.append(f"{node}: {name} {value:g}/{have:g}")
    return over


def extended_node(
    kube: Any,
    name: str,
    gpu_type: str,
    *,
    gpus: int,
    cpu: str = "32",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> None:
    """Create a kwok node with GPUs, cpu, memory, 100Gi ephemeral storage, 1Gi hugepages-2Mi."""
    manifest = devcluster.gpu_node_manifest(
        name, gpu_type=gpu_type, gpus=gpus, cpu=cpu, labels=labels
    )
    for part in ("capacity", "allocatable"):
        manifest["status"][part].update({"ephemeral-storage": "100Gi", "hugepages-2Mi": "1Gi"})
    if taints:
        manifest["spec"] = {"taints": [dict(t) for t in taints]}
    devcluster.request(kube, "POST", "/api/v1/nodes", body=manifest)


def daemon_pod(kube: Any, namespace: str, node: str) -> None:
    """A DaemonSet-like pod bound to ``node``: ephemeral storage, hugepages and cpu, no GPU."""
    resources = {"ephemeral-storage": "1Gi", "hugepages-2Mi": "512Mi", "cpu": "1"}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"agent-{node}", "namespace": namespace},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.example/agent:1",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }
    devcluster.request(kube, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body)

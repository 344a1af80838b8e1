"""The demo's API writes: namespaces, kwok GPU nodes, ResourcePools and FungibleJobs.

Called by ``walras.demo.runner`` against a fresh local control plane (admin credentials). Reads
go through ``walras.cli.inspect_cmd.list_jobs``/``list_pools`` so the demo shows exactly what
``walras status`` would.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from walras.demo import workload

GROUP, VERSION = "walras.dev", "v1alpha1"


def ensure_binaries(console: Console, repo_root: Path) -> None:
    """Build kube-apiserver/etcd/kwok/kubelet, fetch kubectl/helm and the real nodes' packages, and
    build the pause and workload images once (cached) if they are missing, as `make tools` does
    (the images only as root on Linux; elsewhere the demo runs on kwok nodes alone)."""
    from walras.testing import devcluster

    if devcluster.binaries_available():
        return
    console.print("[yellow]control-plane binaries missing: building them once (cached)[/yellow]")
    for script in (
        ["bash", "hack/control-plane.sh", "build"],
        ["bash", "hack/install-tools.sh"],
        ["bash", "hack/real-node.sh", "build-tools"],
    ):
        subprocess.run(script, cwd=repo_root, check=True)


def create_nodes_and_pools(api: Any, load: workload.Workload) -> None:
    from kubernetes import client

    from walras.testing import devcluster

    # Create all nodes first and wait for them together: kwok marks them Ready in one pass.
    for name, gpu_type, gpus in load.nodes:
        devcluster.create_gpu_node(api, name, gpu_type=gpu_type, gpus=gpus, wait=False)
    devcluster.wait_nodes_ready(api, [name for name, _, _ in load.nodes])
    custom = client.CustomObjectsApi(api)
    for gpu_type in sorted({t for _, t, _ in load.nodes}):
        custom.create_cluster_custom_object(
            GROUP, VERSION, "resourcepools", workload.pool_manifest(gpu_type)
        )


def create_namespaces(api: Any, load: workload.Workload) -> None:
    from kubernetes import client

    from walras.testing import devcluster

    # devcluster's helper also creates the `default` ServiceAccount (before any pod needs it).
    custom = client.CustomObjectsApi(api)
    for namespace in sorted({job.namespace for job in load.jobs}):
        devcluster.create_namespace(api, namespace)
        # The tenant's weight is the admin's, on a Tenant object (a job's tenant is its namespace).
        custom.create_cluster_custom_object(
            GROUP, VERSION, "tenants", workload.tenant_manifest(namespace)
        )


def submit_jobs(api: Any, jobs: Sequence[workload.DemoJob]) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    for job in jobs:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, job.namespace, "fungiblejobs", workload.job_manifest(job)
        )


def kubectl_get(control_plane: Any) -> str:
    """What a user sees with kubectl: the CRDs' printer columns for pools and jobs."""
    from walras.testing import devcluster

    kubectl = devcluster.tool("kubectl")
    out = []
    # The nodes with the label that marks the real ones (the others are kwok).
    nodes = ["get", "nodes", "-L", "walras.dev/real-node,walras.dev/gpu-type"]
    for args in (nodes, ["get", "rpool"], ["get", "fjob", "-A"]):
        result = subprocess.run(
            [kubectl, *args],
            env=control_plane.env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        out.append(f"$ kubectl {' '.join(args)}\n{result.stdout}{result.stderr}")
    return "\n".join(out)

"""The reference training job as tests and benchmarks run it on real nodes.

- :func:`setup_namespace`: the ServiceAccount, Role and RoleBinding of
  ``examples/workloads/fungiblejob.yaml`` (what the workload needs to report its progress) in a
  namespace;
- :func:`train_job`: that file's FungibleJob with a given name, length, pod size and checkpoint
  directory (a host directory: the local real nodes share the host's file system, as the
  example's hostPath says), running ``examples/workloads/train.py`` with a small model paced at
  a known rate, so that a slice of a given length is a known number of steps on a shared machine,
  on real nodes only (``nodeSelector`` ``walras.dev/real-node=true``).

Test and benchmark infrastructure: the example file is read from the repository.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from walras.testing import devcluster, realnodes

GPU = "nvidia.com/gpu"


def example_path() -> Path:
    """``examples/workloads/fungiblejob.yaml`` of the repository ``hack/`` belongs to."""
    return devcluster.hack_dir().parent / "examples" / "workloads" / "fungiblejob.yaml"


def example_docs() -> list[dict[str, Any]]:
    """The example's objects, as written."""
    return [d for d in yaml.safe_load_all(example_path().read_text()) if d]


def setup_namespace(api: Any, namespace: str) -> None:
    """The example's ServiceAccount, Role and RoleBinding, in ``namespace``."""
    for doc in example_docs():
        if doc["kind"] in ("Namespace", "FungibleJob"):
            continue
        body = copy.deepcopy(doc)
        body["metadata"]["namespace"] = namespace
        for subject in body.get("subjects", []):
            subject["namespace"] = namespace
        if doc["kind"] == "ServiceAccount":
            path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        else:
            plural = {"Role": "roles", "RoleBinding": "rolebindings"}[doc["kind"]]
            path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}"
        devcluster.request(api, "POST", path, body=body)


def train_job(
    name: str,
    checkpoints: Path,
    steps: int,
    *,
    gpus_per_pod: int = 2,
    pace_s: float = 0.01,
    grace_s: int = 10,
    checkpoint_every_s: float = 300.0,
    gpu_type: str = "fake-a100",
) -> dict[str, Any]:
    """The example's FungibleJob, ``steps`` long, pods of ``gpus_per_pod`` GPUs, a small model
    paced at ``pace_s`` per step (a known rate on a shared machine), checkpoints in the host
    directory ``checkpoints`` (every ``checkpoint_every_s`` and on SIGTERM)."""
    job = copy.deepcopy(next(d for d in example_docs() if d["kind"] == "FungibleJob"))
    job["metadata"] = {"name": name}
    spec = job["spec"]
    spec["totalWork"] = steps
    spec["throughput"] = {gpu_type: 100.0}
    pod = spec["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = grace_s
    # Real nodes only: a kwok node would "run" the pod without a process (and a work-conserving
    # round may give a waiting job idle GPUs of a type it has no throughput for).
    pod["nodeSelector"] = {realnodes.REAL_NODE_LABEL: "true"}
    container = pod["containers"][0]
    container["imagePullPolicy"] = "Never"
    container["args"] = [
        "--steps",
        str(steps),
        "--checkpoint-every",
        str(checkpoint_every_s),
        "--batch",
        "16",
        "--features",
        "8",
        "--hidden",
        "16",
        "--pace",
        str(pace_s),
        "--log-every",
        "0",
    ]
    # A quarter of a core each: six pods of three jobs fit on a shared 2-core machine.
    container["resources"]["limits"] = {GPU: str(gpus_per_pod), "cpu": "250m"}
    for volume in pod["volumes"]:
        if volume["name"] == "checkpoints":
            volume["hostPath"] = {"path": str(checkpoints), "type": "DirectoryOrCreate"}
    return job

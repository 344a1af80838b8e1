"""The reference training job as tests and benchmarks run it on real nodes.

- :func:`setup_namespace`: the ServiceAccount, Role and RoleBinding of
  ``examples/workloads/fungiblejob.yaml`` (what the workload needs to report its progress) in a
  namespace;
- :func:`train_job`: that file's FungibleJob with a given name, length, pod size and checkpoint
  directory (a host directory: the local real nodes share the host's file system, as the
  example's hostPath says), running ``examples/workloads/train.py`` with a small model paced at
  a known rate, so that a slice of a given length is a known number of steps on a shared machine,
  on real nodes only (``nodeSelector`` ``walras.dev/real-node=true``);
- :func:`train_batch_job`: the same workload as a team brings it (``docs/workloads.md``, "Bring
  your Job"): an Indexed ``batch/v1`` Job labelled ``walras.dev/managed``, what the FungibleJob's
  spec says in annotations, and the pod identity from the downward API (Walras cannot add it: a
  Job's containers are immutable); the replica is the Job controller's ``JOB_COMPLETION_INDEX``.

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


def train_batch_job(
    name: str,
    checkpoints: Path,
    steps: int,
    *,
    pods: int = 2,
    gpus_per_pod: int = 2,
    pace_s: float = 0.01,
    gpu_type: str = "fake-a100",
    backoff_limit: int = 0,
) -> dict[str, Any]:
    """:func:`train_job` as an Indexed Job of ``pods`` pods, created without ``suspend``."""
    job = train_job(
        name, checkpoints, steps, gpus_per_pod=gpus_per_pod, pace_s=pace_s, gpu_type=gpu_type
    )
    spec = job["spec"]
    template = copy.deepcopy(spec["template"])
    container = template["spec"]["containers"][0]
    # The example's WALRAS_REPLICA reads the walras.dev/replica label, which a Job's pods lack:
    # the workload falls back on JOB_COMPLETION_INDEX. The pod's name cannot come from its
    # hostname (the Job controller sets it to <job>-<index>): the downward API gives it.
    env = [e for e in container.get("env", []) if e["name"] != "WALRAS_REPLICA"]
    env += [
        {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for var, path in (
            ("WALRAS_POD_NAME", "metadata.name"),
            ("WALRAS_POD_NAMESPACE", "metadata.namespace"),
        )
    ]
    container["env"] = env
    throughput = ",".join(f"{t}={v:g}" for t, v in spec["throughput"].items())
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"walras.dev/managed": "true"},
            "annotations": {
                "walras.dev/throughput": throughput,
                "walras.dev/total-work": str(steps),
            },
        },
        "spec": {
            "completionMode": "Indexed",
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": backoff_limit,
            "template": template,
        },
    }

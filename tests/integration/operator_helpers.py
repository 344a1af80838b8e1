"""Helpers for tests that run ``walras operator`` against the real local control plane.

Used by ``tests/integration/test_operator_*.py`` and meant for the e2e and chart tests too:

- :class:`OperatorProcess` / :func:`start_operator`: the operator as a subprocess
  (``--no-leader-elect``, admin kubeconfig, a free port for health and metrics, log in a file), with
  ``terminate`` (SIGTERM), ``kill`` (SIGKILL), ``rounds()`` (the ``walras_rounds_total`` metric) and
  ``log_text()``;
- object builders: :func:`pool_manifest`, :func:`job_manifest`, :func:`create_pool`,
  :func:`create_job`, :func:`create_nodes`;
- readers: :func:`get_job`, :func:`list_jobs`, :func:`get_pool`, :func:`list_pods`,
  :func:`node_gpu_usage`, :func:`condition`;
- :func:`wait_for`: poll a predicate until it returns something truthy (never a timed assertion:
  the timeout only bounds a hang).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from walras.core import model
from walras.testing import devcluster

REPO = Path(__file__).resolve().parents[2]
CRDS = sorted((REPO / "crds").glob("*.yaml"))
BASE = "/apis/walras.dev/v1alpha1"
GPU = "nvidia.com/gpu"

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``predicate`` until it returns a truthy value, which is returned."""
    end = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except AssertionError as exc:  # a predicate may assert with a useful message
            last_error = exc
        if time.monotonic() > end:
            detail = f": {last_error}" if last_error else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError:
        return 0, ""


@dataclass
class OperatorProcess:
    """A ``walras operator`` subprocess."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics as ``name{label=value,...}`` -> value."""
        status, body = http_get(self.port, "/metrics")
        if status != 200:
            return {}
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
        return out

    def rounds(self) -> int:
        return int(self.metrics().get("walras_rounds_total", 0.0))

    def full_rounds(self) -> int:
        """Full (not incremental) rounds logged so far: one per ``round_seconds`` while leading,
        where incremental rounds run on events in between."""
        return self.log_text().count('"incremental": false')

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def terminate(self, timeout: float = 20.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: no clean-up at all (crash-recovery tests)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def start_operator(
    cp: devcluster.ControlPlane,
    log_dir: Path,
    *,
    policy: str = "price-discovery",
    round_seconds: float = 2.0,
    backend: str = "numpy",
    name: str = "operator",
    extra: Sequence[str] = (),
    wait_rounds: int = 0,
) -> OperatorProcess:
    """Start ``walras operator`` and wait until it serves /healthz (and ``wait_rounds`` rounds)."""
    port = free_port()
    log = log_dir / f"{name}-{port}.log"
    command = [
        sys.executable,
        "-c",
        "from walras.cli import main; main()",
        "operator",
        "--no-leader-elect",
        "--policy",
        policy,
        "--round-seconds",
        str(round_seconds),
        "--policy-arg",
        f"price-discovery.backend={backend}",
        "--kubeconfig",
        cp.admin_kubeconfig,
        "--health-port",
        str(port),
        "--metrics-port",
        str(port),
        # Rounds of seconds here: restarts priced at the default 10 s would hold every gang for
        # hundreds of rounds. The tests check Gavel's rotation; ``extra`` may set it again.
        "--restart-seconds",
        "0",
        # Likewise the minimum run time: the default 60 s is 30 rounds of 2 s, and the tests
        # check that slices rotate every round or two.
        "--min-run-seconds",
        "0",
        *extra,
    ]
    with log.open("ab") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    op = OperatorProcess(process, port, log)

    def serving() -> bool:
        if not op.alive():
            raise RuntimeError(f"operator exited with {process.returncode}:\n{op.log_text()}")
        return http_get(port, "/healthz")[0] == 200

    wait_for(serving, 90, "the operator to serve /healthz")
    if wait_rounds:
        wait_for(lambda: op.rounds() >= wait_rounds, 90, f"{wait_rounds} operator rounds")
    return op


# ------------------------------------------------------------------ objects


def pool_manifest(
    name: str, gpu_type: str, *, selector: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "ResourcePool",
        "metadata": {"name": name},
        "spec": {
            "gpuType": gpu_type,
            "nodeSelector": dict(selector or {devcluster.GPU_TYPE_LABEL: gpu_type}),
        },
    }


def job_manifest(
    name: str,
    throughput: Mapping[str, float],
    *,
    replicas: int = 1,
    gpus: int | None = None,
    utility: Mapping[str, Any] | None = None,
    tenant: str | None = None,
    total_work: float | None = None,
    complete_after_ms: int | None = None,
    node_selector: Mapping[str, str] | None = None,
    cpu: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": "registry.example/train:1"}
    resources: dict[str, Any] = {}
    if gpus is not None:
        resources["limits"] = {GPU: str(gpus)}
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    if resources:
        container["resources"] = resources
    template: dict[str, Any] = {"spec": {"containers": [container], "restartPolicy": "Never"}}
    if complete_after_ms is not None:
        template["metadata"] = {
            "annotations": {devcluster.COMPLETE_AFTER_ANNOTATION: str(complete_after_ms)}
        }
    if node_selector:
        template["spec"]["nodeSelector"] = dict(node_selector)
    spec: dict[str, Any] = {
        "replicas": replicas,
        "throughput": dict(throughput),
        "template": template,
    }
    if utility is not None:
        spec["utility"] = dict(utility)
    if tenant is not None:
        spec["tenant"] = tenant
    if total_work is not None:
        spec["totalWork"] = total_work
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_pool(kube: Any, manifest: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = devcluster.request(
        kube, "POST", f"{BASE}/resourcepools", body=dict(manifest)
    )
    return result


def create_job(kube: Any, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    result: dict[str, Any] = devcluster.request(
        kube, "POST", f"{BASE}/namespaces/{namespace}/fungiblejobs", body=body
    )
    return result


def delete_job(kube: Any, namespace: str, name: str) -> None:
    devcluster.request(kube, "DELETE", f"{BASE}/namespaces/{namespace}/fungiblejobs/{name}")


def create_nodes(kube: Any, prefix: str, gpu_type: str, count: int, gpus: int) -> list[str]:
    """``count`` kwok nodes ``<prefix>-<i>`` with ``gpus`` GPUs each, Ready on return."""
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        devcluster.create_gpu_node(kube, name, gpu_type=gpu_type, gpus=gpus, wait=False)
    devcluster.wait_nodes_ready(kube, names)
    return names


def get_job(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = devcluster.request(
        kube, "GET", f"{BASE}/namespaces/{namespace}/fungiblejobs/{name}"
    )
    return result


def list_jobs(kube: Any, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(
        kube, "GET", f"{BASE}/namespaces/{namespace}/fungiblejobs"
    )["items"]
    return sorted(items, key=lambda j: j["metadata"]["name"])


def get_pool(kube: Any, name: str) -> dict[str, Any]:
    result: dict[str, Any] = devcluster.request(kube, "GET", f"{BASE}/resourcepools/{name}")
    return result


def list_pools(kube: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(kube, "GET", f"{BASE}/resourcepools")["items"]
    return items


def list_nodes(kube: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(kube, "GET", "/api/v1/nodes")["items"]
    return items


def list_pods(
    kube: Any, namespace: str | None = None, job: str | None = None
) -> list[dict[str, Any]]:
    """Walras pods (label ``walras.dev/job``), optionally of one namespace and job."""
    selector = f"walras.dev/job={job}" if job else "walras.dev/job"
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    items: list[dict[str, Any]] = devcluster.request(
        kube, "GET", path, query={"labelSelector": selector}
    )["items"]
    return items


def alive(pod: Mapping[str, Any]) -> bool:
    """Not being deleted and not finished."""
    return pod["metadata"].get("deletionTimestamp") is None and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


def node_gpu_usage(kube: Any) -> dict[str, tuple[float, float]]:
    """Per node: (GPUs requested by pods bound to it and not finished, allocatable GPUs)."""
    capacity = {
        n["metadata"]["name"]: model.quantity(n["status"].get("allocatable", {}).get(GPU, 0))
        for n in list_nodes(kube)
    }
    used: dict[str, float] = dict.fromkeys(capacity, 0.0)
    pods = devcluster.request(kube, "GET", "/api/v1/pods")["items"]
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        used[node] = used.get(node, 0.0) + model.pod_requests(pod["spec"]).get(GPU, 0.0)
    return {n: (used.get(n, 0.0), capacity.get(n, 0.0)) for n in sorted(set(used) | set(capacity))}


def condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def install(kube: Any) -> None:
    """A clean cluster with the Walras CRDs installed."""
    devcluster.reset(kube)
    devcluster.install_crds(kube, CRDS)


def names(objs: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


# The chart's MutatingAdmissionPolicies (labelled workloads are created suspended), as they are.
POLICIES = REPO / "charts" / "walras" / "files" / "suspend-managed-workloads.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def apply_policies(kube: Any) -> list[str]:
    """Create (or replace) the chart's admission policies; their paths, for the caller to delete."""
    paths = []
    for doc in yaml.safe_load_all(POLICIES.read_text()):
        plural = {
            "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
            "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
        }[doc["kind"]]
        path = f"{ADMISSION}/{plural}/{doc['metadata']['name']}"
        try:
            devcluster.request(kube, "POST", f"{ADMISSION}/{plural}", body=doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
            # Left by a chart release in this control plane: replaced by the file's own.
            current = devcluster.request(kube, "GET", path)
            version = current["metadata"]["resourceVersion"]
            body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": version}}
            devcluster.request(kube, "PUT", path, body=body)
        paths.append(path)
    return paths

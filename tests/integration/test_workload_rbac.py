"""The progress reporter's grant on a real API server: its own pod's annotation, nothing else.

The chart's Role (``patch`` on pods) and its admission policy (``progressReporter.ownPodOnly``)
are rendered with helm and applied; two pods run as the ServiceAccount ``trainer``. A token bound
to pod ``a`` (what the kubelet mounts into ``a``: a TokenRequest with ``boundObjectRef``) is
used by ``walras.workload``'s own HTTPS client, exactly as inside the pod. Oracles: the API
server's answers — ``a`` may set its ``walras.dev/steps-done``; patching ``b``, or changing
anything else on ``a`` (a label, another annotation), is refused with 403 naming the policy's
message; the annotation the operator reads is the number sent. Then the reference workload
itself (``examples/workloads/train.py``, a real process) reports through that grant, is stopped
by SIGTERM, and the count on the pod is the step of the checkpoint it left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils

from walras.core import model, progress
from walras.testing import devcluster
from walras.workload import ApiServer, ReportError, checkpoint, progress_patch

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "walras"


def _render(*args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [devcluster.tool("helm"), "template", "walras", str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"keep": "me"}},
        "spec": {
            "serviceAccountName": "trainer",
            "containers": [{"name": "train", "image": "localhost/walras-workload:dev"}],
        },
    }


@dataclass
class Reporter:
    """Pod ``a``'s credentials, as the kubelet would mount them, and the API."""

    server: ApiServer
    core: Any
    namespace: str


@pytest.fixture
def reporter(kube: Any, namespace: str, tmp_path: Path) -> Iterator[Reporter]:
    release = devcluster.unique_name("rbac")  # the policy is cluster-scoped: a name of its own
    docs = _render(
        "--set",
        f"fullnameOverride={release}",
        "--set",
        f"progressReporter.namespaces={{{namespace}}}",
        "--set",
        "progressReporter.serviceAccounts={trainer}",
    )
    mine = [d for d in docs if "progress-reporter" in d["metadata"]["name"]]
    assert {d["kind"] for d in mine} == {
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    core = client.CoreV1Api(kube)
    admission = client.AdmissionregistrationV1Api(kube)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "trainer"}})
    try:
        for doc in mine:
            utils.create_from_dict(kube, doc, namespace=namespace)
        a = core.create_namespaced_pod(namespace, _pod(namespace, "a"))
        core.create_namespaced_pod(namespace, _pod(namespace, "b"))
        token = core.create_namespaced_service_account_token(
            "trainer",
            namespace,
            {
                "spec": {
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "a",
                        "uid": a.metadata.uid,
                    },
                    "expirationSeconds": 600,
                }
            },
        )
        (tmp_path / "token").write_text(token.status.token)
        server = ApiServer(
            url=kube.configuration.host,
            token_file=tmp_path / "token",
            ca_file=Path(kube.configuration.ssl_ca_cert),
        )
        # The policy takes effect once the API server has loaded it: until b is refused.
        deadline = time.monotonic() + 60
        while True:
            try:
                server.patch_pod(namespace, "b", progress_patch(1))
            except ReportError as exc:
                refusal = str(exc)
                break
            assert time.monotonic() < deadline, "patching another pod was never refused"
            core.patch_namespaced_pod(  # undo, so b's annotations are its own again
                "b", namespace, {"metadata": {"annotations": {progress.ANN_STEPS_DONE: None}}}
            )
            time.sleep(0.5)
        assert "HTTP 403" in refusal and "only its own pod" in refusal
        yield Reporter(server, core, namespace)
    finally:
        for doc in mine:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                admission.delete_validating_admission_policy(doc["metadata"]["name"])
            elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
                admission.delete_validating_admission_policy_binding(doc["metadata"]["name"])


def _steps(r: Reporter, pod: str) -> int | None:
    raw = r.core.api_client.sanitize_for_serialization(r.core.read_namespaced_pod(pod, r.namespace))
    text = model.parse_pod(raw).steps_done
    return progress.parse_steps(text) if text else None


def test_a_reporter_patches_its_own_annotation_and_nothing_else(reporter: Reporter) -> None:
    r = reporter
    r.server.patch_pod(r.namespace, "a", progress_patch(1200))
    assert _steps(r, "a") == 1200
    for body in (
        {"metadata": {"labels": {"walras.dev/job": "other"}}},  # a label
        {"metadata": {"annotations": {"keep": None}}},  # removing an annotation
        {"metadata": {"annotations": {"walras.dev/node": "x"}}},  # another annotation
    ):
        with pytest.raises(ReportError, match=r"only the walras\.dev/steps-done annotation"):
            r.server.patch_pod(r.namespace, "a", body)
    assert _steps(r, "b") is None


def test_the_reference_workload_reports_through_the_grant(
    reporter: Reporter, tmp_path: Path
) -> None:
    r = reporter
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "WALRAS_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "WALRAS_API_URL": r.server.url,
        "WALRAS_TOKEN_FILE": str(r.server.token_file),
        "WALRAS_CA_FILE": str(r.server.ca_file),
        "WALRAS_POD_NAME": "a",
        "WALRAS_POD_NAMESPACE": r.namespace,
    }
    small = ["--batch", "16", "--features", "8", "--hidden", "8", "--log-every", "1000000000"]
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "workloads" / "train.py"), *small],
        env={**env, "TRAIN_STEPS": "100000000"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("step 0 loss")  # the loop is running
    deadline = time.monotonic() + 60
    while (_steps(r, "a") or 0) < 1:  # the report after the first step reached the pod
        assert time.monotonic() < deadline, "no progress report reached pod a"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "progress report failed" not in err
    stopped = int(re.findall(r"stopping at step (\d+) \(SIGTERM\): exit 0", err)[0])
    found = checkpoint.latest(tmp_path / "ckpt")
    assert found is not None and found[0] == stopped
    assert _steps(r, "a") == stopped  # the last report is the checkpoint's step

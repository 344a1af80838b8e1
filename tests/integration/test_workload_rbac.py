"""The progress reporter's grant on a real API server: its own pod's annotation, nothing else.

The chart's Role (``patch`` on pods) and its admission policy (``progressReporter.ownPodOnly``)
are rendered with helm and applied; two pods run as the ServiceAccount ``trainer``. A token bound
to pod ``a`` (what the kubelet mounts into ``a``: a TokenRequest with ``boundObjectRef``) is
used by ``walras.workload``'s own HTTP client, exactly as inside the pod. Oracles: the API
server's answers — ``a`` may set its ``walras.dev/steps-done``; patching ``b``, or changing
anything else on ``a`` (a label, another annotation), is refused with 403 naming the policy's
message; the annotation the operator reads is the number sent.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils

from walras.core import model, progress
from walras.testing import devcluster
from walras.workload import ApiServer, ReportError, progress_patch

pytestmark = pytest.mark.slow

CHART = Path(__file__).resolve().parents[2] / "charts" / "walras"


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


def test_a_reporter_patches_its_own_annotation_and_nothing_else(
    kube: Any, namespace: str, tmp_path: Path
) -> None:
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

        server.patch_pod(namespace, "a", progress_patch(1200))
        raw = kube.sanitize_for_serialization(core.read_namespaced_pod("a", namespace))
        pod = model.parse_pod(raw)
        assert progress.parse_steps(pod.steps_done) == 1200

        for body in (
            {"metadata": {"labels": {"walras.dev/job": "other"}}},  # a label
            {"metadata": {"annotations": {"keep": None}}},  # removing an annotation
            {"metadata": {"annotations": {"walras.dev/node": "x"}}},  # another annotation
        ):
            with pytest.raises(ReportError, match=r"only the walras\.dev/steps-done annotation"):
                server.patch_pod(namespace, "a", body)
        b = core.read_namespaced_pod("b", namespace)
        assert progress.ANN_STEPS_DONE not in (b.metadata.annotations or {})
    finally:
        for doc in mine:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                admission.delete_validating_admission_policy(doc["metadata"]["name"])
            elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
                admission.delete_validating_admission_policy_binding(doc["metadata"]["name"])

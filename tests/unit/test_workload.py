"""walras.workload: the patch a workload sends, and which pod it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from walras import workload
from walras.core import model, progress
from walras.workload import identity


class FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append((name, namespace, body))


def test_report_progress_patches_own_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WALRAS_POD_NAME", "train-r3-0")
    monkeypatch.setenv("WALRAS_POD_NAMESPACE", "team-a")
    api = FakeApi()
    workload.report_progress(1200, api=api)
    [(name, namespace, body)] = api.calls
    assert (name, namespace) == ("train-r3-0", "team-a")
    # What the operator reads back from the patched pod is the number reported.
    pod = model.parse_pod(
        {"metadata": {"name": name, "namespace": namespace, **body["metadata"]}, "spec": {}}
    )
    assert progress.parse_steps(pod.steps_done) == 1200


def test_hostname_fallback_and_missing_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"HOSTNAME": "train-r3-1", "WALRAS_POD_NAMESPACE": "ns"}
    assert workload.pod_identity(env) == ("ns", "train-r3-1")
    monkeypatch.setattr(identity, "NAMESPACE_FILE", Path("/nonexistent/namespace"))
    with pytest.raises(RuntimeError, match="WALRAS_POD_NAMESPACE"):
        workload.pod_identity({"HOSTNAME": "x"})


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_steps_rejected(bad: Any) -> None:
    with pytest.raises(ValueError):
        workload.progress_patch(bad)

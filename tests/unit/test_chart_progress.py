"""The chart's progress-reporter Role and RoleBinding (docs/progress.md), rendered offline.

Oracle: what ``walras.workload.report_progress`` sends (a PATCH of its own pod, after nothing
else), so the Role must allow exactly get and patch on pods, in the listed namespaces only, bound
to the listed ServiceAccounts; nothing is rendered by default.
"""

from __future__ import annotations

import kubernetes_validate
from test_chart_render import KUBE_VERSION, helm, render

__all__ = ["helm"]  # the fixture, imported for pytest


def test_nothing_by_default(helm: str) -> None:
    docs = render(helm)
    assert not [d for d in docs if "progress-reporter" in d["metadata"]["name"]]


def test_role_and_binding_per_namespace(helm: str) -> None:
    docs = render(
        helm,
        "--set",
        "progressReporter.namespaces={team-a,team-b}",
        "--set",
        "progressReporter.serviceAccounts={trainer}",
    )
    mine = [d for d in docs if "progress-reporter" in d["metadata"]["name"]]
    for doc in mine:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    roles = {d["metadata"]["namespace"]: d for d in mine if d["kind"] == "Role"}
    bindings = {d["metadata"]["namespace"]: d for d in mine if d["kind"] == "RoleBinding"}
    assert sorted(roles) == sorted(bindings) == ["team-a", "team-b"]
    for namespace, role in roles.items():
        assert role["rules"] == [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}
        ]
        binding = bindings[namespace]
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "trainer", "namespace": namespace}
        ]

"""The chart's progress-reporter Role and RoleBinding (docs/progress.md), rendered offline.

Oracle: what ``walras.workload.report_progress`` sends (a JSON merge PATCH of its own pod, with
no GET before it), so the Role must allow exactly patch on pods, in the listed namespaces only,
bound to the listed ServiceAccounts; nothing is rendered by default. The admission policy that
narrows it to the pod's own annotation is exercised on a real API server in
``tests/integration/test_workload_rbac.py``.
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
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
        binding = bindings[namespace]
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "trainer", "namespace": namespace}
        ]


def test_own_pod_policy_names_every_reporter_and_can_be_turned_off(helm: str) -> None:
    args = [
        "--set",
        "progressReporter.namespaces={team-a,team-b}",
        "--set",
        "progressReporter.serviceAccounts={trainer}",
    ]
    docs = render(helm, *args)
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    [binding] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    kubernetes_validate.validate(policy, KUBE_VERSION, strict=True)
    kubernetes_validate.validate(binding, KUBE_VERSION, strict=True)
    [condition] = policy["spec"]["matchConditions"]
    for ns in ("team-a", "team-b"):
        assert f"'system:serviceaccount:{ns}:trainer'" in condition["expression"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
    ]
    off = render(helm, *args, "--set", "progressReporter.ownPodOnly=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [d["kind"] for d in off if "progress-reporter" in d["metadata"]["name"]].count(
        "Role"
    ) == 2

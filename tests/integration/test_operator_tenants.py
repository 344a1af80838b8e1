"""Tenants are the admins' business: users cannot create, edit or read ``Tenant`` objects, the
controller (with the chart's RBAC) only reads them, and the operator maps jobs to tenants by
namespace, never by what a job says.

- A user ServiceAccount with the built-in ``edit`` ClusterRole in its namespace (what a team
  usually gets) is refused every verb on Tenants.
- The controller's identity, bound to the ClusterRole ``helm template`` renders from the chart, may
  get/list/watch Tenants and nothing else on them.
- Tenant ``research`` lists two namespaces: a job in one of them is in tenant ``research`` (its
  ``status.tenant``), though its ``spec.tenant`` names another; a job elsewhere is in its
  namespace's tenant.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    BASE,
    REPO,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow

CHART = REPO / "charts" / "walras"


def tenant(name: str, namespaces: list[str], weight: float = 1.0) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"weight": weight, "namespaces": namespaces},
    }


def status_of(client: Any, method: str, path: str, body: Any = None) -> int:
    """HTTP status of one request (2xx as 200)."""
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    try:
        devcluster.request(client, method, path, body=body, content_type=content_type)
    except ApiException as exc:
        return int(exc.status)
    return 200


def controller_rbac(tmp_path: Path) -> list[dict[str, Any]]:
    """The chart's controller ClusterRole and ClusterRoleBinding, as ``helm template`` renders."""
    rendered = subprocess.run(
        [
            str(devcluster.tool("helm")),
            "template",
            "walras",
            str(CHART),
            "--namespace",
            "walras-system",
            "--show-only",
            "templates/controller-rbac.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    return [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_only_admins_write_tenants_and_jobs_belong_to_their_namespace_tenant(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    install(kube)
    ns_a, ns_b, ns_c = (devcluster.unique_name(f"t-ten-{x}") for x in "abc")
    for ns in (ns_a, ns_b, ns_c):
        devcluster.create_namespace(kube, ns)
    devcluster.request(kube, "POST", f"{BASE}/tenants", body=tenant("research", [ns_a, ns_b], 3))

    # A user: ServiceAccount alice with `edit` in her namespace.
    devcluster.request(
        kube,
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns_a}/rolebindings",
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": ns_a}],
        },
    )
    alice = devcluster.new_client(
        devcluster.service_account_kubeconfig(
            control_plane, ns_a, "alice", tmp_path / "alice.kubeconfig"
        )
    )
    # The controller: the chart's ClusterRole bound to walras-system/walras-controller, which
    # the control plane's operator.kubeconfig authenticates as.
    applied: list[str] = []
    for doc in controller_rbac(tmp_path):
        plural = "clusterroles" if doc["kind"] == "ClusterRole" else "clusterrolebindings"
        path = f"/apis/rbac.authorization.k8s.io/v1/{plural}"
        devcluster.request(kube, "POST", path, body=doc)
        applied.append(f"{path}/{doc['metadata']['name']}")
    controller = devcluster.new_client(control_plane.operator_kubeconfig)
    try:
        one = f"{BASE}/tenants/research"
        # alice could otherwise work in her namespace (edit): pods, for instance.
        assert status_of(alice, "GET", f"/api/v1/namespaces/{ns_a}/pods") == 200
        for method, path, body in (
            ("POST", f"{BASE}/tenants", tenant("mine", [ns_a], 100)),
            ("PATCH", one, {"spec": {"weight": 100}}),
            ("DELETE", one, None),
            ("GET", one, None),
            ("GET", f"{BASE}/tenants", None),
        ):
            assert status_of(alice, method, path, body) == 403, (method, path)
        # Reads only, for the controller.
        assert status_of(controller, "GET", one) == 200
        assert status_of(controller, "GET", f"{BASE}/tenants") == 200
        for method, path, body in (
            ("POST", f"{BASE}/tenants", tenant("ctl", [ns_c])),
            ("PATCH", one, {"spec": {"weight": 100}}),
            ("DELETE", one, None),
        ):
            assert status_of(controller, method, path, body) == 403, (method, path)
    finally:
        alice.close()
        controller.close()
        for path in applied:
            devcluster.request(kube, "DELETE", path)

    # The operator maps jobs to tenants by namespace.
    create_nodes(kube, "ten", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    create_job(kube, ns_b, job_manifest("in-research", {"g": 1.0}, tenant="somebody-else"))
    create_job(kube, ns_c, job_manifest("own-tenant", {"g": 1.0}))
    op = start_operator(control_plane, tmp_path, round_seconds=2.0)
    try:

        def tenants() -> tuple[str, str] | None:
            a = (get_job(kube, ns_b, "in-research").get("status") or {}).get("tenant")
            c = (get_job(kube, ns_c, "own-tenant").get("status") or {}).get("tenant")
            return (a, c) if a and c else None

        assert wait_for(tenants, 60, "both jobs' tenants") == ("research", ns_c)
        assert "Traceback" not in op.log_text()
    finally:
        op.terminate()
        devcluster.request(kube, "DELETE", f"{BASE}/tenants/research")
        for ns in (ns_a, ns_b, ns_c):
            devcluster.delete_namespace(kube, ns)

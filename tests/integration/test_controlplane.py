"""Acceptance tests of the local control plane on the real kube-apiserver + etcd + kwok.

Oracles are the API server's own answers (HTTP status codes, stored objects, the pods' phases as
kwok drives them, the authenticated identity from SelfSubjectReview) and the binaries' reported
versions; nothing here compares timings.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from walras.testing import devcluster

pytestmark = pytest.mark.integration


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll until ``condition()`` is truthy and return it; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def gpu_pod(name: str, *, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": "walras",
            "containers": [
                {
                    "name": "train",
                    "image": "example.invalid/train:1",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(gpus)},
                        "requests": {"cpu": "1", "memory": "1Gi"},
                    },
                }
            ],
        },
    }


def pod_phase(core: Any, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).status.phase)


@pytest.fixture
def gpu_node(kube: Any) -> Any:
    """A factory for kwok GPU nodes that are deleted after the test."""
    created: list[str] = []

    def make(gpus: int, gpu_type: str = "a100") -> str:
        name = devcluster.unique_name(f"kwok-{gpu_type}")
        devcluster.create_gpu_node(kube, name, gpu_type=gpu_type, gpus=gpus)
        created.append(name)
        return name

    yield make
    devcluster.delete_nodes(kube, created)


def test_smoke_bind_pod_to_kwok_gpu_node(kube: Any, namespace: str, gpu_node: Any) -> None:
    core = k8s.CoreV1Api(kube)
    node_name = gpu_node(8)

    node = core.read_node(node_name)
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.metadata.labels[devcluster.GPU_TYPE_LABEL] == "a100"
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)

    core.create_namespaced_pod(namespace, gpu_pod("smoke", gpus=1))
    pod = core.read_namespaced_pod("smoke", namespace)
    # No scheduler runs here: an unbound pod stays Pending with no node.
    assert pod.spec.scheduler_name == "walras"
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"

    binding = k8s.V1Binding(
        metadata=k8s.V1ObjectMeta(name="smoke"),
        target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node_name),
    )
    # The server answers a Binding with a Status, which the typed client cannot read back as a
    # V1Binding (pydantic ValidationError after the pod was bound); the raw answer is fine.
    response = core.create_namespaced_binding(namespace, binding, _preload_content=False)
    assert response.status == 201
    assert json.loads(response.data)["status"] == "Success"

    wait_for(lambda: pod_phase(core, namespace, "smoke") == "Running", "the pod to run")
    pod = core.read_namespaced_pod("smoke", namespace)
    assert pod.spec.node_name == node_name
    assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
    assert pod.status.container_statuses[0].state.running is not None
    assert pod.status.pod_ip


def test_binding_over_capacity_runs_and_is_flagged(
    kube: Any, namespace: str, gpu_node: Any
) -> None:
    """kwok is no kubelet: it does not run admission (a kubelet would fail the pod with reason
    OutOfnvidia.com/gpu). A pod bound beyond the node's capacity runs; the apiserver accepts the
    binding. Capacity is the binder's (Walras's) job; devcluster.overcommitted_nodes flags it."""
    core = k8s.CoreV1Api(kube)
    node_name = gpu_node(2)
    for name in ("first", "second"):
        core.create_namespaced_pod(namespace, gpu_pod(name, gpus=2))
        devcluster.bind_pod(kube, namespace, name, node_name)
    for name in ("first", "second"):
        wait_for(lambda n=name: pod_phase(core, namespace, n) == "Running", f"{name} to run")
    assert devcluster.overcommitted_nodes(kube) == {node_name: (4, 2)}

    core.delete_namespaced_pod("second", namespace)
    wait_for(lambda: not devcluster.overcommitted_nodes(kube), "the overcommitment to end")


def test_pod_completes_after_annotation(kube: Any, namespace: str, gpu_node: Any) -> None:
    core = k8s.CoreV1Api(kube)
    node_name = gpu_node(8)
    annotations = {devcluster.COMPLETE_AFTER_ANNOTATION: "300"}
    core.create_namespaced_pod(namespace, gpu_pod("finite", gpus=1, annotations=annotations))
    core.create_namespaced_pod(namespace, gpu_pod("forever", gpus=1))
    devcluster.bind_pod(kube, namespace, "finite", node_name)
    devcluster.bind_pod(kube, namespace, "forever", node_name)

    wait_for(lambda: pod_phase(core, namespace, "finite") == "Succeeded", "the pod to succeed")
    pod = core.read_namespaced_pod("finite", namespace)
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.reason == "Completed"
    # The pod without the annotation keeps running (it was bound at the same time).
    assert pod_phase(core, namespace, "forever") == "Running"
    # A finished pod no longer counts against the node's capacity.
    assert devcluster.overcommitted_nodes(kube) == {}


def test_deleted_pod_disappears(kube: Any, namespace: str, gpu_node: Any) -> None:
    core = k8s.CoreV1Api(kube)
    node_name = gpu_node(8)
    core.create_namespaced_pod(namespace, gpu_pod("doomed", gpus=1))
    devcluster.bind_pod(kube, namespace, "doomed", node_name)
    wait_for(lambda: pod_phase(core, namespace, "doomed") == "Running", "the pod to run")

    # Default grace period (30 s): the apiserver only marks the bound pod; kwok removes it.
    core.delete_namespaced_pod("doomed", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("doomed", namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, "kwok to remove the deleted pod", timeout=20)


WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.cptest.example.com
spec:
  group: cptest.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wdg]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              colour: {type: string, enum: [red, green]}
          status:
            type: object
            properties:
              ready: {type: boolean}
"""


def test_crd_round_trip_and_schema_validation(kube: Any, namespace: str, tmp_path: Path) -> None:
    crd_file = tmp_path / "widget.yaml"
    crd_file.write_text(WIDGET_CRD)
    assert devcluster.install_crds(kube, [crd_file]) == ("widgets.cptest.example.com",)
    # Installing again updates in place.
    assert devcluster.install_crds(kube, [crd_file]) == ("widgets.cptest.example.com",)
    custom = k8s.CustomObjectsApi(kube)
    args = ("cptest.example.com", "v1", namespace, "widgets")
    try:
        good = {
            "apiVersion": "cptest.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "good"},
            "spec": {"size": 3, "colour": "red"},
        }
        custom.create_namespaced_custom_object(*args, good)
        stored = custom.get_namespaced_custom_object(*args, "good")
        assert stored["spec"] == {"size": 3, "colour": "red"}

        stored["status"] = {"ready": True}
        custom.replace_namespaced_custom_object_status(*args, "good", stored)
        assert custom.get_namespaced_custom_object(*args, "good")["status"] == {"ready": True}

        bad = {**good, "metadata": {"name": "bad"}, "spec": {"size": 11, "colour": "blue"}}
        with pytest.raises(ApiException) as rejected:
            custom.create_namespaced_custom_object(*args, bad)
        assert rejected.value.status == 422
        assert "spec.size" in rejected.value.body and "spec.colour" in rejected.value.body

        unknown = {**good, "metadata": {"name": "unknown"}, "spec": {"size": 1, "sise": 2}}
        with pytest.raises(ApiException) as strict:
            custom.create_namespaced_custom_object(*args, unknown, field_validation="Strict")
        assert strict.value.status == 400 and "sise" in strict.value.body

        # Server-side dry run validates without storing (how custom resources are validated
        # offline-ish; built-in kinds use kubernetes-validate).
        dry = {**good, "metadata": {"name": "dry"}}
        custom.create_namespaced_custom_object(*args, dry, dry_run="All")
        listed = custom.list_namespaced_custom_object(*args)["items"]
        assert [item["metadata"]["name"] for item in listed] == ["good"]
    finally:
        devcluster.request(
            kube,
            "DELETE",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.cptest.example.com",
        )


def test_kubectl_and_helm_run(control_plane: devcluster.ControlPlane) -> None:
    env = control_plane.env()
    kubectl = devcluster.tool("kubectl")
    assert not kubectl.startswith("/usr/")
    result = subprocess.run(
        [kubectl, "version", "-o", "json"], env=env, capture_output=True, text=True, check=True
    )
    versions = json.loads(result.stdout)
    # The version comes from -ldflags -X at build time: clients see a real one.
    assert versions["serverVersion"]["gitVersion"] == "v1.36.3"
    assert versions["serverVersion"]["minor"] == "36"
    assert versions["clientVersion"]["major"] == "1"

    result = subprocess.run(
        [devcluster.tool("helm"), "version", "--short"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("v4.")

    result = subprocess.run(
        [kubectl, "get", "namespaces", "-o", "name"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "namespace/kube-system" in result.stdout.split()


def who_am_i(api_client: Any) -> dict[str, Any]:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = devcluster.request(
        api_client, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review
    )
    return dict(answer["status"]["userInfo"])


def test_operator_token_is_the_service_account_without_rights(
    control_plane: devcluster.ControlPlane, kube: Any, namespace: str
) -> None:
    operator = devcluster.new_client(control_plane.operator_kubeconfig)
    try:
        user = who_am_i(operator)
        assert user["username"] == "system:serviceaccount:walras-system:walras-controller"
        assert "system:serviceaccounts:walras-system" in user["groups"]
        with pytest.raises(ApiException) as denied:
            k8s.CoreV1Api(operator).list_namespaced_pod(namespace)
        assert denied.value.status == 403

        # RBAC bound to the ServiceAccount applies to the static token (what the chart relies on).
        rbac = k8s.RbacAuthorizationV1Api(kube)
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "pod-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "pod-reader",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "walras-controller",
                        "namespace": "walras-system",
                    }
                ],
            },
        )

        def granted() -> bool:
            # The authorizer learns the new binding from its own watch a moment later: until
            # then the list is still refused with 403, which is "not yet", not a failure.
            try:
                return k8s.CoreV1Api(operator).list_namespaced_pod(namespace).items == []
            except ApiException as exc:
                if exc.status == 403:
                    return False
                raise

        wait_for(granted, "RBAC to grant list pods")
    finally:
        operator.close()


def test_service_account_kubeconfig_uses_token_request(
    control_plane: devcluster.ControlPlane, namespace: str, tmp_path: Path
) -> None:
    path = devcluster.service_account_kubeconfig(
        control_plane, namespace, "agent", tmp_path / "agent.kubeconfig"
    )
    api_client = devcluster.new_client(path)
    try:
        user = who_am_i(api_client)
    finally:
        api_client.close()
    assert user["username"] == f"system:serviceaccount:{namespace}:agent"
    # A bound token carries the ServiceAccount's uid, which a static token cannot.
    assert "authentication.kubernetes.io/credential-id" in user.get("extra", {})


def test_pod_needs_an_existing_service_account(kube: Any) -> None:
    """The ServiceAccount admission plugin rejects a pod whose ServiceAccount does not exist, and
    the controller manager's ServiceAccount controller gives every namespace ``default``."""
    core = k8s.CoreV1Api(kube)
    name = devcluster.unique_name("bare")
    devcluster.create_namespace(kube, name, default_service_account=False)
    try:
        pod = gpu_pod("p", gpus=1)
        pod["spec"]["automountServiceAccountToken"] = False
        pod["spec"]["serviceAccountName"] = "missing"
        with pytest.raises(ApiException) as rejected:
            core.create_namespaced_pod(name, pod)
        assert rejected.value.status == 403
        assert "serviceaccount" in rejected.value.body.lower()

        # Created by the controller, not by us (default_service_account=False above).
        deadline = time.monotonic() + 60
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                break
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        created = core.create_namespaced_pod(name, gpu_pod("p", gpus=1))
        assert created.spec.service_account_name == "default"
    finally:
        devcluster.delete_namespace(kube, name)


RESET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: resettests.walras.dev
spec:
  group: walras.dev
  scope: Namespaced
  names: {plural: resettests, singular: resettest, kind: ResetTest}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


def test_delete_namespace_and_reset(kube: Any, tmp_path: Path) -> None:
    core = k8s.CoreV1Api(kube)
    crd_file = tmp_path / "resettest.yaml"
    crd_file.write_text(RESET_CRD)
    devcluster.install_crds(kube, [crd_file])
    node_name = devcluster.unique_name("kwok-reset")
    devcluster.create_gpu_node(kube, node_name, gpu_type="l4", gpus=4)
    name = devcluster.unique_name("reset")
    devcluster.create_namespace(kube, name)
    core.create_namespaced_config_map(
        name, {"metadata": {"name": "kept", "finalizers": ["example.com/never-removed"]}}
    )
    core.create_namespaced_pod(name, gpu_pod("running", gpus=1))
    devcluster.bind_pod(kube, name, "running", node_name)
    wait_for(lambda: pod_phase(core, name, "running") == "Running", "the pod to run")
    custom = k8s.CustomObjectsApi(kube)
    # A finalizer as kopf adds it: with no operator running, reset() must remove it itself.
    custom.create_namespaced_custom_object(
        "walras.dev",
        "v1alpha1",
        name,
        "resettests",
        {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "ResetTest",
            "metadata": {"name": "r", "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]},
        },
    )

    try:
        devcluster.reset(kube)
        left = custom.list_cluster_custom_object("walras.dev", "v1alpha1", "resettests")
        assert left["items"] == []
    finally:
        devcluster.request(
            kube,
            "DELETE",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/resettests.walras.dev",
        )

    namespaces = {ns.metadata.name for ns in core.list_namespace().items}
    assert namespaces == set(devcluster.SYSTEM_NAMESPACES)
    assert devcluster.kwok_node_names(kube) == []
    # The namespace can be created again and is empty (its contents were really deleted,
    # not orphaned in etcd).
    devcluster.create_namespace(kube, name)
    try:
        assert core.list_namespaced_pod(name).items == []
        assert core.list_namespaced_config_map(name).items == []
    finally:
        devcluster.delete_namespace(kube, name)


def test_env_command_prints_kubeconfig(control_plane: devcluster.ControlPlane) -> None:
    script = Path(devcluster.hack_dir()) / "control-plane.sh"
    result = subprocess.run(
        ["bash", str(script), "env", control_plane.directory],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"export KUBECONFIG={control_plane.admin_kubeconfig}" in result.stdout.splitlines()
    assert control_plane.server.startswith("https://127.0.0.1:")

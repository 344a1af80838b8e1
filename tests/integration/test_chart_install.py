"""The Helm chart on the real local control plane, and its RBAC proven by use.

`helm install` puts the chart into walras-system (the control plane has no kube-controller-manager,
so the Deployment never gets pods: that is expected). The operator then runs as a local subprocess
authenticated **only** by a TokenRequest token of the chart's ServiceAccount
walras-system/walras-controller, and must schedule a FungibleJob: a pod gets bound to a kwok GPU
node and the job's status gets an allocation. That proves the chart's RBAC is enough. Removing the
`pods/binding` rule from the chart's ClusterRole must make the same scenario fail with a 403 and no
bound pod, which proves the test can tell.

Both tests first check, with SubjectAccessReviews, that no binding outside this release grants the
ServiceAccount anything, so that the outcome is attributable to the chart.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "walras"
NAMESPACE = "walras-system"
SERVICE_ACCOUNT = "walras-controller"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
# A release name of its own, so that cluster-scoped names (walras-it-controller) collide with
# nothing another test may create.
RELEASE = "walras-it"
CLUSTER_ROLE = f"{RELEASE}-controller"
GPU_TYPE = "charttest"  # a GPU type no other test uses, so that only our pool and node match
DEADLINE_S = 90.0
LEASE = "walras-controller"


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _helm(cp: Any, *args: str) -> subprocess.CompletedProcess[str]:
    from walras.testing import devcluster

    return subprocess.run(
        [str(devcluster.tool("helm")), *args],
        env=cp.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _adopt_if_present(kube: Any) -> None:
    """Let helm adopt a ServiceAccount the control plane created before the chart.

    The local control plane may pre-create walras-system/walras-controller for its operator
    kubeconfig. Helm refuses to install over an object it does not own unless the object carries
    its ownership metadata; `helm.sh/resource-policy: keep` stops `helm uninstall` from deleting a
    ServiceAccount that other tests' tokens depend on.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube)
    try:
        core.read_namespaced_service_account(SERVICE_ACCOUNT, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return
        raise
    core.patch_namespaced_service_account(
        SERVICE_ACCOUNT,
        NAMESPACE,
        {
            "metadata": {
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {
                    "meta.helm.sh/release-name": RELEASE,
                    "meta.helm.sh/release-namespace": NAMESPACE,
                    "helm.sh/resource-policy": "keep",
                },
            }
        },
    )


@pytest.fixture(scope="module")
def release(control_plane: Any, kube: Any) -> Iterator[str]:
    """`helm install` the chart (defaults, plus the agent so its objects are installed too)."""
    _adopt_if_present(kube)
    _helm(control_plane, "uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found")
    proc = _helm(
        control_plane,
        "install", RELEASE, str(CHART),
        "--namespace", NAMESPACE, "--create-namespace",
        "--set", "agent.enabled=true",
        "--wait=false",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        yield RELEASE
    finally:
        proc = _helm(control_plane, "uninstall", RELEASE, "--namespace", NAMESPACE)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def _allowed(kube: Any, verb: str, resource: str, *, group: str = "", sub: str = "") -> bool:
    from kubernetes import client

    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=SA_USER,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=sub, namespace="default"
            ),
        )
    )
    result = client.AuthorizationV1Api(kube).create_subject_access_review(review)
    return bool(result.status.allowed)


def _foreign_bindings(kube: Any) -> list[str]:
    """Bindings, other than this release's and the built-in `system:` ones, that reach the SA."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(kube)
    groups = {"system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"}
    found = []
    for binding in [
        *rbac.list_cluster_role_binding().items,
        *rbac.list_role_binding_for_all_namespaces().items,
    ]:
        labels = binding.metadata.labels or {}
        if labels.get("app.kubernetes.io/instance") == RELEASE:
            continue
        if binding.metadata.name.startswith("system:"):
            continue
        for subject in binding.subjects or []:
            is_sa = (subject.kind, subject.name, subject.namespace) == (
                "ServiceAccount",
                SERVICE_ACCOUNT,
                NAMESPACE,
            )
            if is_sa or (subject.kind == "Group" and subject.name in groups):
                found.append(f"{binding.metadata.namespace or ''}/{binding.metadata.name}")
    return found


@pytest.fixture
def gpu_node(kube: Any) -> Iterator[str]:
    from walras.testing import devcluster

    name = "chart-gpu-0"
    devcluster.create_gpu_node(kube, name, gpu_type=GPU_TYPE, gpus=4)
    try:
        yield name
    finally:
        devcluster.delete_nodes(kube, [name])


@pytest.fixture
def pool(kube: Any, gpu_node: str) -> Iterator[str]:
    from kubernetes import client

    api = client.CustomObjectsApi(kube)
    body = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "ResourcePool",
        "metadata": {"name": GPU_TYPE},
        "spec": {"gpuType": GPU_TYPE, "nodeSelector": {"walras.dev/gpu-type": GPU_TYPE}},
    }
    api.create_cluster_custom_object("walras.dev", "v1alpha1", "resourcepools", body)
    try:
        yield GPU_TYPE
    finally:
        api.delete_cluster_custom_object("walras.dev", "v1alpha1", "resourcepools", GPU_TYPE)


def _submit_job(kube: Any, namespace: str, name: str) -> None:
    from kubernetes import client

    body = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "throughput": {GPU_TYPE: 1.0},
            "utility": {"kind": "log", "weight": 1},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                }
            },
        },
    }
    client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "walras.dev", "v1alpha1", namespace, "fungiblejobs", body
    )


def _job(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        "walras.dev", "v1alpha1", namespace, "fungiblejobs", name
    )
    return obj


def _pool_status(kube: Any) -> dict[str, Any]:
    from kubernetes import client

    pool: dict[str, Any] = client.CustomObjectsApi(kube).get_cluster_custom_object(
        "walras.dev", "v1alpha1", "resourcepools", GPU_TYPE
    )
    return dict(pool.get("status") or {})


def _lease_holder(kube: Any) -> str | None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException:
        return None
    holder = lease.spec.holder_identity
    return None if holder is None else str(holder)


def _job_pods(kube: Any, namespace: str, name: str) -> list[Any]:
    from kubernetes import client

    pods = client.CoreV1Api(kube).list_namespaced_pod(
        namespace, label_selector=f"walras.dev/job={name}"
    )
    return list(pods.items)


# The container's runtime conditions, emulated without Docker: a private mount namespace whose root
# filesystem is read-only, a fresh tmpfs on /tmp (the chart's emptyDir), no capabilities at all,
# no_new_privs and the image's environment (HOME and caches under /tmp, no bytecode writes).
# Not emulated: the non-root uid (the test's Python lives under /root, readable only by root).
# When the checkout itself lives under /tmp (a CI clone may), the fresh tmpfs would hide the
# interpreter and the editable sources: the script keeps a handle on the old directory (its cwd,
# passed to mount uncanonicalised, since the path would now resolve into the tmpfs) and
# bind-mounts it back read-only over the tmpfs.
_SANDBOX = """
set -o errexit
mount -o remount,bind,ro /
if [ -n "$SANDBOX_KEEP" ]; then cd "$SANDBOX_KEEP"; fi
mount -t tmpfs -o size=256m,mode=1777 tmpfs /tmp
if [ -n "$SANDBOX_KEEP" ]; then
    mkdir -p "$SANDBOX_KEEP"
    mount --no-canonicalize --bind . "$SANDBOX_KEEP"
    mount -o remount,bind,ro "$SANDBOX_KEEP"
fi
printf '%s' "$SANDBOX_KUBECONFIG" > /tmp/kubeconfig
cd /tmp
exec setpriv --inh-caps=-all --bounding-set=-all --no-new-privs env -i PATH="$SANDBOX_PATH" \
    HOME=/tmp MPLCONFIGDIR=/tmp/matplotlib XDG_CACHE_HOME=/tmp/.cache \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 "$@"
"""


def _sandbox_available() -> bool:
    probe = "mount -o remount,bind,ro / && mount -t tmpfs tmpfs /tmp && ! touch /etc/walras-probe"
    try:
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", probe],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and shutil.which("setpriv") is not None


def _self_contained(kubeconfig: str) -> str:
    """The kubeconfig with its CA inlined: the sandbox's /tmp hides the CA file's directory."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in config["clusters"]:
        ca = cluster["cluster"].pop("certificate-authority", None)
        if ca is not None:
            data = base64.b64encode(Path(ca).read_bytes()).decode()
            cluster["cluster"]["certificate-authority-data"] = data
    return str(yaml.safe_dump(config))


@dataclass(frozen=True)
class Running:
    log: Path
    health_port: int


@contextlib.contextmanager
def _walras(
    cp: Any,
    tmp_path: Path,
    account: str,
    args: list[str],
    *,
    name: str,
    sandbox: bool = False,
    health_port: int = 0,
) -> Iterator[Running]:
    """`walras ARGS` as a subprocess authenticated only by a token of ServiceAccount `account`.

    (tests/integration/operator_helpers.start_operator runs with the admin kubeconfig and cannot
    run inside the sandbox, hence this launcher.)
    """
    from walras.testing import devcluster

    kubeconfig = devcluster.service_account_kubeconfig(
        cp, NAMESPACE, account, str(tmp_path / f"{account}.kubeconfig")
    )
    log_path = tmp_path / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALRAS_")}
    env.pop("KUBECONFIG", None)
    env.update({"HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"})
    walras = str(Path(sys.executable).with_name("walras"))
    if sandbox:
        env["SANDBOX_KUBECONFIG"] = _self_contained(kubeconfig)
        env["SANDBOX_PATH"] = f"{Path(walras).parent}:/usr/bin:/bin"
        repo = Path(__file__).resolve().parents[2]
        env["SANDBOX_KEEP"] = str(repo) if repo.is_relative_to("/tmp") else ""
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _SANDBOX, "sh"]
        cmd = [*unshare, walras, *args, "--kubeconfig", "/tmp/kubeconfig"]
    else:
        cmd = [walras, *args, "--kubeconfig", str(kubeconfig)]
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        yield Running(log_path, health_port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _operator(
    cp: Any,
    tmp_path: Path,
    *,
    sandbox: bool = False,
    policy: str = "price-discovery",
    extra: tuple[str, ...] = (),
) -> Any:
    """`walras operator` with the chart controller's ServiceAccount and the chart's flags."""
    health = _free_port()
    flags = [
        "operator",
        "--policy", policy,
        "--round-seconds", "1",
        "--metrics-port", str(_free_port()),
        "--health-port", str(health),
        "--leader-elect",
        "--lease-namespace", NAMESPACE,
        "--lease-name", LEASE,
        "--identity", "chart-install-test",
        "--history-namespace", NAMESPACE,
        *extra,
    ]  # fmt: skip
    return _walras(
        cp, tmp_path, SERVICE_ACCOUNT, flags, name="operator", sandbox=sandbox, health_port=health
    )


def _http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _log(running: Running) -> str:
    return running.log.read_text(errors="replace")[-4000:]


def test_chart_installs_the_expected_objects(kube: Any, release: str) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(kube)
    assert apps.read_namespaced_deployment(f"{release}-controller", NAMESPACE).spec.replicas == 1
    assert apps.read_namespaced_daemon_set(f"{release}-agent", NAMESPACE) is not None
    assert apps.read_namespaced_deployment(f"{release}-aggregator", NAMESPACE).spec.replicas == 1
    core = client.CoreV1Api(kube)
    for sa in ("walras-controller", "walras-agent", "walras-aggregator"):
        assert core.read_namespaced_service_account(sa, NAMESPACE).metadata.name == sa
    ext = client.ApiextensionsV1Api(kube)
    names = {crd.metadata.name for crd in ext.list_custom_resource_definition().items}
    expected = {
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (CHART / "crds").glob("*.yaml")
    }
    assert expected <= names
    # What the chart grants, as the apiserver's authoriser sees it.
    assert _allowed(kube, "create", "pods", sub="binding")
    assert _allowed(kube, "patch", "fungiblejobs", group="walras.dev", sub="status")
    assert not _allowed(kube, "get", "secrets")
    assert not _allowed(kube, "update", "nodes")
    assert not _allowed(kube, "delete", "fungiblejobs", group="walras.dev")
    # A mirror's spec follows its workload (patch); a FungibleJob is never deleted by Walras.
    assert _allowed(kube, "patch", "fungiblejobs", group="walras.dev")


def _schedules_a_job(cp: Any, kube: Any, namespace: str, tmp_path: Path, *, sandbox: bool) -> None:
    assert _foreign_bindings(kube) == [], "another binding grants the ServiceAccount rights"
    _submit_job(kube, namespace, "chart-job")
    with _operator(cp, tmp_path, sandbox=sandbox) as log:
        bound = _wait(
            lambda: [p for p in _job_pods(kube, namespace, "chart-job") if p.spec.node_name],
            DEADLINE_S,
            "a bound pod of chart-job",
        )
        assert bound[0].spec.node_name == "chart-gpu-0", _log(log)
        allocation = _wait(
            lambda: _job(kube, namespace, "chart-job").get("status", {}).get("allocation"),
            DEADLINE_S,
            "an allocation in chart-job's status",
        )
        assert [a["gpuType"] for a in allocation] == [GPU_TYPE], _log(log)
        # The rest of what the chart grants, used: pool status written, Lease held, probes up.
        _wait(lambda: _pool_status(kube).get("capacity") == 4, DEADLINE_S, "pool status")
        holder = _wait(lambda: _lease_holder(kube), DEADLINE_S, "the Lease")
        assert holder == "chart-install-test"
        assert _http_status(log.health_port, "/healthz") == 200
        assert _wait(lambda: _http_status(log.health_port, "/readyz") == 200, 30, "/readyz")
        assert "forbidden" not in _log(log).lower(), _log(log)
        # The schedule history went to ConfigMaps of the release namespace (the chart's
        # namespaced Role), none to the job's namespace, and the RBAC probe found its grants.
        selector = "walras.dev/history=v1"
        from kubernetes import client

        core = client.CoreV1Api(kube)
        _wait(
            lambda: core.list_namespaced_config_map(NAMESPACE, label_selector=selector).items,
            DEADLINE_S,
            "a schedule-history ConfigMap in the release namespace",
        )
        assert not core.list_namespaced_config_map(namespace, label_selector=selector).items
        assert "no RBAC for configmaps" not in _log(log), _log(log)


def test_operator_with_the_chart_token_schedules_a_job(
    control_plane: Any, kube: Any, release: str, namespace: str, pool: str, tmp_path: Path
) -> None:
    _schedules_a_job(control_plane, kube, namespace, tmp_path, sandbox=False)


def test_operator_schedules_under_the_container_security_context(
    control_plane: Any, kube: Any, release: str, namespace: str, pool: str, tmp_path: Path
) -> None:
    """Read-only root filesystem, writable /tmp only, no capabilities: as in the chart's pod."""
    if not _sandbox_available():
        pytest.skip("cannot create a private read-only mount namespace here (unshare/mount)")
    _schedules_a_job(control_plane, kube, namespace, tmp_path, sandbox=True)


CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_every_ci_rendering_passes_server_side_dry_run(
    control_plane: Any, release: str, values: Path
) -> None:
    """The apiserver itself (admission, defaulting, validation) accepts each rendering."""
    from walras.testing import devcluster

    rendered = _helm(
        control_plane,
        "template", "walras-dry", str(CHART),
        "--namespace", NAMESPACE,
        "--values", str(values),
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    # ServiceMonitor needs the Prometheus Operator's CRD, which this control plane does not have.
    docs = [
        d
        for d in yaml.safe_load_all(rendered.stdout)
        if d and not d["apiVersion"].startswith("monitoring.coreos.com/")
    ]
    applied = subprocess.run(
        [devcluster.tool("kubectl"), "apply", "--dry-run=server", "--output=name", "-f", "-"],
        input=yaml.safe_dump_all(docs),
        env=control_plane.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert len(applied.stdout.split()) == len(docs)


def _allocation(kube: Any, name: str) -> dict[str, Any]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        obj: dict[str, Any] = client.CustomObjectsApi(kube).get_cluster_custom_object(
            "walras.dev", "v1alpha1", "nodeallocations", name
        )
    except ApiException:
        return {}
    return dict(obj.get("status") or {})


@pytest.fixture
def allocations_cleaned(kube: Any, gpu_node: str) -> Iterator[list[str]]:
    """NodeAllocations this test's agents create (cluster-scoped), deleted afterwards."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    names = [gpu_node, "walras-tenant-totals"]
    yield names
    api = client.CustomObjectsApi(kube)
    for name in names:
        with contextlib.suppress(ApiException):
            api.delete_cluster_custom_object("walras.dev", "v1alpha1", "nodeallocations", name)


def test_distributed_psdsf_with_the_chart_tokens_schedules(
    control_plane: Any,
    kube: Any,
    release: str,
    namespace: str,
    pool: str,
    allocations_cleaned: list[str],
    tmp_path: Path,
) -> None:
    """Policy psdsf-distributed end to end, each process with only its chart ServiceAccount: the
    node agent publishes its node's tasks, the aggregator the tenant totals, and the operator
    reads them and binds the job's pod."""
    node, totals = allocations_cleaned
    _submit_job(kube, namespace, "agent-job")
    agent_args = ["agent", "--node-name", node, "--tau", "0.2", "--stale-after", "30"]
    aggregator_args = ["agent", "--aggregate", "--aggregate-period", "0.2", "--stale-after", "30"]
    with (
        _walras(control_plane, tmp_path, "walras-agent", agent_args, name="agent") as agent,
        _walras(
            control_plane, tmp_path, "walras-aggregator", aggregator_args, name="aggregator"
        ) as aggregator,
    ):
        tasks = _wait(
            lambda: (_allocation(kube, node).get("tasks") or {}).get(namespace),
            DEADLINE_S,
            f"the agent's tasks for tenant {namespace} on {node}",
        )
        assert float(tasks) > 0, _log(agent)
        published = _wait(
            lambda: (_allocation(kube, totals).get("tasks") or {}).get(namespace),
            DEADLINE_S,
            "the aggregator's tenant totals",
        )
        assert float(published) > 0, _log(aggregator)
        with _operator(control_plane, tmp_path, policy="psdsf-distributed") as operator:
            bound = _wait(
                lambda: [p for p in _job_pods(kube, namespace, "agent-job") if p.spec.node_name],
                DEADLINE_S,
                "a bound pod of agent-job under psdsf-distributed",
            )
            assert bound[0].spec.node_name == node, _log(operator)
        for running in (agent, aggregator, operator):
            assert "forbidden" not in _log(running).lower(), _log(running)


@pytest.fixture
def without_pod_binding(kube: Any, release: str) -> Iterator[None]:
    """The chart's ClusterRole minus its pods/binding rule; restored afterwards."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(kube)
    role = rbac.read_cluster_role(CLUSTER_ROLE)
    original = copy.deepcopy(role.rules)
    kept = [r for r in role.rules if "pods/binding" not in (r.resources or [])]
    assert len(kept) == len(original) - 1
    rbac.patch_cluster_role(
        CLUSTER_ROLE, {"rules": [kube.sanitize_for_serialization(r) for r in kept]}
    )
    _wait(
        lambda: not _allowed(kube, "create", "pods", sub="binding"), 30, "RBAC to drop pods/binding"
    )
    try:
        yield
    finally:
        rbac.patch_cluster_role(
            CLUSTER_ROLE,
            {"rules": [kube.sanitize_for_serialization(r) for r in original]},
        )
        _wait(lambda: _allowed(kube, "create", "pods", sub="binding"), 30, "RBAC to restore")


def test_removing_pods_binding_from_the_clusterrole_stops_scheduling(
    control_plane: Any,
    kube: Any,
    release: str,
    namespace: str,
    pool: str,
    without_pod_binding: None,
    tmp_path: Path,
) -> None:
    assert _foreign_bindings(kube) == [], "another binding grants the ServiceAccount rights"
    # Pods are still allowed: the operator gets as far as creating them, then the binding fails.
    assert _allowed(kube, "create", "pods")
    _submit_job(kube, namespace, "unbindable")

    def forbidden_seen() -> bool:
        text = _log(log).lower()
        job = _job(kube, namespace, "unbindable")
        conditions = " ".join(
            f"{c.get('reason', '')} {c.get('message', '')}"
            for c in job.get("status", {}).get("conditions", [])
        ).lower()
        return any(word in text + conditions for word in ("403", "forbidden"))

    # Every pod through pods/binding: by default a one-pod gang that fits its node is created
    # with spec.nodeName (pods create is enough); the binding rule is needed for the others, which
    # --no-bind-at-create makes all of them.
    with _operator(control_plane, tmp_path, extra=("--no-bind-at-create",)) as log:
        _wait(forbidden_seen, DEADLINE_S, "a 403 on pods/binding in the operator log or job status")
        # A few more rounds: still nothing bound.
        time.sleep(3)
        bound = [
            p.metadata.name for p in _job_pods(kube, namespace, "unbindable") if p.spec.node_name
        ]
        assert bound == [], _log(log)
        assert "binding" in _log(log).lower(), _log(log)


def test_operator_with_the_chart_token_runs_a_labelled_job(
    control_plane: Any, kube: Any, release: str, namespace: str, pool: str, tmp_path: Path
) -> None:
    """Bring your own Job under the chart: its MutatingAdmissionPolicy creates a labelled Job
    suspended, and the operator, with the chart's token only, mirrors the Job, starts it and
    binds its pod (docs/workloads.md, "Bring your Job")."""
    from kubernetes import client

    from walras.testing import devcluster

    assert _foreign_bindings(kube) == [], "another binding grants the ServiceAccount rights"
    container = {
        "name": "train",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "adopted",
            "labels": {"walras.dev/managed": "true"},
            "annotations": {"walras.dev/throughput": f"{GPU_TYPE}=1"},
        },
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    # The release's policy is enforced a moment after helm created it: dry runs until it is.
    _wait(
        lambda: devcluster.request(kube, "POST", jobs, body=body, query={"dryRun": "All"})["spec"][
            "suspend"
        ],
        DEADLINE_S,
        "the chart's admission policy to suspend a labelled Job",
    )
    made = devcluster.request(kube, "POST", jobs, body=body)
    assert made["spec"]["suspend"] is True
    core = client.CoreV1Api(kube)
    with _operator(control_plane, tmp_path) as log:
        bound = _wait(
            lambda: [
                p
                for p in core.list_namespaced_pod(
                    namespace, label_selector="job-name=adopted"
                ).items
                if p.spec.node_name
            ],
            DEADLINE_S,
            "the adopted Job's pod bound",
        )
        assert bound[0].spec.node_name == "chart-gpu-0", _log(log)
        mirror = _job(kube, namespace, "adopted")
        assert mirror["spec"]["workloadRef"]["kind"] == "Job", _log(log)
        assert "forbidden" not in _log(log).lower(), _log(log)


def test_operator_with_the_chart_token_readmits_a_job_fixed_in_place(
    control_plane: Any, kube: Any, release: str, namespace: str, pool: str, tmp_path: Path
) -> None:
    """A rejected labelled Job fixed in place runs, with the chart's token only: the operator
    replaces its mirror's spec (``patch`` on fungiblejobs) and lifts the rejection, and never
    needs ``delete`` (docs/workloads.md, "Bring your Job")."""
    from kubernetes import client

    from walras.testing import devcluster

    assert _foreign_bindings(kube) == [], "another binding grants the ServiceAccount rights"
    container = {
        "name": "train",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "uneven",
            "labels": {"walras.dev/managed": "true"},
            "annotations": {"walras.dev/throughput": f"{GPU_TYPE}=1"},
        },
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "parallelism": 1,  # but 2 completions: not a gang
            "completions": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    devcluster.request(kube, "POST", jobs, body=body)
    core = client.CoreV1Api(kube)

    def admitted(status: str) -> bool:
        try:
            conditions = _job(kube, namespace, "uneven").get("status", {}).get("conditions", [])
        except client.ApiException:
            return False  # no mirror yet
        return any(c["type"] == "Admitted" and c["status"] == status for c in conditions)

    with _operator(control_plane, tmp_path) as log:
        _wait(lambda: admitted("False"), DEADLINE_S, "the Job's rejection")
        devcluster.request(
            kube,
            "PATCH",
            f"{jobs}/uneven",
            body={"spec": {"parallelism": 2}},
            content_type="application/merge-patch+json",
        )
        _wait(lambda: admitted("True"), DEADLINE_S, "the fixed Job admitted again")
        assert _job(kube, namespace, "uneven")["spec"]["replicas"] == 2, _log(log)
        _wait(
            lambda: [
                p
                for p in core.list_namespaced_pod(namespace, label_selector="job-name=uneven").items
                if p.spec.node_name
            ],
            DEADLINE_S,
            "the fixed Job's pods bound",
        )
        assert "forbidden" not in _log(log).lower(), _log(log)

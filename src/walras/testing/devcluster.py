"""Local Kubernetes control plane for tests and the demo: a real kube-apiserver, etcd and kwok.

Purpose: the operator and the node agents are tested against a *real* API server (as envtest does
for Go operators), without Docker. ``hack/control-plane.sh`` builds the binaries from the Go
module proxy and starts them on loopback; this module drives that script and adds the helpers the
tests need (kwok GPU nodes, CRD installation, ServiceAccount kubeconfigs, cleaning up).

Callers: ``tests/conftest.py`` (fixtures ``control_plane``, ``kube``, ``namespace``), the
integration and e2e tests, ``bench/bench_controlplane.py`` and the demo.

What this control plane is: kube-apiserver, etcd, kwok and kube-controller-manager (garbage
collector, namespace, resource quota, ServiceAccount and ClusterRole aggregation controllers), so
``ownerReferences`` cascade and namespaces are deleted as on a real cluster. There is no scheduler
and no kubelet (kwok's stages play the kubelet), unless real nodes are added
(``start(real_nodes=True)`` and :mod:`walras.testing.realnodes`; ``docs/real-nodes.md``).
JobSet's own controller (``sigs.k8s.io/jobset``, with its webhooks) runs on request
(``start(jobset=True)`` or :func:`start_jobset`).

* **ServiceAccounts.** The controller manager's ServiceAccount controller creates ``default``
  in new namespaces, but a pod created right after its namespace can race it (the
  ServiceAccount admission plugin then rejects it with 403 ``error looking up service account
  <ns>/default``), so :func:`create_namespace` (and the ``namespace`` fixture) creates
  ``default`` itself.
* **No node lifecycle controller.** Nodes are not tainted ``not-ready`` at creation (the
  TaintNodesByCondition admission plugin is off, since nothing would remove the taint) and are
  never marked NotReady or evicted.
* **No scheduler.** Pods stay Pending until something binds them (``pods/binding``), e.g. Walras.
* **kwok instead of kubelets.** A pod bound to a kwok node becomes Running/Ready at once; with the
  annotation ``walras.dev/kwok-complete-after-ms: "<ms>"`` it turns Succeeded that long after it
  started; a deleted pod disappears promptly. kwok does **not** check capacity: a pod bound to a
  node with too few free GPUs runs anyway (see tests/integration/test_controlplane.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

#: Annotation that makes kwok manage a node (the value kwok is started with).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
#: Pod annotation read by hack/kwok/pod-complete.yaml.
COMPLETE_AFTER_ANNOTATION = "walras.dev/kwok-complete-after-ms"
GPU_TYPE_LABEL = "walras.dev/gpu-type"
WALRAS_GROUP = "walras.dev"
#: Namespaces that reset() keeps.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})

_SCRIPT = "control-plane.sh"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started, stopped or cleaned up."""


# ------------------------------------------------------------------------------------------------
# Locating hack/ and the binaries
# ------------------------------------------------------------------------------------------------


def hack_dir() -> Path:
    """The repository's ``hack/`` directory: ``$WALRAS_HACK_DIR``, else found above this file."""
    override = os.environ.get("WALRAS_HACK_DIR")
    if override:
        path = Path(override)
        if not (path / _SCRIPT).is_file():
            raise ControlPlaneError(f"WALRAS_HACK_DIR={override} has no {_SCRIPT}")
        return path
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "hack"
        if (candidate / _SCRIPT).is_file():
            return candidate
    raise ControlPlaneError(
        f"cannot find hack/{_SCRIPT} above {__file__}; "
        "set WALRAS_HACK_DIR to the repository's hack/ directory"
    )


def cache_dir() -> Path:
    """Where hack/ caches binaries: ``$WALRAS_CACHE`` or ``~/.cache/walras``."""
    return Path(os.environ.get("WALRAS_CACHE") or Path.home() / ".cache" / "walras")


def _script(
    *args: str, timeout: float = 120.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(hack_dir() / _SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def _binary_paths() -> dict[str, str]:
    """Cached binary paths as the script defines them (single source of truth for versions)."""
    result = _script("paths", timeout=30)
    if result.returncode != 0:
        raise ControlPlaneError(f"{_SCRIPT} paths failed: {result.stderr.strip()}")
    paths: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if value:
            paths[key.strip()] = value.strip()
    return paths


_BINARY_KEYS = {
    "kube-apiserver": "KUBE_APISERVER",
    "etcd": "ETCD",
    "kwok": "KWOK",
    "kube-controller-manager": "KUBE_CONTROLLER_MANAGER",
}


def binaries_available() -> bool:
    """True when etcd, kube-apiserver and kwok are built (``hack/control-plane.sh build``)."""
    try:
        paths = _binary_paths()
    except (ControlPlaneError, OSError, subprocess.SubprocessError):
        return False
    return all(os.access(paths.get(key, ""), os.X_OK) for key in _BINARY_KEYS.values())


def tool(name: str) -> str:
    """Absolute path of a cached tool: kubectl, helm (installed on first use), kwok, etcd,
    kube-apiserver (built by ``hack/control-plane.sh build``)."""
    if name in _BINARY_KEYS:
        path = _binary_paths().get(_BINARY_KEYS[name], "")
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(f"{name} is not built ({path}); run hack/{_SCRIPT} build")
        return path
    if name not in ("kubectl", "helm"):
        raise ControlPlaneError(
            f"unknown tool {name!r}: expected kubectl, helm, kwok, etcd or kube-apiserver"
        )
    cached = cache_dir() / "bin" / name
    if not os.access(cached, os.X_OK):
        result = subprocess.run(
            ["bash", str(hack_dir() / "install-tools.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if result.returncode != 0 or not os.access(cached, os.X_OK):
            raise ControlPlaneError(f"install-tools.sh could not install {name}: {result.stderr}")
    return str(cached)


# ------------------------------------------------------------------------------------------------
# Start / stop
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlPlane:
    """A running local control plane. All paths are absolute strings (what kubeconfig loaders
    and subprocesses want)."""

    directory: str
    server: str
    ca_file: str
    admin_kubeconfig: str
    operator_kubeconfig: str

    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``KUBECONFIG`` (admin) and ``PATH`` starting with the cached
        kubectl/helm directory, for subprocesses (kubectl, helm, the operator, the demo)."""
        bin_dir = str(Path(tool("kubectl")).parent)
        tool("helm")
        environment = dict(os.environ)
        environment["KUBECONFIG"] = self.admin_kubeconfig
        environment["PATH"] = bin_dir + os.pathsep + environment.get("PATH", "")
        return environment

    def admin_client(self) -> Any:
        """A new admin ``kubernetes.client.ApiClient`` (caller closes it)."""
        return new_client(self.admin_kubeconfig)


def _read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if value:
            values[key] = value
    return values


def start(
    directory: str | os.PathLike[str] | None = None,
    *,
    attempts: int = 2,
    watchdog: bool = True,
    real_nodes: bool = False,
    jobset: bool = False,
) -> ControlPlane:
    """Start etcd, kube-apiserver and kwok on loopback (``hack/control-plane.sh start``).

    ``directory`` must not hold a running control plane; by default a fresh temporary directory.
    A start that lost a port race (another process took a port between the pick and the bind) is
    retried with new ports, up to ``attempts`` times. With ``watchdog`` (the default) the control
    plane stops by itself when this Python process exits without calling :func:`stop` (a killed
    test run); pass ``watchdog=False`` for a control plane that must outlive it (the demo).
    With ``real_nodes`` the controller manager also runs what real kubelets need (the root-CA
    publisher and the node lifecycle controller; kwok then renews node Leases); add the nodes
    with :func:`walras.testing.realnodes.add_real_node`. With ``jobset`` the JobSet controller
    runs too (:func:`start_jobset`).
    """
    last_error = ""
    for _ in range(max(1, attempts)):
        path = Path(directory) if directory is not None else None
        if path is None:
            path = Path(tempfile.mkdtemp(prefix="walras-cp-"))
        # The script's watchdog stops the control plane once this process is gone.
        owner = {"WALRAS_OWNER_PID": str(os.getpid())} if watchdog else {}
        if real_nodes:
            owner["WALRAS_REAL_NODES"] = "1"
        result = _script("start", str(path), timeout=180, env=owner)
        if result.returncode == 0:
            values = _read_env_file(path / "cluster.env")
            cp = ControlPlane(
                directory=str(path.resolve()),
                server=values["SERVER"],
                ca_file=values["CA_FILE"],
                admin_kubeconfig=values["ADMIN_KUBECONFIG"],
                operator_kubeconfig=values["OPERATOR_KUBECONFIG"],
            )
            if jobset:
                try:
                    start_jobset(cp)
                except ControlPlaneError:
                    stop(cp)
                    raise
            return cp
        last_error = result.stderr[-6000:]
        _script("stop", str(path), timeout=60)
        if "address already in use" not in last_error:
            break
    raise ControlPlaneError(f"control plane did not start:\n{last_error}")


def stop(cp: ControlPlane) -> None:
    """Kill exactly the processes ``start`` recorded and remove the directory."""
    result = _script("stop", cp.directory, timeout=60)
    if result.returncode != 0:
        raise ControlPlaneError(f"stop failed: {result.stderr.strip()}")


def jobset_available() -> bool:
    """True when the JobSet controller and its CRD are built (``hack/control-plane.sh build``)."""
    try:
        paths = _binary_paths()
    except (ControlPlaneError, OSError, subprocess.SubprocessError):
        return False
    return (
        os.access(paths.get("JOBSET_CONTROLLER", ""), os.X_OK)
        and Path(paths.get("JOBSET_CRD", "")).is_file()
    )


def start_jobset(cp: ControlPlane) -> None:
    """Run JobSet's own controller (``sigs.k8s.io/jobset``) against ``cp``: its CRD, the
    controller and its webhooks (``hack/control-plane.sh start-jobset``). It runs until
    :func:`stop_jobset` or :func:`stop`."""
    result = _script("start-jobset", cp.directory, timeout=180)
    if result.returncode != 0:
        raise ControlPlaneError(f"start-jobset failed: {result.stderr.strip()[-4000:]}")


def stop_jobset(cp: ControlPlane) -> None:
    """Remove the JobSet webhooks from ``cp`` and stop its controller (the CRD and JobSets
    stay)."""
    result = _script("stop-jobset", cp.directory, timeout=60)
    if result.returncode != 0:
        raise ControlPlaneError(f"stop-jobset failed: {result.stderr.strip()}")


COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")


def stop_component(cp: ControlPlane, name: str, *, kill: bool = False) -> None:
    """Stop one of :data:`COMPONENTS` (SIGTERM, or SIGKILL with ``kill``) until
    :func:`start_component` (``hack/control-plane.sh stop-component``): a fault for tests."""
    if name not in COMPONENTS:
        raise ValueError(f"component must be one of {', '.join(COMPONENTS)}, not {name!r}")
    result = _script("stop-component", name, cp.directory, *(["--kill"] if kill else []))
    if result.returncode != 0:
        raise ControlPlaneError(f"stop-component {name} failed: {result.stderr.strip()}")


def start_component(cp: ControlPlane, name: str) -> None:
    """Start a component :func:`stop_component` stopped, with the same command line, and wait
    until it serves (``hack/control-plane.sh start-component``)."""
    if name not in COMPONENTS:
        raise ValueError(f"component must be one of {', '.join(COMPONENTS)}, not {name!r}")
    result = _script("start-component", name, cp.directory, timeout=120)
    if result.returncode != 0:
        raise ControlPlaneError(f"start-component {name} failed: {result.stderr.strip()}")


def restart_component(
    cp: ControlPlane, name: str, down_s: float = 0.0, *, kill: bool = False
) -> None:
    """Stop one of :data:`COMPONENTS`, keep it down ``down_s`` seconds, start it again and wait
    until it serves (``hack/control-plane.sh restart``): an outage for tests to inject."""
    if name not in COMPONENTS:
        raise ValueError(f"component must be one of {', '.join(COMPONENTS)}, not {name!r}")
    if not down_s >= 0:
        raise ValueError(f"down_s must be >= 0, not {down_s!r}")
    args = ["restart", name, cp.directory, "--down", f"{down_s:g}", *(["--kill"] if kill else [])]
    result = _script(*args, timeout=120 + down_s)
    if result.returncode != 0:
        raise ControlPlaneError(f"restart {name} failed: {result.stderr.strip()}")


def new_client(kubeconfig: str | os.PathLike[str]) -> Any:
    """A ``kubernetes.client.ApiClient`` for a kubeconfig file."""
    # kubernetes.config carries no annotations.
    return k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=os.fspath(kubeconfig)
    )


# ------------------------------------------------------------------------------------------------
# Raw requests (the typed models choke on some answers, e.g. a Binding's Status reply)
# ------------------------------------------------------------------------------------------------


def request(
    api_client: Any,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: Mapping[str, str | int | bool] | None = None,
    content_type: str = "application/json",
) -> Any:
    """One authenticated request; returns the decoded JSON answer (``None`` when empty).

    Raises ``kubernetes.client.exceptions.ApiException`` for non-2xx answers, like the typed API.
    """
    # kubernetes>=35 (openapi-generator v7): serialise, send, then raise on non-2xx ourselves.
    params = [
        (k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()
    ]
    verb, url, headers, payload, _ = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=params,
        header_params={"Accept": "application/json", "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(verb, url, header_params=headers, body=payload)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(
            http_resp=response, body=data.decode("utf-8", "replace"), data=None
        )
    return json.loads(data) if data else None


def _ignore_status(exc: ApiException, *statuses: int) -> None:
    if exc.status not in statuses:
        raise exc


def _wait(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)


# ------------------------------------------------------------------------------------------------
# Nodes and pods
# ------------------------------------------------------------------------------------------------


def gpu_node_manifest(
    name: str,
    *,
    gpu_type: str,
    gpus: int,
    cpu: str = "32",
    memory: str = "256Gi",
    labels: Mapping[str, str] | None = None,
    resource_name: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    """The Node object :func:`create_gpu_node` creates (also useful for ``kubectl apply``)."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", resource_name: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                GPU_TYPE_LABEL: gpu_type,
                **dict(labels or {}),
            },
        },
        # A kubelet reports capacity in status; the apiserver keeps the status given at creation,
        # and kwok's node-initialize stage preserves it.
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _node_ready(node: Mapping[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_nodes_ready(api_client: Any, names: Iterable[str], *, timeout: float = 60.0) -> None:
    """Wait until every named node reports Ready (kwok's node-initialize stage)."""
    pending = set(names)

    def done() -> bool:
        for node in request(api_client, "GET", "/api/v1/nodes")["items"]:
            if node["metadata"]["name"] in pending and _node_ready(node):
                pending.discard(node["metadata"]["name"])
        return not pending

    _wait(done, timeout, f"nodes to become Ready: {sorted(pending)[:5]}")


def create_gpu_node(
    api_client: Any,
    name: str,
    *,
    gpu_type: str,
    gpus: int,
    cpu: str = "32",
    memory: str = "256Gi",
    labels: Mapping[str, str] | None = None,
    resource_name: str = "nvidia.com/gpu",
    wait: bool = True,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Create a kwok-managed node with ``gpus`` of ``resource_name`` and the GPU-type label;
    by default wait until it is Ready. Returns the created Node as a dict."""
    manifest = gpu_node_manifest(
        name,
        gpu_type=gpu_type,
        gpus=gpus,
        cpu=cpu,
        memory=memory,
        labels=labels,
        resource_name=resource_name,
    )
    created: dict[str, Any] = request(api_client, "POST", "/api/v1/nodes", body=manifest)
    if wait:
        wait_nodes_ready(api_client, [name], timeout=timeout)
    return created


def kwok_node_names(api_client: Any) -> list[str]:
    """Names of the nodes kwok manages (annotation kwok.x-k8s.io/node=fake), sorted."""
    nodes = request(api_client, "GET", "/api/v1/nodes")["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if (n["metadata"].get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == KWOK_NODE_VALUE
    )


def delete_nodes(api_client: Any, names: Iterable[str], *, timeout: float = 60.0) -> None:
    """Delete nodes (missing ones are fine) and wait until they are gone."""
    wanted = set(names)
    for name in sorted(wanted):
        try:
            request(api_client, "DELETE", f"/api/v1/nodes/{name}")
        except ApiException as exc:
            _ignore_status(exc, 404)

    def gone() -> bool:
        left = {n["metadata"]["name"] for n in request(api_client, "GET", "/api/v1/nodes")["items"]}
        return not (left & wanted)

    _wait(gone, timeout, f"nodes to be deleted: {sorted(wanted)[:5]}")


def bind_pod(api_client: Any, namespace: str, pod: str, node: str) -> None:
    """Bind a pod to a node through the ``pods/binding`` subresource, as a scheduler does.

    Sent as a raw request. The typed ``CoreV1Api.create_namespaced_binding`` binds the pod on the
    server but then fails on the client: the server answers with a ``Status``, which the client
    reads as a ``V1Binding`` and raises (kubernetes 37: pydantic ``ValidationError: 1 validation
    error for V1Binding``; older clients: ``ValueError: Invalid value for `target```), so a naive
    retry would bind twice (409). ``_preload_content=False`` avoids that, but the typed path still
    costs about twice the client CPU of a raw request (bench/bench_controlplane.py).
    """
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    request(api_client, "POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body=body)


def _pod_request(pod: Mapping[str, Any], resource_name: str) -> int:
    """A pod's effective request of an integer resource: max(sum over containers, largest init
    container), a container's request defaulting to its limit (as for extended resources)."""

    def amount(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource_name)
        if value is None:
            value = (resources.get("limits") or {}).get(resource_name, 0)
        return int(value)

    spec = pod.get("spec") or {}
    main = sum(amount(c) for c in spec.get("containers") or [])
    init = max((amount(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def overcommitted_nodes(
    api_client: Any, resource_name: str = "nvidia.com/gpu"
) -> dict[str, tuple[int, int]]:
    """Nodes whose bound, unfinished pods request more ``resource_name`` than the node has:
    ``{node: (requested, allocatable)}``. kwok runs such pods anyway (no kubelet admission), so
    tests use this as the capacity oracle."""
    allocatable: dict[str, int] = {}
    for node in request(api_client, "GET", "/api/v1/nodes")["items"]:
        value = ((node.get("status") or {}).get("allocatable") or {}).get(resource_name, 0)
        allocatable[node["metadata"]["name"]] = int(value)
    requested: dict[str, int] = {}
    for pod in request(api_client, "GET", "/api/v1/pods")["items"]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node_name or phase in ("Succeeded", "Failed"):
            continue
        requested[node_name] = requested.get(node_name, 0) + _pod_request(pod, resource_name)
    return {
        name: (amount, allocatable.get(name, 0))
        for name, amount in sorted(requested.items())
        if amount > allocatable.get(name, 0)
    }


# ------------------------------------------------------------------------------------------------
# Namespaces
# ------------------------------------------------------------------------------------------------


def unique_name(prefix: str) -> str:
    """A DNS-1123 label: the prefix (sanitised, shortened) plus 6 random hex digits."""
    base = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:50].strip("-") or "t"
    return f"{base}-{secrets.token_hex(3)}"


def create_namespace(api_client: Any, name: str, *, default_service_account: bool = True) -> None:
    """Create a namespace (and, by default, its ``default`` ServiceAccount, which the missing
    ServiceAccount controller would create; pods need it). Existing objects are fine."""
    try:
        request(
            api_client,
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except ApiException as exc:
        _ignore_status(exc, 409)
    if default_service_account:
        try:
            request(
                api_client,
                "POST",
                f"/api/v1/namespaces/{name}/serviceaccounts",
                body={
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default"},
                },
            )
        except ApiException as exc:
            _ignore_status(exc, 409)


def _api_resources(api_client: Any) -> list[tuple[str, dict[str, Any]]]:
    """(group-version path, resource) for every listable, deletable top-level resource."""
    prefixes = ["/api/v1"]
    groups = request(api_client, "GET", "/apis")["groups"]
    prefixes += [f"/apis/{g['preferredVersion']['groupVersion']}" for g in groups]
    found: list[tuple[str, dict[str, Any]]] = []
    for prefix in prefixes:
        try:
            resources = request(api_client, "GET", prefix)["resources"]
        except ApiException as exc:  # a group that vanished (CRD deleted) between the two calls
            _ignore_status(exc, 404, 503)
            continue
        for resource in resources:
            verbs = set(resource.get("verbs") or [])
            if "/" not in resource["name"] and {"list", "delete"} <= verbs:
                found.append((prefix, resource))
    return found


def _strip_finalizers(api_client: Any, item_path: str) -> None:
    try:
        request(
            api_client,
            "PATCH",
            item_path,
            body={"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
    except ApiException as exc:
        _ignore_status(exc, 404, 409)


def _delete_listed(api_client: Any, collection: str, items: Sequence[Mapping[str, Any]]) -> None:
    """Delete the listed objects at once (grace 0), removing finalizers nobody would remove."""
    for item in items:
        item_path = f"{collection}/{item['metadata']['name']}"
        if item["metadata"].get("finalizers"):
            _strip_finalizers(api_client, item_path)
        try:
            request(api_client, "DELETE", item_path, query={"gracePeriodSeconds": 0})
        except ApiException as exc:
            _ignore_status(exc, 404, 409)


def delete_namespace(api_client: Any, name: str, *, timeout: float = 60.0) -> None:
    """Delete a namespace *and its contents* and wait until it is gone.

    Does the namespace controller's job: deletes every namespaced object (grace period 0, so pods
    on kwok nodes vanish at once), strips finalizers nobody is there to remove, then clears the
    namespace's ``kubernetes`` finalizer through ``PUT /api/v1/namespaces/<ns>/finalize``.
    """
    for prefix, resource in _api_resources(api_client):
        if not resource.get("namespaced"):
            continue
        collection = f"{prefix}/namespaces/{name}/{resource['name']}"
        try:
            items = request(api_client, "GET", collection)["items"]
        except ApiException as exc:
            _ignore_status(exc, 404, 405, 403)
            continue
        if items:
            _delete_listed(api_client, collection, items)
    try:
        request(api_client, "DELETE", f"/api/v1/namespaces/{name}")
    except ApiException as exc:
        _ignore_status(exc, 404, 409)
        if exc.status == 404:
            return
    try:
        namespace = request(api_client, "GET", f"/api/v1/namespaces/{name}")
        namespace["spec"]["finalizers"] = []
        request(api_client, "PUT", f"/api/v1/namespaces/{name}/finalize", body=namespace)
        request(api_client, "DELETE", f"/api/v1/namespaces/{name}")
    except ApiException as exc:
        _ignore_status(exc, 404, 409)

    def gone() -> bool:
        try:
            request(api_client, "GET", f"/api/v1/namespaces/{name}")
        except ApiException as exc:
            _ignore_status(exc, 404)
            return True
        return False

    _wait(gone, timeout, f"namespace {name} to be deleted")


# ------------------------------------------------------------------------------------------------
# CRDs, ServiceAccounts, reset
# ------------------------------------------------------------------------------------------------

_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _crd_established(crd: Mapping[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    status = {c.get("type"): c.get("status") for c in conditions}
    return status.get("Established") == "True" and status.get("NamesAccepted") == "True"


def _wait_established(api_client: Any, name: str, timeout: float) -> dict[str, Any]:
    latest: dict[str, Any] = {}

    def established() -> bool:
        latest.update(request(api_client, "GET", f"{_CRD_PATH}/{name}"))
        return _crd_established(latest)

    _wait(established, timeout, f"CRD {name} to be Established")
    return latest


def install_crds(
    api_client: Any, paths: Iterable[str | os.PathLike[str]], *, timeout: float = 60.0
) -> tuple[str, ...]:
    """Create or update the CRDs in the given YAML files (several documents per file allowed),
    wait until each is Established and its REST endpoint answers. Returns the CRD names."""
    names: list[str] = []
    for path in paths:
        for document in yaml.safe_load_all(Path(path).read_text()):
            if not document:
                continue
            if document.get("kind") != "CustomResourceDefinition":
                raise ControlPlaneError(f"{path}: expected CustomResourceDefinition documents")
            name = document["metadata"]["name"]
            try:
                request(api_client, "POST", _CRD_PATH, body=document)
            except ApiException as exc:
                _ignore_status(exc, 409)
                current = request(api_client, "GET", f"{_CRD_PATH}/{name}")
                document = dict(document)
                document["metadata"] = {
                    **document["metadata"],
                    "resourceVersion": current["metadata"]["resourceVersion"],
                }
                request(api_client, "PUT", f"{_CRD_PATH}/{name}", body=document)
            names.append(name)
    for name in names:
        crd = _wait_established(api_client, name, timeout)
        group = crd["spec"]["group"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
        plural = crd["spec"]["names"]["plural"]

        def served(path: str = f"/apis/{group}/{version}/{plural}") -> bool:
            try:
                request(api_client, "GET", path, query={"limit": 1})
            except ApiException as exc:
                _ignore_status(exc, 404, 503)
                return False
            return True

        _wait(served, timeout, f"the {plural}.{group} endpoint")
    return tuple(names)


def service_account_kubeconfig(
    cp: ControlPlane,
    namespace: str,
    name: str,
    path: str | os.PathLike[str],
    *,
    expiration_seconds: int = 86_400,
) -> str:
    """Write a kubeconfig that authenticates as ServiceAccount ``namespace/name`` with a token
    from the TokenRequest API (creating the namespace and the ServiceAccount if missing).
    Returns the path."""
    api_client = new_client(cp.admin_kubeconfig)
    try:
        create_namespace(api_client, namespace, default_service_account=False)
        try:
            request(
                api_client,
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
        except ApiException as exc:
            _ignore_status(exc, 409)
        answer = request(
            api_client,
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
        )
    finally:
        api_client.close()
    token = answer["status"]["token"]
    user = f"{namespace}-{name}"
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "walras-dev",
                "cluster": {"server": cp.server, "certificate-authority": cp.ca_file},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "walras-dev",
                "context": {"cluster": "walras-dev", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "walras-dev",
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    target.chmod(0o600)
    return str(target)


def _delete_custom_resources(api_client: Any, group: str) -> None:
    crds = request(api_client, "GET", _CRD_PATH)["items"]
    for crd in crds:
        spec = crd["spec"]
        if spec["group"] != group:
            continue
        version = next((v["name"] for v in spec["versions"] if v.get("served")), None)
        if version is None:
            continue
        plural = spec["names"]["plural"]
        base = f"/apis/{group}/{version}"
        items = request(api_client, "GET", f"{base}/{plural}")["items"]
        for item in items:
            meta = item["metadata"]
            if "namespace" in meta:
                collection = f"{base}/namespaces/{meta['namespace']}/{plural}"
            else:
                collection = f"{base}/{plural}"
            _delete_listed(api_client, collection, [item])


def reset(api_client: Any, *, timeout: float = 120.0) -> None:
    """Return the cluster to its just-started state, as far as Walras tests care: delete every
    ``walras.dev`` custom resource (finalizers stripped: no operator may be running), every
    non-system namespace with its contents, every kwok node, and the cluster-scoped RBAC objects
    Helm installed (so a chart can be installed again). CRDs stay installed."""
    _delete_custom_resources(api_client, WALRAS_GROUP)
    for namespace in request(api_client, "GET", "/api/v1/namespaces")["items"]:
        name = namespace["metadata"]["name"]
        if name not in SYSTEM_NAMESPACES:
            delete_namespace(api_client, name, timeout=timeout)
    for kind in ("clusterrolebindings", "clusterroles"):
        collection = f"/apis/rbac.authorization.k8s.io/v1/{kind}"
        items = request(
            api_client,
            "GET",
            collection,
            query={"labelSelector": "app.kubernetes.io/managed-by=Helm"},
        )["items"]
        _delete_listed(api_client, collection, items)
    # Pods left in system namespaces (tests may use `default`) would outlive their nodes.
    for name in sorted(SYSTEM_NAMESPACES):
        collection = f"/api/v1/namespaces/{name}/pods"
        _delete_listed(api_client, collection, request(api_client, "GET", collection)["items"])
    delete_nodes(api_client, kwok_node_names(api_client), timeout=timeout)

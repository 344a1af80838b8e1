"""Real nodes in the local control plane (hack/real-node.sh, walras.testing.realnodes): real
kubelets and containerd, real processes, fake GPUs handed out by the kubelet's device manager.

Oracles are the kubelet's and the runtime's own answers: the Node's allocatable, the pod's
phase and reason as the kubelet sets them, what the process printed (its log, read through the
API server and the kubelet), files it wrote to a hostPath volume, the host's process table,
links and iptables rules.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import CRDS, create_job, create_pool, pool_manifest, start_operator

from walras.testing import devcluster, realnodes

GPU = "nvidia.com/gpu"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def api(real_cluster: realnodes.RealCluster) -> Iterator[Any]:
    client = real_cluster.control_plane.admin_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def ns(api: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    name = devcluster.unique_name(f"rn-{request.node.name}")
    devcluster.create_namespace(api, name)
    try:
        yield name
    finally:
        devcluster.delete_namespace(api, name, timeout=120)


def _wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def _pod(
    name: str,
    node: str,
    command: list[str],
    *,
    gpus: int = 0,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    grace: int = 30,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": realnodes.WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": command,
    }
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    if mounts:
        container["volumeMounts"] = mounts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "containers": [container],
            "volumes": volumes or [],
        },
    }


def _create(api: Any, ns: str, pod: dict[str, Any]) -> None:
    devcluster.request(api, "POST", f"/api/v1/namespaces/{ns}/pods", body=pod)


def _get(api: Any, ns: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = devcluster.request(api, "GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return pod


def _phase(api: Any, ns: str, name: str, *phases: str) -> dict[str, Any] | None:
    pod = _get(api, ns, name)
    return pod if pod.get("status", {}).get("phase") in phases else None


def _logs(api: Any, ns: str, name: str) -> str:
    """The container's output, through the API server and the node's kubelet."""
    verb, url, headers, body, _ = api.param_serialize(
        method="GET",
        resource_path=f"/api/v1/namespaces/{ns}/pods/{name}/log",
        header_params={"Accept": "*/*"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(verb, url, header_params=headers, body=body)
    text: str = response.read().decode()
    assert response.status == 200, text
    return text


def test_real_nodes_join_ready_with_their_gpus(
    api: Any, real_cluster: realnodes.RealCluster
) -> None:
    assert len(real_cluster.nodes) == 2
    for node in real_cluster.nodes:
        obj = devcluster.request(api, "GET", f"/api/v1/nodes/{node.name}")
        conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert conditions["Ready"] == "True"
        assert obj["status"]["allocatable"][GPU] == "4"
        assert obj["metadata"]["labels"][devcluster.GPU_TYPE_LABEL] == "fake-a100"
        assert obj["metadata"]["labels"][realnodes.REAL_NODE_LABEL] == "true"
        addresses = {a["type"]: a["address"] for a in obj["status"]["addresses"]}
        assert addresses["InternalIP"] == node.node_ip
        # The node's processes are the ones recorded, alive.
        for pid in (node.kubelet_pid, node.containerd_pid, node.deviceplugin_pid):
            assert pid is not None
            os.kill(pid, 0)


def test_kwok_nodes_beside_real_nodes_renew_their_lease(api: Any) -> None:
    # The node lifecycle controller (run for real nodes) marks a node NotReady once neither its
    # Ready heartbeat nor its Lease has moved for its grace period; kwok's node heartbeat is
    # minutes apart, so kwok nodes must renew a Lease, as kubelets do.
    name = devcluster.unique_name("kwok-beside-real")
    devcluster.create_gpu_node(api, name, gpu_type="fake-a100", gpus=8)
    try:
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"

        def renew_time() -> str:
            try:
                lease = devcluster.request(api, "GET", lease_path)
            except ApiException:
                return ""
            return str(lease["spec"].get("renewTime") or "")

        first = _wait_for(renew_time, 60, "kwok to create the node's Lease")
        # Renewed within its 40 s duration (kwok renews well inside it, as a kubelet does).
        _wait_for(lambda: renew_time() not in ("", first), 40, "kwok to renew the Lease")
        node = devcluster.request(api, "GET", f"/api/v1/nodes/{name}")
        assert node["spec"].get("taints") is None
    finally:
        devcluster.delete_nodes(api, [name])


def test_pod_sees_the_devices_the_kubelet_allocated(
    api: Any, ns: str, real_cluster: realnodes.RealCluster
) -> None:
    node = real_cluster.nodes[0]
    script = (
        "import os, numpy, walras\n"
        "print('DEVICES=' + os.environ.get('NVIDIA_VISIBLE_DEVICES', ''))\n"
        "print('WALRAS=' + walras.__file__)\n"
    )
    _create(api, ns, _pod("two-gpus", node.name, ["python3", "-c", script], gpus=2))
    pod = _wait_for(lambda: _phase(api, ns, "two-gpus", "Succeeded", "Failed"), 120, "pod to end")
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    output = _logs(api, ns, "two-gpus").splitlines()
    # The workload image: Debian's numpy, the repository's walras package under /app.
    assert "WALRAS=/app/walras/__init__.py" in output
    line = next(x for x in output if x.startswith("DEVICES="))
    devices = line.removeprefix("DEVICES=").split(",")
    assert len(devices) == 2
    assert len(set(devices)) == 2
    assert set(devices) <= set(node.device_ids)


def test_pod_reaches_the_api_server_with_its_service_account(
    api: Any, ns: str, real_cluster: realnodes.RealCluster
) -> None:
    # In-cluster configuration exactly as a client library reads it: the Service address the
    # kubelet puts in the environment, the projected token and the cluster CA.
    script = (
        "import json, os, ssl, urllib.error, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "port = os.environ['KUBERNETES_SERVICE_PORT']\n"
        "ctx = ssl.create_default_context(cafile=sa + 'ca.crt')\n"
        "req = urllib.request.Request(f'https://{host}:{port}/api/v1/nodes', headers={\n"
        "    'Authorization': 'Bearer ' + open(sa + 'token').read()})\n"
        "try:\n"
        "    urllib.request.urlopen(req, context=ctx, timeout=10)\n"
        "    print('ANSWER=200')\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('ANSWER=%d %s' % (e.code, json.load(e)['message']))\n"
    )
    node = real_cluster.nodes[0]
    _create(api, ns, _pod("in-cluster", node.name, ["python3", "-c", script]))
    pod = _wait_for(lambda: _phase(api, ns, "in-cluster", "Succeeded", "Failed"), 120, "the pod")
    assert pod["status"]["phase"] == "Succeeded", _logs(api, ns, "in-cluster")
    line = next(x for x in _logs(api, ns, "in-cluster").splitlines() if x.startswith("ANSWER="))
    # The API server authenticated the pod's ServiceAccount (TLS verified against the cluster CA)
    # and RBAC refused it: the default ServiceAccount may not list nodes.
    assert line.startswith("ANSWER=403 "), line
    assert f'User "system:serviceaccount:{ns}:default" cannot list resource "nodes"' in line


def test_kubelet_refuses_more_gpus_than_the_node_has(
    api: Any, ns: str, real_cluster: realnodes.RealCluster
) -> None:
    node = real_cluster.nodes[1]
    _create(api, ns, _pod("five-gpus", node.name, ["true"], gpus=5))
    pod = _wait_for(lambda: _phase(api, ns, "five-gpus", "Failed", "Succeeded"), 60, "rejection")
    assert pod["status"]["phase"] == "Failed"
    # The device manager, not a capacity count, refuses it: its admission error names the
    # resource, the request and the node's 4 free devices.
    assert pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert f"unavailable for {GPU}. Requested: 5, Available: 4" in pod["status"]["message"]


def test_sigterm_trap_writes_its_checkpoint_before_the_pod_goes(
    api: Any, ns: str, real_cluster: realnodes.RealCluster
) -> None:
    node = real_cluster.nodes[1]
    with tempfile.TemporaryDirectory(prefix="walras-ckpt-") as host_dir:
        script = (
            "import signal, sys, time\n"
            "def stop(signum, frame):\n"
            "    open('/ckpt/checkpoint', 'w').write('step=%d' % 42)\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, stop)\n"
            "open('/ckpt/started', 'w').write('yes')\n"
            "while True:\n"
            "    time.sleep(0.1)\n"
        )
        pod = _pod(
            "trap",
            node.name,
            ["python3", "-c", script],
            gpus=1,
            volumes=[{"name": "ckpt", "hostPath": {"path": host_dir, "type": "Directory"}}],
            mounts=[{"name": "ckpt", "mountPath": "/ckpt"}],
        )
        _create(api, ns, pod)
        started = Path(host_dir) / "started"
        _wait_for(started.exists, 120, "the container to start")
        devcluster.request(api, "DELETE", f"/api/v1/namespaces/{ns}/pods/trap")
        checkpoint = Path(host_dir) / "checkpoint"
        # Within the 30 s grace period: the process exits 0 on SIGTERM, not by SIGKILL.
        _wait_for(checkpoint.exists, 30, "the checkpoint written on SIGTERM")
        assert checkpoint.read_text() == "step=42"


def _pids_with(needle: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmdline:
                pids.append(int(entry.name))
    return pids


def test_stopped_node_leaves_no_process_link_mount_or_chain(
    api: Any, ns: str, real_cluster: realnodes.RealCluster
) -> None:
    cp = real_cluster.control_plane
    node = realnodes.add_real_node(
        cp, "real-extra", gpus=1, images=[realnodes.workload_image_archive()]
    )
    _create(api, ns, _pod("sleeper", node.name, ["sleep", "3600"], gpus=1))
    _wait_for(lambda: _phase(api, ns, "sleeper", "Running"), 120, "the pod to run")
    assert node.running_tasks(), "the runtime lists no running container"
    index = Path(node.directory, "index").read_text().strip()
    realnodes.stop_real_node(cp, node)

    for pid in (node.kubelet_pid, node.containerd_pid, node.deviceplugin_pid):
        assert pid is not None
        assert not Path(f"/proc/{pid}").exists(), f"pid {pid} still runs"
    assert _pids_with(node.containerd_socket) == [], "a containerd shim of the node still runs"
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert f"walras-node{index}:" not in links.stdout
    assert f"walras-cni{index}:" not in links.stdout
    assert node.directory not in Path("/proc/self/mountinfo").read_text()
    assert not Path(node.directory).exists()
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True)
    assert "KUBE-" not in rules.stdout
    assert not any(Path(cg).joinpath(f"walras-node{index}").exists() for cg in _cgroups())


def _cgroups() -> list[str]:
    return [str(p) for p in Path("/sys/fs/cgroup").iterdir() if (p / "cgroup.procs").exists()]


def test_operator_places_a_gang_that_runs_on_real_nodes(
    api: Any, ns: str, real_cluster: realnodes.RealCluster, tmp_path: Path
) -> None:
    devcluster.install_crds(api, CRDS)
    try:
        create_pool(api, pool_manifest("real-a100", "fake-a100"))
    except ApiException as exc:  # the pool of another real-node module, same session
        if exc.status != 409:
            raise
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print('DEVICES=' + os.environ.get('NVIDIA_VISIBLE_DEVICES', ''), flush=True)\n"
        "time.sleep(3600)\n"
    )
    container = {
        "name": "train",
        "image": realnodes.WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", script],
        "resources": {"limits": {GPU: "2"}},
    }
    job = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": "gang"},
        "spec": {
            "replicas": 2,
            "throughput": {"fake-a100": 1.0},
            "template": {
                "spec": {
                    "containers": [container],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 10,
                }
            },
        },
    }
    create_job(api, ns, job)
    op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=2.0)
    try:

        def running() -> list[dict[str, Any]]:
            path = f"/api/v1/namespaces/{ns}/pods"
            pods: list[dict[str, Any]] = devcluster.request(
                api, "GET", path, query={"labelSelector": "walras.dev/job=gang"}
            )["items"]
            live = [p for p in pods if p["status"].get("phase") == "Running"]
            return live if len(live) == 2 else []

        pods = _wait_for(running, 180, "the gang's two pods to run")
        by_node: dict[str, list[str]] = {}
        for pod in pods:
            name = pod["metadata"]["name"]
            line = _wait_for(
                lambda name=name: next(
                    (x for x in _logs(api, ns, name).splitlines() if x.startswith("DEVICES=")),
                    "",
                ),
                60,
                f"{name} to print its devices",
            )
            devices = line.removeprefix("DEVICES=").split(",")
            assert len(set(devices)) == 2
            by_node.setdefault(pod["spec"]["nodeName"], []).extend(devices)
        nodes = {n.name: n for n in real_cluster.nodes}
        for node_name, devices in by_node.items():
            # No device is handed to two containers, and each is one the node has.
            assert len(devices) == len(set(devices))
            assert set(devices) <= set(nodes[node_name].device_ids)
            # The runtime itself runs each pod's container.
            pod_names = {
                c["labels"].get("io.kubernetes.pod.name")
                for c in nodes[node_name].containers()
                if c["labels"].get("io.kubernetes.container.name") == "train"
            }
            assert {
                p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node_name
            } <= pod_names
    finally:
        op.terminate()

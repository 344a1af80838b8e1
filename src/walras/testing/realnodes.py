"""Real nodes next to the kwok ones: a kubelet and its own containerd per node, running real
containers, with fake GPUs from :mod:`walras.testing.deviceplugin`.

This module drives ``hack/real-node.sh`` (which says what a node is made of and which host
state it touches and restores) for tests, the demo and the benchmarks. A control plane that gets
real nodes is started with ``devcluster.start(real_nodes=True)``; :func:`start_real_cluster` does
both. Real nodes need root on Linux with cgroups, Debian's containerd, runc and CNI plugins and
the cached kubelet (``make tools``); :func:`missing_capability` names what is missing.

Every real node carries the labels ``walras.dev/gpu-type`` (as the kwok nodes) and
``walras.dev/real-node=true``; its GPUs are ``nvidia.com/gpu`` with device IDs
``<node>-gpu-<i>``, which a container sees in ``NVIDIA_VISIBLE_DEVICES``. The reference workload
image (``localhost/walras-workload:dev``, ``hack/build-workload-image.sh``) is imported into
every node's runtime; pods use it with ``imagePullPolicy: Never``, since there is no registry.
Pods reach the API server with their in-cluster configuration (the ``kubernetes`` Service's
address is forwarded to it: :mod:`walras.testing.apiproxy`). See ``docs/real-nodes.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walras.testing import devcluster

REAL_NODE_LABEL = "walras.dev/real-node"
WORKLOAD_IMAGE = "localhost/walras-workload:dev"
_SCRIPT = "real-node.sh"


class RealNodeError(devcluster.ControlPlaneError):
    """A real node could not be built, started, inspected or stopped."""


def _run(
    script: str, *args: str, timeout: float = 300.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(devcluster.hack_dir() / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def missing_capability() -> str | None:
    """``None`` when this machine can run real nodes, else one line naming what is missing
    (not root, no cgroups, no containerd, the kubelet not built, ...)."""
    if not sys.platform.startswith("linux"):
        return f"real nodes need Linux (this is {sys.platform})"
    result = _run(_SCRIPT, "check", timeout=60)
    if result.returncode == 0:
        return None
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return lines[-1].split("error: ", 1)[-1] if lines else f"{_SCRIPT} check failed"


def workload_image_archive() -> str:
    """Build (or reuse from the cache) the workload image; the path of its archive."""
    result = _run("build-workload-image.sh", timeout=900)
    values = dict(line.partition("=")[::2] for line in result.stdout.splitlines() if "=" in line)
    if result.returncode != 0 or not values.get("archive"):
        raise RealNodeError(f"build-workload-image.sh failed:\n{result.stderr[-4000:]}")
    return values["archive"]


@dataclass(frozen=True)
class RealNode:
    """A running real node: its processes, its runtime's socket, its fake GPUs."""

    name: str
    directory: str
    node_ip: str
    containerd_socket: str
    kubelet_pid: int
    containerd_pid: int
    deviceplugin_pid: int | None
    gpus: int
    gpu_type: str
    #: What ``hack/real-node.sh start`` logged (the seconds each step took).
    start_log: str = ""

    @property
    def device_ids(self) -> list[str]:
        """The IDs the node's device plugin advertises."""
        return [f"{self.name}-gpu-{i}" for i in range(self.gpus)]

    def _ctr(self, *args: str) -> str:
        result = subprocess.run(
            ["ctr", "--address", self.containerd_socket, "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} on {self.name}: {result.stderr.strip()}")
        return result.stdout

    def containers(self) -> list[dict[str, Any]]:
        """The runtime's own container list (``ctr containers``), pause sandboxes included: each
        with ``id``, ``image`` and ``labels`` (the CRI's ``io.kubernetes.pod.name``, ...). A
        container removed between the list and its info (an ended slice's) is left out, as in
        :func:`running_containers`."""
        out: list[dict[str, Any]] = []
        for cid in self._ctr("containers", "list", "--quiet").split():
            try:
                info = json.loads(self._ctr("containers", "info", cid))
            except RealNodeError:
                continue
            out.append(
                {"id": cid, "image": info.get("Image", ""), "labels": info.get("Labels", {})}
            )
        return out

    def running_tasks(self) -> dict[str, int]:
        """Container id -> host PID of every RUNNING task of the node's runtime."""
        tasks: dict[str, int] = {}
        for line in self._ctr("tasks", "list").splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "RUNNING":
                tasks[parts[0]] = int(parts[1])
        return tasks


@dataclass(frozen=True)
class RunningContainer:
    """A running container of a real node's runtime, as the runtime itself describes it."""

    id: str
    pid: int
    namespace: str
    pod: str
    container: str
    #: The GPUs the kubelet's device manager gave it (``NVIDIA_VISIBLE_DEVICES`` in its spec).
    devices: tuple[str, ...]


def running_containers(
    node: RealNode, cache: dict[str, dict[str, Any]] | None = None
) -> list[RunningContainer]:
    """Every RUNNING application container of ``node`` (pause sandboxes left out), from the
    runtime's task list and each container's own spec. ``cache`` keeps each container's spec
    between calls (a container's spec never changes), so that sampling costs one ``ctr`` call
    per node once the containers are known. A container that went away between the two
    questions is left out."""
    known = {} if cache is None else cache
    out: list[RunningContainer] = []
    for cid, pid in node.running_tasks().items():
        if cid not in known:
            try:
                known[cid] = json.loads(node._ctr("containers", "info", cid))
            except RealNodeError:
                continue
        info = known[cid]
        labels = info.get("Labels") or {}
        if labels.get("io.cri-containerd.kind") == "sandbox":
            continue
        env = ((info.get("Spec") or {}).get("process") or {}).get("env") or []
        visible = next((e.partition("=")[2] for e in env if e.startswith(_VISIBLE + "=")), "")
        out.append(
            RunningContainer(
                id=cid,
                pid=pid,
                namespace=labels.get("io.kubernetes.pod.namespace", ""),
                pod=labels.get("io.kubernetes.pod.name", ""),
                container=labels.get("io.kubernetes.container.name", ""),
                devices=tuple(d for d in visible.split(",") if d),
            )
        )
    return out


_VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.partition("=")[::2] for line in path.read_text().splitlines() if "=" in line)


def add_real_node(
    cp: devcluster.ControlPlane,
    name: str,
    *,
    gpu_type: str = "fake-gpu",
    gpus: int = 4,
    images: Sequence[str] = (),
    timeout: float = 180.0,
) -> RealNode:
    """Join a real node to ``cp`` (started with ``real_nodes=True``) and wait until it is Ready
    with ``gpus`` allocatable ``nvidia.com/gpu``; ``images`` are archives imported into its
    runtime (the pause image always is)."""
    args = ["start", cp.directory, name, "--gpus", str(gpus), "--gpu-type", gpu_type]
    args += ["--python", sys.executable]
    for archive in images:
        args += ["--image", archive]
    result = _run(_SCRIPT, *args, timeout=timeout)
    node_dir = Path(cp.directory) / "nodes" / name
    if result.returncode != 0:
        raise RealNodeError(f"real node {name} did not start:\n{result.stderr[-6000:]}")
    values = _read_env(node_dir / "node.env")
    return RealNode(
        name=name,
        directory=str(node_dir),
        node_ip=values["NODE_IP"],
        containerd_socket=values["CONTAINERD_SOCKET"],
        kubelet_pid=int(values["KUBELET_PID"]),
        containerd_pid=int(values["CONTAINERD_PID"]),
        deviceplugin_pid=int(values["DEVICEPLUGIN_PID"])
        if values.get("DEVICEPLUGIN_PID")
        else None,
        gpus=int(values["GPUS"]),
        gpu_type=values["GPU_TYPE"],
        start_log=result.stderr,
    )


def stop_real_node(cp: devcluster.ControlPlane, node: RealNode) -> None:
    """Stop the node's processes and undo its host side effects (its Node object stays, as
    when a machine dies; the node lifecycle controller marks it NotReady)."""
    result = _run(_SCRIPT, "stop", cp.directory, node.name, timeout=devcluster.REAL_NODE_STOP_S)
    if result.returncode != 0:
        raise RealNodeError(f"stopping real node {node.name} failed: {result.stderr.strip()}")


@dataclass(frozen=True)
class RealCluster:
    """A control plane with real nodes (and room for kwok nodes)."""

    control_plane: devcluster.ControlPlane
    nodes: list[RealNode] = field(default_factory=list)
    image: str = WORKLOAD_IMAGE


def start_real_cluster(
    real_nodes: int = 2,
    *,
    gpus_per_real_node: int = 4,
    gpu_type: str = "fake-gpu",
    name_prefix: str = "real",
) -> RealCluster:
    """A fresh control plane with ``real_nodes`` real nodes (``<prefix>-0`` …), the workload image
    imported into each. Stop it with :func:`stop_real_cluster`."""
    missing = missing_capability()
    if missing is not None:
        raise RealNodeError(missing)
    archive = workload_image_archive()
    cp = devcluster.start(real_nodes=True)
    try:
        nodes = [
            add_real_node(
                cp,
                f"{name_prefix}-{i}",
                gpu_type=gpu_type,
                gpus=gpus_per_real_node,
                images=[archive],
            )
            for i in range(real_nodes)
        ]
    except BaseException:
        devcluster.stop(cp)
        raise
    return RealCluster(control_plane=cp, nodes=nodes)


def stop_real_cluster(cluster: RealCluster) -> None:
    """Stop the nodes and the control plane (``control-plane.sh stop`` stops the nodes first)."""
    devcluster.stop(cluster.control_plane)

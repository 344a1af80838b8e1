"""Benchmark of the local control plane (walras.testing.devcluster, hack/control-plane.sh).

Prints one JSON line per case:

* ``warm_start``: seconds from ``devcluster.start()`` to a ready apiserver with kwok running,
  binaries already built (target <= 30 s), and the stop time.
* ``nodes``: creating 200 kwok GPU nodes (8 GPUs each) and waiting until all are Ready.
* ``pods_bind``: creating 1,000 pods (``schedulerName: walras``, 1 GPU each), binding them across
  the 200 nodes through ``pods/binding`` (5 per node), and waiting until kwok reports all Running:
  ``creates_per_s``, ``bindings_per_s`` (half through the typed client's
  ``create_namespaced_binding``, half as raw requests via ``devcluster.bind_pod``; both rates are
  reported too), ``running_s`` (bindings until kwok reports all Running); plus peak RSS of the
  apiserver, etcd and kwok.

Requests go through the Python client from ``WORKERS`` threads (an operator binds from one
process too). Without built binaries it prints one ``skipped`` line and exits 0.
Runs in well under 3 minutes on 2 cores.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from walras.testing import devcluster

NODES = 200
PODS = 1_000
GPUS_PER_NODE = 8
WORKERS = 8


def peak_rss_mb(pid_file: Path) -> float | None:
    try:
        pid = pid_file.read_text().strip()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def emit(case: str, **values: Any) -> None:
    print(json.dumps({"bench": "controlplane", "case": case, **values}), flush=True)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"walras.dev/job": "bench"}},
        "spec": {
            "schedulerName": "walras",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "c",
                    "image": "example.invalid/bench:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def main() -> int:
    if not devcluster.binaries_available():
        emit("warm_start", skipped="binaries not built: run `make tools`")
        return 0
    t0 = time.perf_counter()
    cp = devcluster.start()
    start_s = time.perf_counter() - t0
    directory = Path(cp.directory)
    api = devcluster.new_client(cp.admin_kubeconfig)
    api.configuration.connection_pool_maxsize = WORKERS
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            names = [f"bench-{i:03d}" for i in range(NODES)]
            t0 = time.perf_counter()
            list(
                pool.map(
                    lambda n: devcluster.create_gpu_node(
                        api,
                        n,
                        gpu_type=("a100", "h100", "l4", "t4")[int(n[-3:]) % 4],
                        gpus=GPUS_PER_NODE,
                        wait=False,
                    ),
                    names,
                )
            )
            created_s = time.perf_counter() - t0
            devcluster.wait_nodes_ready(api, names, timeout=120)
            ready_s = time.perf_counter() - t0
            emit("nodes", nodes=NODES, create_s=round(created_s, 3), all_ready_s=round(ready_s, 3))

            namespace = "bench"
            devcluster.create_namespace(api, namespace)
            pods = [f"p-{i:04d}" for i in range(PODS)]
            t0 = time.perf_counter()
            list(
                pool.map(
                    lambda p: devcluster.request(
                        api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=pod(p)
                    ),
                    pods,
                )
            )
            create_s = time.perf_counter() - t0

            # First half through the typed client (what most Python code would write), second
            # half as raw requests (devcluster.bind_pod): the difference is client CPU.
            core = k8s.CoreV1Api(api)

            def typed(i: int) -> None:
                binding = k8s.V1Binding(
                    metadata=k8s.V1ObjectMeta(name=pods[i]),
                    target=k8s.V1ObjectReference(kind="Node", name=names[i % NODES]),
                )
                core.create_namespaced_binding(namespace, binding, _preload_content=False)

            half = PODS // 2
            t0 = time.perf_counter()
            list(pool.map(typed, range(half)))
            typed_s = time.perf_counter() - t0
            list(
                pool.map(
                    lambda i: devcluster.bind_pod(api, namespace, pods[i], names[i % NODES]),
                    range(half, PODS),
                )
            )
            bind_s = time.perf_counter() - t0
            raw_s = bind_s - typed_s

            def running() -> int:
                items = devcluster.request(api, "GET", f"/api/v1/namespaces/{namespace}/pods")
                return sum(1 for p in items["items"] if p["status"].get("phase") == "Running")

            deadline = time.monotonic() + 120
            count = running()
            while count < PODS and time.monotonic() < deadline:
                time.sleep(0.5)
                count = running()
            running_s = time.perf_counter() - t0
            emit(
                "pods_bind",
                pods=PODS,
                nodes=NODES,
                workers=WORKERS,
                creates_per_s=round(PODS / create_s, 1),
                bindings_per_s=round(PODS / bind_s, 1),
                typed_bindings_per_s=round(half / typed_s, 1),
                raw_bindings_per_s=round((PODS - half) / raw_s, 1),
                running=count,
                running_s=round(running_s, 3),
                overcommitted_nodes=len(devcluster.overcommitted_nodes(api)),
                apiserver_peak_rss_mb=peak_rss_mb(directory / "kube-apiserver.pid"),
                etcd_peak_rss_mb=peak_rss_mb(directory / "etcd.pid"),
                kwok_peak_rss_mb=peak_rss_mb(directory / "kwok.pid"),
            )
    finally:
        api.close()
        t0 = time.perf_counter()
        devcluster.stop(cp)
        stop_s = time.perf_counter() - t0
    emit("warm_start", start_s=round(start_s, 3), stop_s=round(stop_s, 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

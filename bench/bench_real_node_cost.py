"""What a real node costs on this machine (hack/real-node.sh, walras.testing.realnodes).

Prints one JSON line per case:

* ``start``: seconds from ``add_real_node`` to the node Ready with its 4 fake GPUs allocatable
  (containerd start, image imports, kubelet registration, device plugin registration), per node;
  and the workload image build (``cached`` says whether the archive was reused).
* ``idle_cpu``: CPU seconds (user + system, from ``/proc/PID/stat``) that each node's kubelet,
  containerd and device plugin use per minute with no pod, over one ``IDLE_S`` window; per node
  and in total.
* ``bind_to_running``: ``PODS`` pods (the workload image, a Python process that exits 0 on
  SIGTERM) created unbound and bound with ``pods/binding``: seconds from the binding to phase
  Running as the kubelet reports it (median, max); then delete (grace 30 s) to the pod object gone.

Without root, Linux, containerd or a built kubelet it prints one ``skipped`` line naming what is
missing and exits 0. Runs in about two minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from walras.testing import devcluster, realnodes

NODES = 2
GPUS = 4
IDLE_S = 60.0
PODS = 6
EXIT_ON_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "time.sleep(3600)\n"
)


def emit(case: str, **values: Any) -> None:
    print(json.dumps({"bench": "real_node_cost", "case": case, **values}), flush=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); index 11 and 12 after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(predicate: Any, timeout: float) -> float:
    t0 = time.perf_counter()
    while not predicate():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError
        time.sleep(0.05)
    return time.perf_counter() - t0


def main() -> int:
    missing = None if devcluster.binaries_available() else "control-plane binaries not built"
    missing = missing or realnodes.missing_capability()
    if missing:
        emit("start", skipped=missing)
        return 0
    t0 = time.perf_counter()
    archive = realnodes.workload_image_archive()
    image_s = time.perf_counter() - t0
    cp = devcluster.start(real_nodes=True)
    api = cp.admin_client()
    try:
        nodes, start_s = [], []
        for i in range(NODES):
            t0 = time.perf_counter()
            nodes.append(realnodes.add_real_node(cp, f"bench-{i}", gpus=GPUS, images=[archive]))
            start_s.append(round(time.perf_counter() - t0, 2))
        emit(
            "start",
            nodes=NODES,
            node_ready_s=start_s,
            image_s=round(image_s, 1),
            steps=[n.start_log.strip().splitlines()[-3:] for n in nodes],
        )

        time.sleep(5)  # past the kubelets' first status and lease updates
        pids = {
            n.name: {
                "kubelet": n.kubelet_pid,
                "containerd": n.containerd_pid,
                "deviceplugin": n.deviceplugin_pid or 0,
            }
            for n in nodes
        }
        before = {n: {k: cpu_seconds(p) for k, p in d.items()} for n, d in pids.items()}
        t0 = time.perf_counter()
        time.sleep(IDLE_S)
        window = time.perf_counter() - t0
        per_node = {
            n: {k: round((cpu_seconds(p) - before[n][k]) * 60 / window, 2) for k, p in d.items()}
            for n, d in pids.items()
        }
        totals = {n: round(sum(v.values()), 2) for n, v in per_node.items()}
        emit(
            "idle_cpu",
            window_s=round(window, 1),
            cpu_s_per_min=per_node,
            node_total_cpu_s_per_min=totals,
            all_nodes_cpu_s_per_min=round(sum(totals.values()), 2),
        )

        ns = devcluster.unique_name("bench-real")
        devcluster.create_namespace(api, ns)
        path = f"/api/v1/namespaces/{ns}/pods"
        running, gone = [], []
        for i in range(PODS):
            name = f"p{i}"
            node = nodes[i % NODES].name
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "schedulerName": "walras",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": realnodes.WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            # Exits on SIGTERM (a bare `sleep` as PID 1 ignores it and would
                            # wait out the 30 s grace period).
                            "command": ["python3", "-c", EXIT_ON_SIGTERM],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
            devcluster.request(api, "POST", path, body=body)

            def phase(name: str = name) -> str:
                pod = devcluster.request(api, "GET", f"{path}/{name}")
                return str(pod.get("status", {}).get("phase"))

            t0 = time.perf_counter()
            devcluster.bind_pod(api, ns, name, node)
            wait(lambda: phase() == "Running", 120)
            running.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            devcluster.request(api, "DELETE", f"{path}/{name}")

            def absent(name: str = name) -> bool:
                names = [
                    p["metadata"]["name"] for p in devcluster.request(api, "GET", path)["items"]
                ]
                return name not in names

            wait(absent, 120)
            gone.append(time.perf_counter() - t0)
        emit(
            "bind_to_running",
            pods=PODS,
            bind_to_running_s_median=round(statistics.median(running), 2),
            bind_to_running_s_max=round(max(running), 2),
            delete_to_gone_s_median=round(statistics.median(gone), 2),
            delete_to_gone_s_max=round(max(gone), 2),
        )
    finally:
        api.close()
        devcluster.stop(cp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

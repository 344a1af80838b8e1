"""What a preemption costs with real processes: the reference workload under the operator on two
real nodes (hack/real-node.sh, walras.testing.realnodes).

One run: three FungibleJobs of ``examples/workloads/train.py`` (``walras.testing.reference_jobs``:
a small NumPy model paced at 10 ms a step, a quarter of a core per pod), gangs of 2 pods of 2
GPUs, on 2 real nodes of 4 fake GPUs, rounds of ``ROUND_S`` = 60 s, until all three finish. Two
gangs fit at a time, so the rotation preempts. ``walras.testing.runtime_observer.Observer``
samples every node's containerd (which containers run, with which devices) and the pods (their
``walras.dev/steps-done`` as it changes) every ``INTERVAL_S``, and keeps every container's log.

Prints one JSON line per case:

* ``restart_overhead``: per start of a gang after a preemption (replica 0): seconds from its pod
  first seen to the first report above the step it resumed from (what ``walras.core.restarts``
  measures); median, p95, n; beside ``--restart-seconds``' default of 10 s, which the realiser
  assumes until it has measured a job.
* ``handover``: per preemption whose GPUs went to another gang: seconds from the last sample
  with the preempted gang's container on a device to the first sample with the next gang's
  container on one of those devices; median, p95, max.
* ``idle_gpu_fraction``: while all three jobs want GPUs (12 wanted, 8 there), per 60 s window
  from the first gang running: the fraction of GPU-seconds with no running container
  (``1 - mean(devices held) / 8`` over the window's samples); per window and overall; target
  ≤ 0.05.
* ``steps_lost``: per preemption: the job's highest reported count before the new start minus
  the step the new start resumed from (the log of replica 0), and the same for replica 0 alone
  (its stop step minus the resume step).

Resolution: every time is the observer's clock when a sample was taken, so each figure is known
to within ``INTERVAL_S`` (0.5 s) plus one API round trip. The operator runs with
``--restart-seconds 0`` and ``--min-run-seconds 0`` so that it rotates every round whatever it
would assume; the figures are
what a restart costs, to compare with the 10 s it would otherwise assume.

Without root, Linux, containerd or a built kubelet it prints one ``skipped`` line naming what is
missing and exits 0. Runs in about 4 to 6 minutes on 2 cores.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from walras.testing import devcluster, realnodes
from walras.testing.reference_jobs import setup_namespace, train_job
from walras.testing.runtime_observer import Observer

ROUND_S = 60.0
INTERVAL_S = 0.5
STEPS = 12000  # 120 s of running at 100 steps/s: two slices of 60 s per job
GPUS = 4
NODES = 2
JOBS = ("ba", "bb", "bc")
ASSUMED_RESTART_S = 10.0
CRDS = sorted((devcluster.hack_dir().parent / "crds").glob("*.yaml"))
BASE = "/apis/walras.dev/v1alpha1"


def emit(case: str, **values: Any) -> None:
    print(json.dumps({"bench": "real_nodes", "case": case, **values}), flush=True)


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(values),
        "median_s": round(statistics.median(values), 2),
        "p95_s": round(p95, 2),
        "max_s": round(ordered[-1], 2),
    }


def start_operator(cp: devcluster.ControlPlane, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-c",
        "from walras.cli import main; main()",
        "operator",
        "--no-leader-elect",
        "--policy-arg",
        "price-discovery.backend=numpy",
        "--round-seconds",
        str(ROUND_S),
        "--restart-seconds",
        "0",
        "--min-run-seconds",
        "0",
        "--kubeconfig",
        cp.admin_kubeconfig,
        "--health-port",
        "-1",
        "--metrics-port",
        "-1",
    ]
    with log.open("wb") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def phase(api: Any, ns: str, name: str) -> str:
    job = devcluster.request(api, "GET", f"{BASE}/namespaces/{ns}/fungiblejobs/{name}")
    return str((job.get("status") or {}).get("phase", ""))


def run(cluster: realnodes.RealCluster, work: Path) -> None:
    cp = cluster.control_plane
    api = cp.admin_client()
    devcluster.install_crds(api, CRDS)
    pool = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "ResourcePool",
        "metadata": {"name": "real-a100"},
        "spec": {"gpuType": "fake-a100", "nodeSelector": {devcluster.GPU_TYPE_LABEL: "fake-a100"}},
    }
    devcluster.request(api, "POST", f"{BASE}/resourcepools", body=pool)
    ns = "bench-real"
    devcluster.create_namespace(api, ns)
    setup_namespace(api, ns)
    observer = Observer(cp, cluster.nodes, ns, interval=INTERVAL_S)
    observer.start()
    for job in JOBS:
        body = train_job(job, work / job, STEPS)
        body["metadata"]["namespace"] = ns
        devcluster.request(api, "POST", f"{BASE}/namespaces/{ns}/fungiblejobs", body=body)
    op = start_operator(cp, work / "operator.log")
    finished: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 30 * ROUND_S
        while len(finished) < len(JOBS):
            if op.poll() is not None:
                raise RuntimeError(
                    f"operator exited: {(work / 'operator.log').read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError("the jobs did not finish in 30 rounds")
            for job in JOBS:
                if job not in finished and phase(api, ns, job) == "Succeeded":
                    finished[job] = time.time()
            time.sleep(1.0)
    finally:
        op.terminate()
        op.wait(timeout=30)
        time.sleep(2 * INTERVAL_S)
        observer.stop()
        api.close()
    if observer.errors:
        raise RuntimeError(f"observer: {observer.errors[:3]}")
    report(observer, min(finished.values()))


def report(observer: Observer, contention_end: float) -> None:
    restarts: list[float] = []
    lost_job: list[int] = []
    lost_replica0: list[int] = []
    for job in JOBS:
        starts = observer.starts(job)
        best_before = 0
        for i, pod in enumerate(starts):
            log = observer.log(pod.name)
            if i > 0 and log.start_step is not None:
                after = [t for t, n in pod.reports if n > log.start_step]
                if after:
                    restarts.append(after[0] - pod.first_seen)
                lost_job.append(max(0, best_before - log.start_step))
                before = observer.log(starts[i - 1].name)
                if before.stopped_at is not None:
                    lost_replica0.append(before.stopped_at - log.start_step)
            # The job's highest report so far, over both replicas of every start up to this one.
            for p in observer.pods.values():
                if p.job == job and p.round <= pod.round:
                    best_before = max([best_before, *(n for _, n in p.reports)])
    emit(
        "restart_overhead",
        **summary(restarts),
        assumed_restart_s=ASSUMED_RESTART_S,
        round_s=ROUND_S,
    )

    # Hand-over: per device, the holder (pod) in each sample; a change from one gang's pod to
    # another's, with samples of no holder between, is one hand-over of that device.
    handovers: dict[tuple[str, str], float] = {}
    last_holder: dict[str, tuple[str, float]] = {}
    for sample in observer.samples:
        for running in sample.containers.values():
            for c in running:
                for device in c.devices:
                    previous = last_holder.get(device)
                    if previous is not None and previous[0] != c.pod:
                        old_job = observer.pods.get(previous[0])
                        new_job = observer.pods.get(c.pod)
                        if old_job and new_job and old_job.job != new_job.job:
                            key = (previous[0], c.pod)
                            gap = sample.at - previous[1]
                            handovers[key] = min(handovers.get(key, gap), gap)
                    last_holder[device] = (c.pod, sample.at)
    emit("handover", **summary(list(handovers.values())), interval_s=INTERVAL_S)

    # Idle GPU-seconds while demand exceeds the 8 GPUs.
    total = GPUS * NODES
    begin = next((s.at for s in observer.samples if any(s.containers.values())), contention_end)
    windows: list[float] = []
    held: list[float] = []
    t = begin
    while t < contention_end:
        inside = [s for s in observer.samples if t <= s.at < min(t + ROUND_S, contention_end)]
        if inside:
            busy = [sum(len(c.devices) for cs in s.containers.values() for c in cs) for s in inside]
            windows.append(round(1.0 - statistics.mean(busy) / total, 4))
            held.extend(busy)
        t += ROUND_S
    emit(
        "idle_gpu_fraction",
        per_round=windows,
        overall=round(1.0 - statistics.mean(held) / total, 4) if held else None,
        target=0.05,
        round_s=ROUND_S,
    )
    emit(
        "steps_lost",
        preemptions=len(lost_job),
        job_max=max(lost_job, default=0),
        job_total=sum(lost_job),
        replica0_max=max(lost_replica0, default=0),
        replica0_total=sum(lost_replica0),
    )


def main() -> int:
    missing = (
        realnodes.missing_capability()
        if devcluster.binaries_available()
        else ("kube-apiserver/etcd/kwok are not built: run `make tools`")
    )
    if missing is not None:
        emit("skipped", reason=missing)
        return 0
    cluster = realnodes.start_real_cluster(NODES, gpus_per_real_node=GPUS, gpu_type="fake-a100")
    try:
        with tempfile.TemporaryDirectory(prefix="walras-bench-real-") as work:
            run(cluster, Path(work))
    finally:
        realnodes.stop_real_cluster(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())

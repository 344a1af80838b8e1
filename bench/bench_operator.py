"""Benchmark of the operator on the real local control plane (walras.testing.devcluster).

Prints one JSON line per case:

* ``pipeline_<jobs>x<nodes>``: the operator's computation of one round without the API server
  (snapshot → solve → realise → status objects) on synthetic jobs and nodes, median of 3 warm
  runs. This is the round latency a cluster whose placements do not change pays.

* ``first_binding``: an idle cluster (4 nodes, operator running, no jobs); one FungibleJob is
  created and we time until its pod is bound (``spec.nodeName`` set), polling every 10 ms.
  Target: <= 2 s. Repeated ``FIRST_BINDING_TRIES`` times; median and max.
* ``round_<jobs>x<nodes>``: ``jobs`` FungibleJobs (1-2 replicas of 1 GPU, throughputs on four GPU
  types) exist before the operator starts on ``nodes`` kwok nodes of 8 GPUs. The operator's own
  per-round report (one JSON log line per round, ``walras.operator.round_report.RoundReport``)
  gives the round latency split into snapshot, solve, realise, writes and total. Rounds reported:
  ``cold`` (the first round: every pod created and bound), then ``steady`` and ``steady2`` (the
  next timer rounds: sticky placements; the realiser decides which split jobs move). Writes are
  split into deletes, creates, binds, status patches and history shards (ConfigMaps,
  ``walras.operator.history_store``), with their rates (``pod_writes_per_s`` = creates and binds
  over their phases' seconds) and the operator process's CPU over the round (``cpu_s``, from
  /proc). Pod start-up (kwok making pods Running) is not part of a round. A gang that fits its
  nodes at creation is committed by its last member, created with ``spec.nodeName``
  (``bound_at_create``: one per such gang) after the others, which are bound then; the 5,000 / 1,000
  cold round runs again with ``--no-bind-at-create`` (every pod created unbound, then bound) for
  a same-run ratio.
  ``kube_apiserver_cpu_s``, ``etcd_cpu_s``, ``kwok_cpu_s``, ``kube_controller_manager_cpu_s``:
  the control plane's CPU over the round (from the operator's start for the cold round: on 2
  cores the round is bound by the API server's CPU). Targets: round total <= 2 s at
  1,000 jobs / 200 nodes (steady); 5,000 / 1,000: cold <= 60 s, steady <= 10 s.
* ``status_churn_<jobs>x<nodes>``: the real round loop (``walras.operator.loop``) against the
  in-memory API of ``walras.testing.memory_api`` (no control plane), ``jobs`` synthetic jobs on
  ``nodes`` 8-GPU nodes, full rounds of 360 s on an injected clock, 10 s restarts and the default
  60 s minimum run time. Every round each job's throughput moves by at most one part in a
  thousand (as measured throughputs do), so prices, shares and expected throughputs move in
  their last digits. ``status_patches_per_job_round``: FungibleJob status patches per job per
  round after the first (the first writes every status once), beside
  ``placement_changes_per_job_round`` (jobs whose gang was stopped, started or moved: those
  must be written); ``notices_per_job_round``: advance-notice annotation patches;
  ``notice_s`` beside ``realise_s``: the forecast behind the notice (a second realise). Status
  patches per job per round also appear in every ``round_<jobs>x<nodes>`` line
  (``status_patches_per_job``).
* ``write_cpu``: the client's own CPU per write (status patch, pod create, bind), sequential
  against the local API server, for the generic ``kubernetes`` request builder
  (``param_serialize``, the older path) and the direct urllib3 path
  (``walras.kube.writes``), in the same run; ``ratio`` = generic / direct.

Without built control-plane binaries it prints one ``skipped`` line and exits 0. The 5,000 /
1,000 control-plane case is skipped with a reason when ``WALRAS_BENCH_QUICK=1``; it reports its
cold and first steady round (several minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from walras.testing import devcluster

REPO = Path(__file__).resolve().parents[1]
CRDS = sorted((REPO / "crds").glob("*.yaml"))
BASE = "/apis/walras.dev/v1alpha1"
TYPES = ("a100", "v100", "p100", "k80")
FIRST_BINDING_TRIES = 5
ROUND_LINE = re.compile(r"round (\{.*\})\s*$")


def emit(case: str, **values: Any) -> None:
    print(json.dumps({"bench": "operator", "case": case, **values}), flush=True)


def job(name: str, rates: dict[str, float], replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "throughput": rates,
            "template": {"spec": {"containers": [{"name": "c", "image": "example.invalid/x:1"}]}},
        },
    }


def parallel(fn: Any, items: list[Any], workers: int = 8) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(fn, items))


def setup_cluster(kube: Any, nodes: int) -> None:
    devcluster.reset(kube)
    devcluster.install_crds(kube, CRDS)
    names = [f"{TYPES[i % len(TYPES)]}-{i:04d}" for i in range(nodes)]
    parallel(
        lambda n: devcluster.create_gpu_node(kube, n, gpu_type=n.split("-")[0], gpus=8, wait=False),
        names,
    )
    devcluster.wait_nodes_ready(kube, names, timeout=600)
    for t in TYPES:
        pool = {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "ResourcePool",
            "metadata": {"name": t},
            "spec": {"gpuType": t, "nodeSelector": {devcluster.GPU_TYPE_LABEL: t}},
        }
        devcluster.request(kube, "POST", f"{BASE}/resourcepools", body=pool)


def create_jobs(kube: Any, namespace: str, count: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    low = np.array([2.0, 1.0, 0.6, 0.2])
    high = np.array([4.0, 2.0, 1.2, 0.5])
    manifests = [
        job(
            f"job-{i:05d}",
            {t: float(v) for t, v in zip(TYPES, rng.uniform(low, high), strict=True)},
            int(rng.integers(1, 3)),
        )
        for i in range(count)
    ]
    path = f"{BASE}/namespaces/{namespace}/fungiblejobs"
    parallel(lambda m: devcluster.request(kube, "POST", path, body=m), manifests)


def start_operator(
    cp: devcluster.ControlPlane, log: Path, round_seconds: float, extra: tuple[str, ...] = ()
) -> Any:
    command = [
        sys.executable,
        "-c",
        "from walras.cli import main; main()",
        "operator",
        "--no-leader-elect",
        "--policy-arg",
        "price-discovery.backend=numpy",
        "--round-seconds",
        str(round_seconds),
        "--kubeconfig",
        cp.admin_kubeconfig,
        "--health-port",
        "-1",
        "--metrics-port",
        "-1",
        *extra,
    ]
    handle = log.open("wb")
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def rounds(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        match = ROUND_LINE.search(line)
        if match:
            out.append(json.loads(match.group(1)))
    return out


def wait_rounds(log: Path, count: int, timeout: float, proc: Any) -> list[dict[str, Any]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = rounds(log)
        if len(found) >= count:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"operator exited:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"{count} rounds not reached in {timeout} s:\n{log.read_text()[-3000:]}")


def stop(proc: Any) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def case_first_binding(cp: devcluster.ControlPlane, kube: Any, workdir: Path) -> None:
    setup_cluster(kube, 4)
    namespace = "bench-first"
    devcluster.create_namespace(kube, namespace)
    log = workdir / "first.log"
    proc = start_operator(cp, log, round_seconds=60.0)
    try:
        wait_rounds(log, 1, 120, proc)  # started, indexes complete, first (empty) round done
        latencies = []
        for i in range(FIRST_BINDING_TRIES):
            name = f"first-{i}"
            t0 = time.perf_counter()
            devcluster.request(
                kube,
                "POST",
                f"{BASE}/namespaces/{namespace}/fungiblejobs",
                body=job(name, {"v100": 1.0, "k80": 0.3}, 1),
            )
            while True:
                pods = devcluster.request(
                    kube,
                    "GET",
                    f"/api/v1/namespaces/{namespace}/pods",
                    query={"labelSelector": f"walras.dev/job={name}"},
                )["items"]
                if pods and all(p["spec"].get("nodeName") for p in pods):
                    break
                if time.perf_counter() - t0 > 60:
                    raise TimeoutError(f"job {name} not bound in 60 s")
                time.sleep(0.01)
            latencies.append(time.perf_counter() - t0)
        emit(
            "first_binding",
            tries=FIRST_BINDING_TRIES,
            median_s=round(float(np.median(latencies)), 3),
            max_s=round(max(latencies), 3),
            target_s=2.0,
        )
    finally:
        stop(proc)


def _gang(drawn: int, fixed: int | None) -> int:
    return drawn if fixed is None else fixed


def synthetic_store(jobs: int, nodes: int, seed: int = 0, replicas: int | None = None) -> Any:
    """The operator's indexes filled with the same synthetic cluster, without an API server.

    ``replicas``: every job's gang size (``bench_realiser.py``'s oversubscribed case); ``None``
    keeps the random 1–2 (drawn either way, so the rates are the same)."""
    from walras.core import snapshot

    store = snapshot.Store()
    for t in TYPES:
        store.upsert("pool", {"metadata": {"name": t}, "spec": {"gpuType": t}})
    for i in range(nodes):
        t = TYPES[i % len(TYPES)]
        node = devcluster.gpu_node_manifest(f"{t}-{i:04d}", gpu_type=t, gpus=8)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        store.upsert("node", node)
    rng = np.random.default_rng(seed)
    low, high = np.array([2.0, 1.0, 0.6, 0.2]), np.array([4.0, 2.0, 1.2, 0.5])
    for i in range(jobs):
        manifest = job(
            f"job-{i:05d}",
            {t: float(v) for t, v in zip(TYPES, rng.uniform(low, high), strict=True)},
            _gang(int(rng.integers(1, 3)), replicas),
        )
        manifest["metadata"] |= {"namespace": "bench", "uid": f"uid-{i}"}
        store.upsert("job", manifest)
    return store


def case_pipeline(jobs: int, nodes: int) -> None:
    from walras.core import history, policies, realise, snapshot
    from walras.operator import status

    store = synthetic_store(jobs, nodes)
    policy = policies.create("price-discovery", {"backend": "numpy"})
    policy.warm_up()
    runs: dict[str, list[float]] = {"snapshot": [], "solve": [], "realise": [], "status": []}
    for _ in range(3):
        t0 = time.perf_counter()
        snap = store.freeze(now=time.time())
        view = snapshot.cluster_view(snap)
        t1 = time.perf_counter()
        sol = policy.solve(snap, view)
        t2 = time.perf_counter()
        hists = {j.key: history.History() for j in sol.jobs}
        plan = realise.realise(sol, snap, view, hists, 1)
        t3 = time.perf_counter()
        for r, j in enumerate(sol.jobs):
            status.solved_job_status(j, r, sol, plan.jobs[j.key], view, False)
        t4 = time.perf_counter()
        for key, value in zip(runs, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            runs[key].append(value)
    med = {k: float(np.median(v)) for k, v in runs.items()}
    emit(
        f"pipeline_{jobs}x{nodes}",
        **{f"{k}_s": round(v, 3) for k, v in med.items()},
        total_s=round(sum(med.values()), 3),
        pods_planned=len(plan.creates),
        iterations=sol.iterations,
        converged=sol.converged,
    )


def case_status_churn(jobs: int, nodes: int, count: int = 12) -> None:
    """The ``status_churn_<jobs>x<nodes>`` line (module docstring)."""
    import asyncio
    import logging

    from walras.core import cycle, policies
    from walras.operator import handlers, loop
    from walras.testing.memory_api import MemoryApi

    logging.getLogger("walras.operator.sow").setLevel(logging.ERROR)  # no SoW API here
    api = MemoryApi()
    clock = [1000.0]
    rounds = loop.RoundLoop(
        loop.snapshot.Store(),
        api,  # type: ignore[arg-type]  # the in-memory stand-in for walras.kube.writes.Api
        loop.LoopConfig(
            policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
            round_seconds=360.0,
            clock=lambda: clock[0],
            cycle_options=cycle.CycleOptions(restart_s=10.0, min_run_s=60.0),
        ),
    )
    watcher = handlers.Watcher(rounds.cache, rounds)
    api.watcher = watcher
    source = synthetic_store(jobs, nodes)
    for pool in source.pools.values():
        raw = {"metadata": {"name": pool.name}, "spec": {"gpuType": pool.gpu_type}}
        watcher.apply("pool", {"type": "ADDED", "object": raw})
    for i in range(nodes):
        t = TYPES[i % len(TYPES)]
        node = devcluster.gpu_node_manifest(f"{t}-{i:04d}", gpu_type=t, gpus=8)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        watcher.apply("node", {"type": "ADDED", "object": node})
    base = {}
    for spec in source.jobs.values():
        manifest = job(spec.name, dict(spec.throughput), spec.replicas)
        manifest["metadata"] |= {"namespace": spec.namespace, "uid": spec.uid, "generation": 1}
        api.add_job(manifest)
        base[spec.key] = dict(spec.throughput)
    rng = np.random.default_rng(1)
    patches: list[int] = []
    notices: list[int] = []
    moved: list[int] = []
    realise_s: list[float] = []
    notice_s: list[float] = []
    for n in range(count):
        if n:
            for key, rates in base.items():
                obj = api.jobs[key]
                obj["spec"]["throughput"] = {
                    t: v * (1 + 1e-3 * float(rng.uniform(-1, 1))) for t, v in rates.items()
                }
                watcher.apply("job", {"type": "MODIFIED", "object": obj})
        placed = {
            k: sorted(p.where for p in rounds.store.pods.values() if p.job_key == k) for k in base
        }
        report = asyncio.run(rounds.run_round())
        after = {
            k: sorted(p.where for p in rounds.store.pods.values() if p.job_key == k) for k in base
        }
        patches.append(report.job_status_patches)
        notices.append(report.notices)
        realise_s.append(report.realise)
        notice_s.append(report.notice_s)
        moved.append(sum(placed[k] != after[k] for k in base))
        clock[0] += 360.0
    steady = max(count - 1, 1) * jobs
    emit(
        f"status_churn_{jobs}x{nodes}",
        rounds=count,
        first_round_patches=patches[0],
        status_patches_per_job_round=round(sum(patches[1:]) / steady, 4),
        placement_changes_per_job_round=round(sum(moved[1:]) / steady, 4),
        notices_per_job_round=round(sum(notices[1:]) / steady, 4),
        # The forecast behind the notice realises the round a second time: its cost beside
        # the round's own realise (medians over the steady rounds).
        realise_s=round(float(np.median(realise_s[1:])), 4),
        notice_s=round(float(np.median(notice_s[1:])), 4),
        status_keys=dict(api.patched_keys.most_common(6)),
    )


def control_plane_cpu(cp: devcluster.ControlPlane) -> dict[str, float]:
    """CPU seconds so far of the control plane's own processes (found by their executable's
    name and this control plane's directory on their command line), by executable."""
    names = ("kube-apiserver", "etcd", "kwok", "kube-controller-manager")
    found: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            exe = Path(argv[0].decode(errors="replace")).name
            if exe in names and cp.directory in b" ".join(argv).decode(errors="replace"):
                found[exe] = found.get(exe, 0.0) + process_cpu(int(entry.name))
        except (OSError, IndexError):
            continue  # exited meanwhile
    return found


def case_round(
    cp: devcluster.ControlPlane,
    kube: Any,
    workdir: Path,
    jobs: int,
    nodes: int,
    count: int = 2,
    bind_at_create: bool = True,
) -> None:
    t_setup = time.perf_counter()
    setup_cluster(kube, nodes)
    namespace = f"bench-{jobs}"
    devcluster.create_namespace(kube, namespace)
    create_jobs(kube, namespace, jobs)
    setup_s = time.perf_counter() - t_setup
    log = workdir / f"round-{jobs}.log"
    round_seconds = 30.0
    flags = () if bind_at_create else ("--no-bind-at-create",)
    proc = start_operator(cp, log, round_seconds=round_seconds, extra=flags)
    try:
        cpu: list[float] = []
        server: list[dict[str, float]] = []
        server_start = control_plane_cpu(cp)  # from the operator's start: its LISTs count too
        while len(rounds(log)) < count:
            seen = len(rounds(log))
            wait_rounds(log, seen + 1, 1500, proc)
            cpu.append(process_cpu(proc.pid))  # operator CPU when each round is logged
            server.append(control_plane_cpu(cp))
        found = rounds(log)
        keys = ("snapshot", "solve", "realise", "writes", "total")
        labels = ("cold", "steady", *(f"steady{i}" for i in range(2, count)))
        for i, (label, rep) in enumerate(zip(labels, found[:count], strict=False)):
            history_writes = rep.get("history_writes", 0)
            writes = rep["creates"] + rep["binds"] + rep["deletes"] + rep["status_patches"]
            writes += history_writes

            def rate(n: int, secs: float) -> float | None:
                return round(n / secs, 1) if secs > 0 and n else None

            before = server[i - 1] if i else server_start
            server_cpu = {
                f"{k.replace('-', '_')}_cpu_s": round(v - before.get(k, 0.0), 1)
                for k, v in sorted(server[i].items())
            }

            emit(
                f"round_{jobs}x{nodes}",
                round=label,
                bind_at_create=bind_at_create,
                jobs=rep["jobs"],
                nodes=rep["nodes"],
                **{f"{k}_s": round(rep[k], 3) for k in keys},
                compute_s=round(rep["snapshot"] + rep["solve"] + rep["realise"], 3),
                creates=rep["creates"],
                binds=rep["binds"],
                bound_at_create=rep.get("bound_at_create", 0),
                deletes=rep["deletes"],
                status_patches=rep["status_patches"],
                status_patches_per_job=round(
                    rep.get("job_status_patches", rep["status_patches"]) / max(rep["jobs"], 1), 4
                ),
                history_writes=history_writes,
                cpu_s=round(cpu[i] - (cpu[i - 1] if i else 0.0), 3) if i < len(cpu) else None,
                **server_cpu,
                # Creates and binds together: a gang committed at creation is bound right
                # after its last create, inside the creates' time (walras.operator.binder).
                pod_writes_per_s=rate(
                    rep["creates"] + rep["binds"], rep["creates_s"] + rep["binds_s"]
                ),
                deletes_per_s=rate(rep["deletes"], rep["deletes_s"]),
                writes_per_s=rate(writes, rep["writes"]),
                iterations=rep["iterations"],
                errors=rep["errors"],
                setup_s=round(setup_s, 1),
                load_avg_1m=round(os.getloadavg()[0], 1),
                target_total_s=2.0 if (jobs, nodes) == (1000, 200) else None,
            )
    finally:
        stop(proc)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def case_write_cpu(cp: devcluster.ControlPlane, kube: Any, requests: int = 300) -> None:
    """Client CPU per write, generic builder vs direct path (module docstring)."""
    from walras.kube import writes
    from walras.kube.client import api_client

    setup_cluster(kube, 4)
    namespace = "bench-writes"
    devcluster.create_namespace(kube, namespace)
    create_jobs(kube, namespace, requests)
    status = {
        "phase": "Running",
        "gpuType": "v100",
        "allocation": [{"gpuType": "v100", "fraction": 0.5, "nodes": ["v100-0001"]}],
        "fairShare": 0.5,
        "conditions": [
            {"type": t, "status": "True", "reason": "R", "message": "m" * 80}
            for t in ("Admitted", "Allocated", "Bound", "TimeSliced", "Preempted")
        ],
    }
    for path in ("generic", "direct"):
        api = writes.Api(api_client(cp.admin_kubeconfig))
        if path == "generic":
            api._urllib3 = None  # the request builder every write used before
        for op in ("status_patch", "create", "bind"):
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(requests):
                method, url, body, ctype = write_request(op, path, i, namespace, status)
                result = api._request(method, url, body, content_type=ctype)
                if not result.ok:
                    raise RuntimeError(f"{op} {url}: {result}")
            cpu_s, wall_s = time.process_time() - c0, time.perf_counter() - t0
            emit(
                "write_cpu",
                path=path,
                op=op,
                requests=requests,
                cpu_ms_per_request=round(1e3 * cpu_s / requests, 3),
                time_s=round(wall_s, 3),
                cpu_s=round(cpu_s, 3),
            )
        api.close()


def write_request(
    op: str, path: str, i: int, namespace: str, status: dict[str, Any]
) -> tuple[str, str, dict[str, Any], str]:
    """Method, URL, body and content type of write ``i`` of kind ``op`` (``case_write_cpu``)."""
    pod = f"{path}-{i}"
    if op == "status_patch":
        url = f"{BASE}/namespaces/{namespace}/fungiblejobs/job-{i:05d}/status"
        body = {"status": {**status, "round": len(path)}}  # a new value per path: a real write
        return "PATCH", url, body, "application/merge-patch+json"
    if op == "create":
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "labels": {"walras.dev/job": "x"}},
            "spec": {
                "schedulerName": "walras",
                "containers": [{"name": "c", "image": "example.invalid/x:1"}],
            },
        }
        return "POST", f"/api/v1/namespaces/{namespace}/pods", body, "application/json"
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "v100-0001"},
    }
    return "POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body, "application/json"


def on_fresh_control_plane(case: Any, *args: Any, **kwargs: Any) -> None:
    """Run one case on a control plane of its own: a case that follows another on the same one
    pays for what the first left behind (the 5,000-job cold round took 94.8 s with 102 CPU-s of
    API server after the 1,000-job case on the same control plane, 62.6 s with 67 CPU-s on a
    fresh one, same code, 2026-11-24)."""
    cp = devcluster.start()
    kube = devcluster.new_client(cp.admin_kubeconfig)
    workdir = Path(tempfile.mkdtemp(prefix="walras-bench-operator-"))
    try:
        case(cp, kube, workdir, *args, **kwargs)
    finally:
        kube.close()
        devcluster.stop(cp)


def main() -> int:
    case_pipeline(1000, 200)
    case_pipeline(5000, 1000)
    case_status_churn(200, 40)
    if not devcluster.binaries_available():
        emit("skipped", reason="control-plane binaries not built (make tools)")
        return 0

    def small_cases(cp: devcluster.ControlPlane, kube: Any, workdir: Path) -> None:
        case_first_binding(cp, kube, workdir)
        case_write_cpu(cp, kube)

    on_fresh_control_plane(small_cases)
    on_fresh_control_plane(case_round, 1000, 200, count=3)
    if os.environ.get("WALRAS_BENCH_QUICK") == "1":
        emit("round_5000x1000", skipped="WALRAS_BENCH_QUICK=1")
        return 0
    on_fresh_control_plane(case_round, 5000, 1000, count=2)
    # The same rounds with every pod created unbound and bound through pods/binding.
    on_fresh_control_plane(case_round, 5000, 1000, count=1, bind_at_create=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

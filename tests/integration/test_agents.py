"""Node agents on the real control plane: distributed PS-DSF converges to the central solution.

20 kwok nodes of 3 GPU types (some labelled ``zone=east``), 6 tenants (FungibleJobs; two are
restricted by their template ``nodeSelector``), one ``walras agent --node-name`` *process* per
node plus one ``walras agent --aggregate`` process, all with the shipped defaults (τ = 1 s,
jitter 0.2, damping 1.0, aggregator every 0.1 s). The oracle is ``fairness.solve`` on the same
snapshot, built with the operator's tenant model (``walras.core.tenants.psdsf_problem``),
and its Theorem 2 certificate on the agents' x_{n,i}.

The tests share one cluster and run in order (converge → no oscillation → churn → crash); the
re-convergence times are printed (``pytest -s``), never asserted. Timeouts only bound a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from walras.allocator import fairness
from walras.core.tenants import psdsf_problem
from walras.core.totals import TOTALS_NAME, align
from walras.kube import nodeallocations
from walras.testing import devcluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CRDS = [REPO / "crds" / f for f in ("fungiblejob.yaml", "resourcepool.yaml", "nodeallocation.yaml")]
BASE = "/apis/walras.dev/v1alpha1"
WALRAS = str(Path(sys.executable).parent / "walras")
STALE_AFTER = 6.0
TOL = 1e-3
# A job's tenant is its namespace (governance), so each tenant has its own.
# (gpu type, count, GPUs per node); every other node of a type is in zone east.
NODE_TYPES = (("a100", 7, 8), ("v100", 7, 4), ("t4", 6, 4))
# tenant -> [(job, throughput, replicas, gpus per pod, cpu per pod, weight, nodeSelector)]
TENANTS: dict[str, list[tuple[str, dict[str, float], int, int, str, float, dict[str, str]]]] = {
    "vision": [("resnet", {"a100": 4.0, "v100": 2.5, "t4": 1.0}, 40, 1, "4", 1.0, {})],
    "nlp": [("bert", {"a100": 3.0, "v100": 1.5}, 40, 2, "8", 2.0, {})],
    "rl": [("a3c", {"t4": 1.0, "v100": 1.2}, 40, 1, "16", 1.0, {})],
    "east": [("local", {"a100": 2.0, "v100": 2.0, "t4": 2.0}, 40, 1, "2", 1.0, {"zone": "east"})],
    "speech": [
        ("wav", {"a100": 2.0, "t4": 1.5}, 20, 1, "4", 1.0, {}),
        ("ctc", {"a100": 2.5}, 20, 2, "4", 1.0, {}),
    ],
    "gan": [("stylegan", {"a100": 3.5, "v100": 3.0}, 40, 1, "4", 1.5, {"zone": "east"})],
}
NEW_TENANT = ("late", [("bigjob", {"a100": 1.0, "v100": 1.0, "t4": 1.0}, 40, 1, "4", 1.0, {})])


def _job(tenant: str, name: str, spec: tuple[Any, ...]) -> dict[str, Any]:
    throughput, replicas, gpus, cpu, weight, selector = spec
    container = {
        "name": "train",
        "image": "registry.example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": cpu}},
    }
    pod_spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if selector:
        pod_spec["nodeSelector"] = dict(selector)
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": f"{tenant}-{name}", "namespace": tenant},
        "spec": {
            "replicas": replicas,
            "throughput": dict(throughput),
            "template": {"spec": pod_spec},
            "utility": {"kind": "log", "weight": weight},
        },
    }


def _create_tenant(kube: Any, tenant: str, jobs: list[tuple[Any, ...]]) -> None:
    devcluster.create_namespace(kube, tenant)
    for name, *spec in jobs:
        body = _job(tenant, name, tuple(spec))
        devcluster.request(kube, "POST", f"{BASE}/namespaces/{tenant}/fungiblejobs", body=body)


def _delete_tenant(kube: Any, tenant: str, jobs: list[tuple[Any, ...]]) -> None:
    for name, *_ in jobs:
        path = f"{BASE}/namespaces/{tenant}/fungiblejobs/{tenant}-{name}"
        devcluster.request(kube, "DELETE", path)


def _items(kube: Any, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(kube, "GET", path)["items"]
    return items


def reference(kube: Any, *, without: set[str] = frozenset()) -> tuple[Any, list[str], list[str]]:
    """Central PS-DSF on the current objects (nodes in ``without`` left out)."""
    jobs = _items(kube, f"{BASE}/fungiblejobs")
    pools = _items(kube, f"{BASE}/resourcepools")
    nodes = [n for n in _items(kube, "/api/v1/nodes") if n["metadata"]["name"] not in without]
    return psdsf_problem(jobs, nodes, pools)


def published_totals(kube: Any) -> dict[str, float]:
    try:
        obj = devcluster.request(kube, "GET", f"{BASE}/nodeallocations/{TOTALS_NAME}")
    except Exception:  # not created yet
        return {}
    return {k: float(v) for k, v in ((obj.get("status") or {}).get("tasks") or {}).items()}


def relative_error(got: Mapping[str, float], want: Mapping[str, float]) -> float:
    names = set(got) | set(want)
    scale = max([abs(v) for v in want.values()] + [1e-12])
    errs = [
        abs(got.get(n, 0.0) - want.get(n, 0.0)) / max(abs(want.get(n, 0.0)), 1e-9 * scale)
        for n in names
    ]
    return max(errs, default=0.0)


@dataclass
class Cluster:
    kube: Any
    kubeconfig: str
    logs: Path
    nodes: list[str]
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    aggregator: subprocess.Popen[bytes] | None = None

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        cmd = [WALRAS, "agent", "--kubeconfig", self.kubeconfig, "--stale-after", str(STALE_AFTER)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # The child keeps its own copy of the descriptor.
        with open(self.logs / log_name, "ab") as log:
            return subprocess.Popen(cmd + args, stdout=log, stderr=subprocess.STDOUT, env=env)

    def start_agent(self, node: str) -> None:
        self.agents[node] = self._spawn(["--node-name", node], f"agent-{node}.log")

    def start_aggregator(self) -> None:
        self.aggregator = self._spawn(["--aggregate"], "aggregator.log")

    def kill_agent(self, node: str, sig: int = signal.SIGKILL) -> None:
        proc = self.agents.pop(node)
        proc.send_signal(sig)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        procs = [*self.agents.values(), *([self.aggregator] if self.aggregator else [])]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        self.agents.clear()
        self.aggregator = None


def wait_converged(
    cluster: Cluster,
    want: Mapping[str, float],
    *,
    what: str,
    timeout: float = 150.0,
    tol: float = TOL,
    samples: int = 3,
) -> float:
    """Seconds until the published totals stay within ``tol`` of ``want`` for ``samples``
    consecutive aggregator publishes (polled at 0.2 s); fails after ``timeout`` (a hang bound)."""
    start = time.monotonic()
    streak = 0
    first_ok = None
    last_err = float("inf")
    while time.monotonic() - start < timeout:
        for proc in [cluster.aggregator, *cluster.agents.values()]:
            assert proc is not None and proc.poll() is None, f"a walras agent process died ({what})"
        last_err = relative_error(published_totals(cluster.kube), want)
        if last_err <= tol:
            streak += 1
            first_ok = first_ok if first_ok is not None else time.monotonic()
            if streak >= samples:
                elapsed = first_ok - start
                print(f"[agents] {what}: converged to {tol:g} in {elapsed:.1f} s", flush=True)
                return elapsed
        else:
            streak, first_ok = 0, None
        time.sleep(0.2)
    pytest.fail(f"{what}: totals not within {tol:g} after {timeout:.0f} s (error {last_err:.2e})")


def central_totals(problem: Any, tenants: list[str]) -> dict[str, float]:
    result = fairness.solve(problem, mode="tdm")
    assert result.converged and result.certificate_violation <= 1e-6
    return {t: float(v) for t, v in zip(tenants, result.totals, strict=True)}


def check_certificate(
    cluster: Cluster, problem: Any, tenants: list[str], nodes: list[str]
) -> float:
    tasks, t_names, n_names = nodeallocations.distributed_tasks(
        cluster.kube, stale_after=STALE_AFTER
    )
    aligned = align(tasks, t_names, n_names, tenants, nodes)
    return fairness.certificate(problem, aligned, "tdm")


@pytest.fixture(scope="module")
def cluster(
    control_plane: devcluster.ControlPlane, kube: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    devcluster.reset(kube)
    devcluster.install_crds(kube, CRDS)
    nodes: list[str] = []
    for gpu_type, count, gpus in NODE_TYPES:
        devcluster.request(
            kube,
            "POST",
            f"{BASE}/resourcepools",
            body={
                "apiVersion": "walras.dev/v1alpha1",
                "kind": "ResourcePool",
                "metadata": {"name": gpu_type},
                "spec": {"gpuType": gpu_type, "nodeSelector": {"walras.dev/gpu-type": gpu_type}},
            },
        )
        for k in range(count):
            name = f"{gpu_type}-{k}"
            labels = {"zone": "east" if k % 2 == 0 else "west"}
            devcluster.create_gpu_node(
                kube, name, gpu_type=gpu_type, gpus=gpus, labels=labels, wait=False
            )
            nodes.append(name)
    devcluster.wait_nodes_ready(kube, nodes)
    for tenant, jobs in TENANTS.items():
        _create_tenant(kube, tenant, jobs)
    logs = tmp_path_factory.mktemp("agent-logs")
    c = Cluster(kube=kube, kubeconfig=str(control_plane.admin_kubeconfig), logs=logs, nodes=nodes)
    c.start_aggregator()
    for node in nodes:
        c.start_agent(node)
    try:
        yield c
    finally:
        c.stop_all()
        devcluster.reset(kube)


def test_totals_converge_to_central_psdsf_and_certificate_holds(cluster: Cluster) -> None:
    problem, tenants, nodes = reference(cluster.kube)
    assert len(nodes) == 20 and len(tenants) == 6
    want = central_totals(problem, tenants)
    started = time.monotonic()
    while time.monotonic() - started < 180.0:
        obj = devcluster.request(cluster.kube, "GET", f"{BASE}/nodeallocations")
        written = [
            a for a in obj["items"] if a["metadata"]["name"] != TOTALS_NAME and a.get("status")
        ]
        if len(written) == 20:
            break
        time.sleep(0.2)
    print(f"[agents] all 20 agent processes wrote after {time.monotonic() - started:.1f} s")
    wait_converged(cluster, want, what="20 agent processes, from all written")
    # Tighter agreement a little later; then Theorem 2 on the agents' own x_{n,i}.
    wait_converged(cluster, want, what="20 agent processes to 1e-5", tol=1e-5)
    violation = check_certificate(cluster, problem, tenants, nodes)
    print(f"[agents] Theorem 2 certificate of the agents' allocation: {violation:.2e}")
    assert violation <= 1e-3


def test_shipped_defaults_do_not_oscillate(cluster: Cluster) -> None:
    """Once converged, 10 s of publishes (about 100) stay within TOL and the agents' residuals
    are small: no period-2 cycle of simultaneous updates."""
    problem, tenants, _ = reference(cluster.kube)
    want = central_totals(problem, tenants)
    wait_converged(cluster, want, what="before the oscillation check")
    errors = []
    end = time.monotonic() + 10.0
    while time.monotonic() < end:
        errors.append(relative_error(published_totals(cluster.kube), want))
        time.sleep(0.1)
    residuals = [
        float((a.get("status") or {}).get("residual") or 0.0)
        for a in _items(cluster.kube, f"{BASE}/nodeallocations")
        if a["metadata"]["name"] != TOTALS_NAME
    ]
    print(f"[agents] max error over 10 s: {max(errors):.2e}; max residual {max(residuals):.2e}")
    assert max(errors) <= TOL
    assert max(residuals) <= TOL


def test_churn_reconverges(cluster: Cluster) -> None:
    kube = cluster.kube
    steps: list[tuple[str, Callable[[], None], set[str]]] = [
        ("remove tenant rl's jobs", lambda: _delete_tenant(kube, "rl", TENANTS["rl"]), set()),
        ("add tenant late", lambda: _create_tenant(kube, *NEW_TENANT), set()),
        ("delete node t4-5", lambda: _delete_node(cluster, "t4-5"), set()),
    ]
    for what, change, without in steps:
        change()
        problem, tenants, nodes = reference(kube, without=without)
        want = central_totals(problem, tenants)
        wait_converged(cluster, want, what=f"churn: {what}")
        wait_converged(cluster, want, what=f"churn: {what} to 1e-5", tol=1e-5)
        assert check_certificate(cluster, problem, tenants, nodes) <= 1e-3


def _delete_node(cluster: Cluster, node: str) -> None:
    cluster.kill_agent(node, signal.SIGTERM)
    devcluster.delete_nodes(cluster.kube, [node])
    cluster.nodes.remove(node)


def test_agent_crash_goes_stale_and_rejoins(cluster: Cluster) -> None:
    kube = cluster.kube
    victim = "a100-2"
    cluster.kill_agent(victim)
    # Its allocation is ignored (and deleted) once older than STALE_AFTER; the rest re-converge
    # to the central solution without that node's capacity.
    problem, tenants, nodes = reference(kube, without={victim})
    want = central_totals(problem, tenants)
    wait_converged(cluster, want, what=f"crash: {victim} killed (stale after {STALE_AFTER:g} s)")
    names = {a["metadata"]["name"] for a in _items(kube, f"{BASE}/nodeallocations")}
    assert victim not in names
    wait_converged(cluster, want, what=f"crash: {victim} killed, to 1e-5", tol=1e-5)
    assert check_certificate(cluster, problem, tenants, nodes) <= 1e-3
    cluster.start_agent(victim)
    problem, tenants, nodes = reference(kube)
    want = central_totals(problem, tenants)
    wait_converged(cluster, want, what=f"crash: {victim} restarted and rejoined")
    names = {a["metadata"]["name"] for a in _items(kube, f"{BASE}/nodeallocations")}
    assert victim in names

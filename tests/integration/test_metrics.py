"""Scrape ``/metrics`` of a running ``walras operator`` and check it against what the API shows.

The operator runs price discovery in 2 s rounds over two kwok GPU types with more demand than
GPUs, so prices are positive. A consistent reading is two scrapes with the same
``walras_rounds_total`` and the same values around one read of the statuses; then:

- ``walras_price{gpu_type}`` = ``ResourcePool.status.price`` within 2 %: the status keeps 3
  significant digits and is rewritten only when the price moves by more than one unit of the
  last (``walras.operator.visible``), so it is off by at most half a unit of rounding plus one
  unit of lag, 1.5 units, and a unit is at most 1 % of a 3-digit value,
- ``walras_allocated_share{pool}`` = ``ResourcePool.status.utilisation``,
- ``walras_pending_jobs{reason}`` = the number of Pending FungibleJobs whose ``Allocated`` (or,
  for rejected specs, ``Admitted``) condition carries that reason,
- ``walras_bindings_total`` ≥ the pods bound right now, the ``total`` round histogram counts
  every round, and the duality gap is a non-negative number.
"""

from __future__ import annotations

import collections
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from walras.testing import devcluster

REPO = Path(__file__).resolve().parents[2]
BASE = "/apis/walras.dev/v1alpha1"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        body = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: v for (n, labels), v in samples.items() if n == name}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def cluster(kube: Any, namespace: str) -> Iterator[dict[str, str]]:
    devcluster.install_crds(kube, sorted((REPO / "crds").glob("*.yaml")))
    types = {"fast": f"{namespace}-fast", "slow": f"{namespace}-slow"}
    nodes = []
    for gpu_type in types.values():
        nodes.append(f"{gpu_type}-0")
        devcluster.create_gpu_node(kube, nodes[-1], gpu_type=gpu_type, gpus=4)
        pool = {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "ResourcePool",
            "metadata": {"name": gpu_type},
            "spec": {"gpuType": gpu_type, "nodeSelector": {"walras.dev/gpu-type": gpu_type}},
        }
        devcluster.request(kube, "POST", f"{BASE}/resourcepools", body=pool)
    # 5 gangs of 2 GPUs want 10 GPUs of 8; one job has no usable type (a rejected spec).
    throughputs = [(4.0, 1.0), (3.0, 2.0), (1.0, 1.0), (2.0, 0.5), (5.0, 4.0), (0.0, 0.0)]
    for i, (fast, slow) in enumerate(throughputs):
        job = {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "FungibleJob",
            "metadata": {"name": f"job-{i}", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "throughput": {types["fast"]: fast, types["slow"]: slow},
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
            },
        }
        devcluster.request(kube, "POST", f"{BASE}/namespaces/{namespace}/fungiblejobs", body=job)
    try:
        yield types
    finally:
        for gpu_type in types.values():
            devcluster.request(kube, "DELETE", f"{BASE}/resourcepools/{gpu_type}")
        devcluster.delete_nodes(kube, nodes)


@pytest.fixture
def operator(
    control_plane: devcluster.ControlPlane, cluster: dict[str, str], tmp_path: Path
) -> Iterator[int]:
    port = free_port()
    log = tmp_path / "operator.log"
    command = [sys.executable, "-c", "from walras.cli import main; main()", "operator"]
    command += ["--no-leader-elect", "--round-seconds", "2", "--kubeconfig"]
    command += [control_plane.admin_kubeconfig, "--metrics-port", str(port), "--health-port", "-1"]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    try:
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.returncode not in (0, -15):
            print(log.read_text()[-4000:])  # shown by pytest on failure


def read(kube: Any, namespace: str) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    pools = {
        p["metadata"]["name"]: p
        for p in devcluster.request(kube, "GET", f"{BASE}/resourcepools")["items"]
    }
    # The operator is cluster-wide: its pending-jobs gauge counts every namespace's jobs (another
    # test's namespace may still be going away), and so must the comparison. Pods: only ours,
    # which only this operator can have bound.
    jobs = devcluster.request(kube, "GET", f"{BASE}/fungiblejobs")["items"]
    pods = devcluster.request(kube, "GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    bound = sum(1 for p in pods if p["spec"].get("nodeName"))
    return pools, jobs, bound


def pending_counts(jobs: list[dict[str, Any]]) -> dict[str, float]:
    counts: collections.Counter[str] = collections.Counter()
    for job in jobs:
        status = job.get("status") or {}
        if status.get("phase") != "Pending":
            continue
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        for kind in ("Allocated", "Admitted"):
            if kind in conditions and conditions[kind]["status"] != "True":
                counts[conditions[kind]["reason"]] += 1
                break
    return {k: float(v) for k, v in counts.items()}


def consistent_reading(
    port: int, kube: Any, namespace: str, pools: dict[str, str], timeout: float = 60.0
) -> tuple[Samples, dict[str, Any], list[dict[str, Any]], int]:
    """Scrape, read the API, scrape again; accept when nothing moved in between."""
    end = time.monotonic() + timeout
    mine = set(pools.values())
    while time.monotonic() < end:
        try:
            first = scrape(port)
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
            continue
        if value_or(first, "walras_rounds_total") < 3:
            time.sleep(0.5)
            continue
        api_pools, jobs, bound = read(kube, namespace)
        second = scrape(port)
        watched = (
            "walras_rounds_total",
            "walras_price",
            "walras_allocated_share",
            "walras_pending_jobs",
        )
        same = {k: v for k, v in first.items() if k[0] in watched} == {
            k: v for k, v in second.items() if k[0] in watched
        }
        statuses = all((api_pools[name].get("status") or {}).get("round") for name in mine)
        if same and statuses:
            return second, api_pools, jobs, bound
        time.sleep(0.3)
    raise AssertionError("no consistent reading of metrics and statuses")


def value_or(samples: Samples, name: str) -> float:
    return samples.get((name, ()), 0.0)


@pytest.mark.slow
def test_metrics_match_the_statuses(
    kube: Any, namespace: str, cluster: dict[str, str], operator: int
) -> None:
    samples, pools, jobs, bound = consistent_reading(operator, kube, namespace, cluster)
    prices = by_label(samples, "walras_price", "gpu_type")
    shares = by_label(samples, "walras_allocated_share", "pool")
    for gpu_type in cluster.values():
        status = pools[gpu_type]["status"]
        assert prices[gpu_type] == pytest.approx(status["price"], rel=2e-2, abs=1e-9)
        assert shares[gpu_type] == pytest.approx(status["utilisation"], abs=1e-9)
    # Demand exceeds supply: at least one type is priced.
    assert max(prices[t] for t in cluster.values()) > 0
    assert by_label(samples, "walras_pending_jobs", "reason") == pending_counts(jobs)
    assert pending_counts(jobs)  # the rejected spec at least
    # Every pod bound now was bound through pods/binding, and the first round bound some.
    assert value_or(samples, "walras_bindings_total") >= max(bound, 1)
    rounds = value_or(samples, "walras_rounds_total")
    assert value(samples, "walras_round_seconds_count", phase="total") == rounds
    assert value_or(samples, "walras_duality_gap") >= -1e-9
    assert value(samples, "walras_solver_iterations", policy="price-discovery") >= 1

"""Leader election against the real API server.

First with ``LeaderElector`` objects in one process (the Lease protocol itself), then with two
``walras operator --leader-elect`` processes: exactly one of them writes, and when the leader is
SIGKILLed the standby takes over within the lease duration.

Takeover is judged with the Lease's own timestamps (written by the electors on this machine): the
new ``acquireTime`` minus the dead leader's last ``renewTime`` must lie between the old leader's
renew deadline (2/3 of the lease: no overlap) and the lease duration plus one standby poll period
(plus a second of API latency). That is the protocol's guarantee, not a performance figure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from walras.operator.leader import (
    KubernetesLeaseStore,
    LeaderElector,
    LeaseConflictError,
    LeaseRecord,
)
from walras.testing import devcluster

REPO = Path(__file__).resolve().parents[2]
LEASE, RENEW, RETRY = 3.0, 0.5, 0.2
API_SLACK = 1.0  # request latency allowance in the takeover bound
NAME = "walras-controller"


def make(kube: Any, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(
        kube,
        namespace=namespace,
        name=NAME,
        identity=identity,
        lease_seconds=LEASE,
        renew_seconds=RENEW,
        retry_seconds=RETRY,
    )


def read_lease(kube: Any, namespace: str) -> Any:
    return client.CoordinationV1Api(kube).read_namespaced_lease(NAME, namespace)


async def until(
    predicate: Callable[[], bool], timeout: float, what: str, electors: list[LeaderElector]
) -> None:
    """Wait for ``predicate``, checking every 50 ms that at most one elector claims leadership."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert sum(e.is_leader for e in electors) <= 1
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def sample_single_leader(electors: list[LeaderElector], seconds: float) -> set[str]:
    """Sample is_leader every 50 ms; fail if two ever claim it. Returns who led."""
    seen: set[str] = set()
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        leaders = [e.identity for e in electors if e.is_leader]
        assert len(leaders) <= 1, leaders
        seen.update(leaders)
        await asyncio.sleep(0.05)
    return seen


def run_async(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]  # a coroutine is what asyncio.run wants


@pytest.mark.slow
def test_one_leader_and_the_standby_takes_over_after_a_crash(kube: Any, namespace: str) -> None:
    async def scenario() -> None:
        a, b = make(kube, namespace, "replica-a"), make(kube, namespace, "replica-b")
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        task_a = asyncio.create_task(a.run(stop_a))
        await asyncio.wait_for(a.wait_leader(), 10)
        task_b = asyncio.create_task(b.run(stop_b))
        # Several renew periods with both campaigning: a alone leads, and the Lease says so.
        assert await sample_single_leader([a, b], 4 * RENEW) == {"replica-a"}
        lease = read_lease(kube, namespace)
        assert lease.spec.holder_identity == "replica-a"
        assert lease.spec.lease_duration_seconds == LEASE
        assert lease.spec.lease_transitions == 0
        # Crash a: no release (as after SIGKILL).
        a.release = lambda: None  # type: ignore[method-assign]  # simulate a crash, not a stop
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        last_renew = read_lease(kube, namespace).spec.renew_time
        # During the takeover the two never overlap (a's belief ends at 2/3 of the lease).
        await until(lambda: b.is_leader, LEASE + 5, "b to lead", [a, b])
        assert not a.is_leader
        lease = read_lease(kube, namespace)
        assert lease.spec.holder_identity == "replica-b"
        assert lease.spec.lease_transitions == 1
        waited = (lease.spec.acquire_time - last_renew).total_seconds()
        # Not before the dead leader's own deadline (2/3 of the lease) - that is the safety
        # property - and within the lease plus one standby poll (and API latency on 2 busy cores).
        assert 2 / 3 * LEASE <= waited <= LEASE + RETRY + API_SLACK, waited
        stop_b.set()
        await task_b

    run_async(scenario)


@pytest.mark.slow
def test_clean_stop_releases_the_lease_for_an_immediate_takeover(kube: Any, namespace: str) -> None:
    async def scenario() -> None:
        a, b = make(kube, namespace, "replica-a"), make(kube, namespace, "replica-b")
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        task_a = asyncio.create_task(a.run(stop_a))
        await asyncio.wait_for(a.wait_leader(), 10)
        task_b = asyncio.create_task(b.run(stop_b))
        await asyncio.sleep(2 * RETRY)
        stop_a.set()
        await task_a
        released = read_lease(kube, namespace)
        stopped_at = dt.datetime.now(dt.UTC)
        await asyncio.wait_for(b.wait_leader(), LEASE)
        lease = read_lease(kube, namespace)
        assert lease.spec.holder_identity == "replica-b"
        assert lease.spec.lease_transitions == 1
        # Released, not expired: b took over at its next poll, well inside the 3 s lease.
        assert (lease.spec.acquire_time - stopped_at).total_seconds() < LEASE - RENEW
        assert released.spec.holder_identity in (None, "", "replica-b")
        stop_b.set()
        await task_b
        assert read_lease(kube, namespace).spec.holder_identity in (None, "")

    run_async(scenario)


def test_stale_resource_version_is_a_conflict(kube: Any, namespace: str) -> None:
    store = KubernetesLeaseStore(kube, namespace, NAME, timeout=5.0)
    now = dt.datetime.now(dt.UTC).replace(microsecond=123456)
    created = store.create(LeaseRecord("x", 10.0, now, now, 0))
    assert created.resource_version
    with pytest.raises(LeaseConflictError):
        store.create(LeaseRecord("y", 10.0, now, now, 0))
    later = now + dt.timedelta(seconds=1)
    renewed = store.update(LeaseRecord("x", 10.0, now, later, 0, created.resource_version))
    # The renewal bumped resourceVersion, so a writer that read `created` has lost the race.
    # (An update that changes nothing would not bump it: the API server skips no-op writes.)
    assert renewed.resource_version != created.resource_version
    with pytest.raises(LeaseConflictError):
        store.update(LeaseRecord("y", 10.0, now, now, 1, created.resource_version))
    got = store.get()
    assert got is not None
    assert (got.holder, got.transitions, got.resource_version) == (
        "x",
        0,
        renewed.resource_version,
    )
    # MicroTime round-trips with its microseconds.
    assert got.renew_time == later


# ------------------------------------------------------------------ two operator processes

OPERATOR_LEASE = 15.0  # LeaderElector's default, which `walras operator` uses
OPERATOR_RETRY = 2.0


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def rounds_total(port: int) -> float:
    status, body = http_get(port, "/metrics")
    assert status == 200, body
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "walras_rounds_total":
                return float(sample.value)
    raise AssertionError("walras_rounds_total missing")


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


@dataclasses.dataclass
class Operator:
    identity: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_operator(
    cp: devcluster.ControlPlane, namespace: str, identity: str, log_dir: Path
) -> Operator:
    port = free_port()
    log = log_dir / f"{identity}.log"
    command = [
        sys.executable,
        "-c",
        "from walras.cli import main; main()",
        "operator",
        "--leader-elect",
        "--lease-namespace",
        namespace,
        "--identity",
        identity,
        "--round-seconds",
        "1",
        "--kubeconfig",
        cp.admin_kubeconfig,
        "--health-port",
        str(port),
        "--metrics-port",
        str(port),
    ]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    wait_for(lambda: http_get(port, "/healthz")[0] == 200, 60, f"{identity} to serve /healthz")
    return Operator(identity, process, port, log)


@pytest.fixture
def workload(kube: Any, namespace: str) -> Iterator[str]:
    """One kwok GPU node, its pool and a FungibleJob, so that a leader has something to write."""
    devcluster.install_crds(kube, sorted((REPO / "crds").glob("*.yaml")))
    gpu_type = f"{namespace}-gpu"
    devcluster.create_gpu_node(kube, f"{namespace}-node", gpu_type=gpu_type, gpus=4)
    base = "/apis/walras.dev/v1alpha1"
    pool = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "ResourcePool",
        "metadata": {"name": gpu_type},
        "spec": {"gpuType": gpu_type, "nodeSelector": {"walras.dev/gpu-type": gpu_type}},
    }
    devcluster.request(kube, "POST", f"{base}/resourcepools", body=pool)
    job = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "throughput": {gpu_type: 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }
    devcluster.request(kube, "POST", f"{base}/namespaces/{namespace}/fungiblejobs", body=job)
    try:
        yield gpu_type
    finally:
        devcluster.request(kube, "DELETE", f"{base}/resourcepools/{gpu_type}")
        devcluster.delete_nodes(kube, [f"{namespace}-node"])


@pytest.mark.slow
def test_two_operators_one_writes_and_the_standby_takes_over_after_sigkill(
    kube: Any,
    control_plane: devcluster.ControlPlane,
    namespace: str,
    workload: str,
    tmp_path: Path,
) -> None:
    started: list[Operator] = []
    try:
        a = start_operator(control_plane, namespace, "operator-a", tmp_path)
        started.append(a)
        wait_for(lambda: http_get(a.port, "/readyz")[0] == 200, 60, "operator-a to lead")
        b = start_operator(control_plane, namespace, "operator-b", tmp_path)
        started.append(b)
        wait_for(lambda: rounds_total(a.port) >= 2, 30, "operator-a to run rounds")
        time.sleep(3)  # several rounds with both replicas up
        # Exactly one writes: a holds the Lease, runs rounds and is ready; b does none of these.
        assert read_lease(kube, namespace).spec.holder_identity == "operator-a"
        assert rounds_total(b.port) == 0
        assert http_get(b.port, "/readyz")[0] == 503
        assert http_get(a.port, "/readyz")[0] == 200
        job_round = read_job_round(kube, namespace)
        assert job_round >= 1
        assert b.process.poll() is None

        a.process.kill()  # SIGKILL: no release, the Lease has to expire
        a.process.wait(timeout=10)
        last_renew = read_lease(kube, namespace).spec.renew_time
        wait_for(
            lambda: read_lease(kube, namespace).spec.holder_identity == "operator-b",
            OPERATOR_LEASE + OPERATOR_RETRY + 10,
            "operator-b to take the Lease",
        )
        lease = read_lease(kube, namespace)
        waited = (lease.spec.acquire_time - last_renew).total_seconds()
        assert 2 / 3 * OPERATOR_LEASE <= waited <= OPERATOR_LEASE + OPERATOR_RETRY + API_SLACK, (
            waited
        )
        assert lease.spec.lease_transitions == 1
        # And b now writes: it runs rounds and the job's status moves on.
        wait_for(lambda: rounds_total(b.port) >= 1, 30, "operator-b to run rounds")
        wait_for(lambda: read_job_round(kube, namespace) > job_round, 30, "a newer round")
        assert http_get(b.port, "/readyz")[0] == 200
    finally:
        for op in started:
            if op.process.poll() is None:
                op.process.terminate()
                try:
                    op.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    op.process.kill()
                    op.process.wait(timeout=10)
    # A clean stop (SIGTERM) releases the Lease.
    assert read_lease(kube, namespace).spec.holder_identity in (None, "")


def read_job_round(kube: Any, namespace: str) -> int:
    path = f"/apis/walras.dev/v1alpha1/namespaces/{namespace}/fungiblejobs/train"
    job = devcluster.request(kube, "GET", path)
    return int((job.get("status") or {}).get("round") or 0)

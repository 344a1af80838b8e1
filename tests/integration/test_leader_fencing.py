"""Fenced writes: a leader whose Lease was taken over writes nothing once its lease has expired.

In one process, against the real API server: leader ``a`` runs the round loop (its watch replaced by
a LIST every 0.2 s) and writes through ``walras.kube.writes.Api`` fenced by ``a``'s
``holds_lease``. Then ``a``'s renewals are blocked (its Lease updates fail, as in a partition from
the API server) and elector ``b`` takes the Lease over. From the moment ``a``'s own deadline passes
it sends no request at all: not for a new job (whose pods and status never appear), not for a
deleted one, and not even when the write API is called directly.

Also the first run of ``walras operator`` on a cluster without the Lease namespace: one log line
that names what is missing and how to fix it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from operator_helpers import (
    BASE,
    create_job,
    create_nodes,
    create_pool,
    delete_job,
    get_job,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.core import policies, snapshot
from walras.kube import writes as kubeapi
from walras.operator import handlers, loop
from walras.operator.leader import KubernetesLeaseStore, LeaderElector, LeaseApiError, LeaseRecord
from walras.testing import devcluster

pytestmark = pytest.mark.slow

LEASE_SECONDS = 3.0


class BlockableStore(KubernetesLeaseStore):
    """The real Lease store whose updates (renewals) can be made to fail."""

    blocked = False

    def update(self, record: LeaseRecord) -> LeaseRecord:
        if self.blocked:
            raise LeaseApiError("renewal blocked by the test", 503)
        return super().update(record)


async def mirror(kube: Any, watcher: handlers.Watcher, stop: asyncio.Event) -> None:
    """The watch handlers' job, by polling: every object as MODIFIED, vanished ones DELETED."""
    paths = {
        "job": f"{BASE}/fungiblejobs",
        "pool": f"{BASE}/resourcepools",
        "node": "/api/v1/nodes",
        "pod": "/api/v1/pods",
    }
    seen: dict[str, set[tuple[str, str]]] = {k: set() for k in paths}
    while not stop.is_set():
        for kind, path in paths.items():
            items = (await asyncio.to_thread(devcluster.request, kube, "GET", path))["items"]
            now = set()
            for obj in items:
                meta = obj["metadata"]
                now.add((meta.get("namespace") or "", meta["name"]))
                watcher.apply(kind, {"type": "MODIFIED", "object": obj})
            for ns, name in seen[kind] - now:
                gone = {"metadata": {"namespace": ns, "name": name}}
                watcher.apply(kind, {"type": "DELETED", "object": gone})
            seen[kind] = now
        await asyncio.sleep(0.2)


def test_a_deposed_leader_writes_nothing_after_its_lease_expires(
    kube: Any, control_plane: devcluster.ControlPlane
) -> None:
    install(kube)
    ns = devcluster.unique_name("t-fence")
    devcluster.create_namespace(kube, ns)
    lease_ns = devcluster.unique_name("t-lease")
    devcluster.create_namespace(kube, lease_ns)
    create_nodes(kube, "fence", "g", 1, 8)
    create_pool(kube, pool_manifest("g", "g"))
    create_job(kube, ns, job_manifest("first", {"g": 1.0}, replicas=2))
    asyncio.run(_scenario(kube, control_plane, ns, lease_ns))
    devcluster.delete_namespace(kube, ns)
    devcluster.delete_namespace(kube, lease_ns)


async def _scenario(kube: Any, cp: devcluster.ControlPlane, ns: str, lease_ns: str) -> None:
    client_a = devcluster.new_client(cp.admin_kubeconfig)
    client_b = devcluster.new_client(cp.admin_kubeconfig)
    store_a = BlockableStore(client_a, lease_ns, "walras", timeout=2.0)

    def elector(client: Any, identity: str, store: Any = None) -> LeaderElector:
        return LeaderElector(
            client,
            namespace=lease_ns,
            name="walras",
            identity=identity,
            lease_seconds=LEASE_SECONDS,
            renew_seconds=0.5,
            store=store,
        )

    a = elector(client_a, "a", store_a)
    b = elector(client_b, "b")
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(a.run(stop_a))]
    await asyncio.wait_for(a.wait_leader(), 30)
    api = kubeapi.Api(client_a, fence=a.holds_lease)
    rounds = loop.RoundLoop(
        snapshot.Store(),
        api,
        loop.LoopConfig(
            policy=policies.PolicyConfig(args={"price-discovery": {"backend": "numpy"}}),
            round_seconds=0.5,
            debounce=0.05,
        ),
        is_leader=lambda: a.is_leader,
    )
    watcher = handlers.Watcher(rounds.cache, rounds)
    tasks.append(asyncio.create_task(mirror(kube, watcher, stop_a)))
    tasks.append(asyncio.create_task(rounds.run(stop_a)))
    try:

        def first_bound() -> bool:
            pods = list_pods(kube, ns, "first")
            return len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)

        await asyncio.to_thread(wait_for, first_bound, 60, "a to create and bind first's pods")
        assert api.writes > 0

        # Partition a from its Lease; b campaigns and takes over once the lease has expired.
        store_a.blocked = True
        tasks.append(asyncio.create_task(b.run(stop_b)))
        await asyncio.wait_for(b.wait_leader(), 30)
        deadline = a.valid_until
        assert time.monotonic() >= deadline  # b can only lead after a's own deadline
        assert not a.holds_lease()
        sent_at_takeover = api.writes

        # Work that a would write for if it still acted: a new job, and a deleted one.
        await asyncio.to_thread(create_job, kube, ns, job_manifest("second", {"g": 1.0}))
        await asyncio.to_thread(delete_job, kube, ns, "first")
        await asyncio.sleep(3 * LEASE_SECONDS)
        # And writes asked for directly are stopped by the fence before they are sent.
        direct = await api.delete_pod(ns, "any-pod")
        assert direct.outcome == kubeapi.Outcome.FENCED

        assert api.writes == sent_at_takeover, "a sent requests after losing the Lease"
        assert all(t <= deadline for t in api.sent_at), "a sent a request after its deadline"
        assert not list_pods(kube, ns, "second")
        assert not (get_job(kube, ns, "second").get("status") or {})
    finally:
        stop_a.set()
        stop_b.set()
        for task in tasks:
            try:
                await asyncio.wait_for(task, timeout=10)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        api.close()
        client_a.close()
        client_b.close()


def test_first_run_without_the_lease_namespace_says_what_to_do_once(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    """``walras operator`` with leader election on a cluster without the Lease namespace: one
    line naming the namespace and both fixes, however long it waits; no HTTP header dumps."""
    install(kube)
    missing = devcluster.unique_name("no-such-ns")
    op = start_operator(
        control_plane,
        tmp_path,
        extra=["--leader-elect", "--lease-namespace", missing, "--renew-seconds", "0.5"],
    )
    try:
        # The elector retries every 0.5 s; wait for several attempts.
        time.sleep(4)
        log = op.log_text()
    finally:
        op.terminate()
    lines = [line for line in log.splitlines() if missing in line]
    assert len(lines) == 1, log
    assert f"kubectl create namespace {missing}" in lines[0]
    assert "--no-leader-elect" in lines[0]
    assert "HTTP response headers" not in log and "Traceback" not in log

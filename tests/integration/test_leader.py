"""Leader election against the real API server.

First with ``LeaderElector`` objects in one process (the Lease protocol itself), then with two
``walras operator --leader-elect`` processes: exactly one of them writes, and when the leader is
SIGKILLed the standby takes over within the lease duration.

Takeover is judged with the Lease's own timestamps (written by the electors on this machine): the
new ``acquireTime`` minus the dead leader's last ``renewTime`` must not exceed the lease duration
plus one standby poll period. That is the protocol's guarantee, not a performance figure.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes import client

from walras.operator.leader import (
    KubernetesLeaseStore,
    LeaderElector,
    LeaseConflictError,
    LeaseRecord,
)

LEASE, RENEW, RETRY = 3.0, 0.5, 0.2
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
        assert LEASE - RENEW <= waited <= LEASE + RETRY + 0.5, waited
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
    renewed = store.update(LeaseRecord("x", 10.0, now, now, 0, created.resource_version))
    # The write above bumped resourceVersion, so a writer that read `created` has lost the race.
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
    assert got.renew_time == now

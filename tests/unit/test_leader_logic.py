"""The Lease election state machine against an in-memory Lease with real resourceVersion semantics.

The invariant that matters – never two leaders at once – is checked over random interleavings of
ticks, clock advances, crashes and releases (hypothesis). The real API server is exercised by
tests/integration/test_leader.py.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.operator.leader import (
    LeaderElector,
    LeaseConflictError,
    LeaseRecord,
    default_identity,
)


class MemoryLease:
    """A single Lease object: create fails if it exists, update fails on a stale resourceVersion."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.writes: list[str | None] = []  # holder after every successful write

    def get(self) -> LeaseRecord | None:
        return self.record

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = dataclasses.replace(record, resource_version=str(self.version))
        self.writes.append(record.holder)
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is not None:
            raise LeaseConflictError("already exists")
        return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        assert self.record is not None, "update of a missing lease is a bug in the elector"
        if record.resource_version != self.record.resource_version:
            raise LeaseConflictError("stale resourceVersion")
        return self._store(record)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLease, clock: Clock, identity: str, **kw: float) -> LeaderElector:
    return LeaderElector(
        None,
        namespace="walras-system",
        name="walras-controller",
        identity=identity,
        lease_seconds=kw.get("lease_seconds", 15.0),
        renew_seconds=kw.get("renew_seconds", 5.0),
        retry_seconds=kw.get("retry_seconds", 2.0),
        store=store,
        clock=clock,
    )


def test_first_elector_creates_the_lease_and_the_second_follows() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.tick() == 5.0  # leader: next renewal after renew_seconds
    follow = b.tick()
    assert (a.is_leader, b.is_leader) == (True, False)
    assert 0 < follow <= 2.0
    assert store.record is not None
    assert (store.record.holder, store.record.transitions) == ("a", 0)
    assert b.holder == "a"


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    store, clock = MemoryLease(), Clock()
    a = elector(store, clock, "a")
    a.tick()
    first = store.record
    clock.now += 5
    a.tick()
    assert store.record is not None and first is not None
    assert store.record.acquire_time == first.acquire_time
    assert store.record.transitions == 0
    assert store.record.renew_time is not None and first.renew_time is not None
    assert store.record.renew_time >= first.renew_time
    assert store.writes == ["a", "a"]


def test_standby_takes_over_exactly_one_lease_duration_after_the_last_renewal_it_saw() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.tick()
    b.tick()  # b observes a's record at t0
    t0 = clock.now
    # a is killed: it never ticks again. b polls every 0.5 s.
    while clock.now < t0 + 15 - 0.5:
        clock.now += 0.5
        b.tick()
        assert not b.is_leader
        assert store.record is not None and store.record.holder == "a"
    # a's own deadline (2/3 of the lease) has passed long before b may act.
    assert not a.is_leader
    clock.now = t0 + 15
    b.tick()
    assert b.is_leader
    assert store.record is not None
    assert (store.record.holder, store.record.transitions) == ("b", 1)


def test_leader_steps_down_when_renewals_fail_for_the_renew_deadline() -> None:
    store, clock = MemoryLease(), Clock()
    a = elector(store, clock, "a")
    a.tick()
    clock.now += 9.9
    assert a.is_leader
    clock.now += 0.2  # 10.1 s > 2/3 · 15 s without a successful renewal
    assert not a.is_leader


def test_lost_race_is_a_conflict_and_not_leadership() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.tick()
    a.release()
    # b reads the released lease, but c writes before b's update lands.
    real_update = store.update

    def racing_update(record: LeaseRecord) -> LeaseRecord:
        assert store.record is not None
        real_update(dataclasses.replace(store.record, holder="c"))
        return real_update(record)

    store.update = racing_update  # type: ignore[method-assign]  # inject the race
    b.tick()
    store.update = real_update  # type: ignore[method-assign]  # race over
    assert not b.is_leader
    assert store.record is not None and store.record.holder == "c"


def test_release_lets_the_standby_take_over_at_its_next_poll() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.tick()
    b.tick()
    a.release()
    assert not a.is_leader
    assert store.record is not None and store.record.holder is None
    b.tick()  # no waiting for the lease to expire
    assert b.is_leader
    assert store.record is not None
    assert (store.record.holder, store.record.transitions) == ("b", 1)


def test_release_by_a_non_holder_writes_nothing() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.tick()
    b.release()
    assert store.writes == ["a"]


@pytest.mark.parametrize(
    ("lease", "renew"), [(15.0, 0.0), (15.0, 10.0), (15.0, 12.0), (3.0, 5.0)], ids=str
)
def test_renew_period_must_fit_in_the_renew_deadline(lease: float, renew: float) -> None:
    with pytest.raises(ValueError, match="renew_seconds"):
        elector(MemoryLease(), Clock(), "a", lease_seconds=lease, renew_seconds=renew)


def test_empty_identity_is_rejected() -> None:
    with pytest.raises(ValueError, match="identity"):
        elector(MemoryLease(), Clock(), "")


steps = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(0, 2)),
        st.tuples(st.just("advance"), st.floats(0.01, 8.0)),
        st.tuples(st.just("crash"), st.integers(0, 2)),
        st.tuples(st.just("release"), st.integers(0, 2)),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_never_two_leaders_and_a_live_replica_always_ends_up_leading(
    schedule: list[tuple[str, float]],
) -> None:
    store, clock = MemoryLease(), Clock()
    replicas = [elector(store, clock, name) for name in ("a", "b", "c")]
    alive = [True, True, True]
    for action, arg in schedule:
        i = int(arg) if action != "advance" else -1
        if action == "tick" and alive[i]:
            replicas[i].tick()
        elif action == "advance":
            clock.now += arg
        elif action == "crash":
            alive[i] = False  # a crashed replica keeps its (stale) belief but never writes
        elif action == "release" and alive[i]:
            replicas[i].release()
        leaders = [r.identity for r, up in zip(replicas, alive, strict=True) if r.is_leader]
        # A crashed replica cannot write, but it must also not *believe* it leads past the point
        # where another one may: check all replicas, dead or alive.
        assert len([r for r in replicas if r.is_leader]) <= 1, leaders
    # Liveness: one surviving replica polling regularly acquires within about one lease duration.
    survivor = replicas[0]
    for _ in range(40):
        survivor.tick()
        clock.now += 0.5
        assert len([r for r in replicas if r.is_leader]) <= 1
        if survivor.is_leader:
            break
    assert survivor.is_leader
    assert store.record is not None and store.record.holder == "a"


def test_run_and_wait_leader_hand_over_on_clean_stop() -> None:
    async def scenario() -> tuple[str | None, str | None, int]:
        store = MemoryLease()
        a = LeaderElector(
            None,
            namespace="n",
            name="l",
            identity="a",
            lease_seconds=3.0,
            renew_seconds=0.2,
            retry_seconds=0.05,
            store=store,
        )
        b = LeaderElector(
            None,
            namespace="n",
            name="l",
            identity="b",
            lease_seconds=3.0,
            renew_seconds=0.2,
            retry_seconds=0.05,
            store=store,
        )
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        task_a = asyncio.create_task(a.run(stop_a))
        await asyncio.wait_for(a.wait_leader(), 2.0)
        task_b = asyncio.create_task(b.run(stop_b))
        await asyncio.sleep(0.3)
        assert not b.is_leader
        first = store.record.holder if store.record else None
        stop_a.set()
        await task_a
        # Released: b takes over at its next poll, far sooner than the 3 s lease.
        await asyncio.wait_for(b.wait_leader(), 1.0)
        second = store.record.holder if store.record else None
        stop_b.set()
        await task_b
        transitions = store.record.transitions if store.record else -1
        return first, second, transitions

    first, second, transitions = asyncio.run(scenario())
    assert (first, second, transitions) == ("a", "b", 1)


def test_a_restarted_process_with_the_same_identity_leads_at_once() -> None:
    store, clock = MemoryLease(), Clock()
    first = elector(store, clock, "walras-controller-7d9f-abcde")
    first.tick()
    clock.now += 1.0  # SIGKILL: the first process never releases; its lease has 14 s to run
    restarted = elector(store, clock, "walras-controller-7d9f-abcde")
    restarted.tick()
    assert restarted.is_leader  # its own Lease: renewed, not waited out
    assert store.record is not None and store.record.transitions == 0
    # A stranger started at the same moment would have had to wait the lease out.
    stranger = elector(store, clock, "another-pod")
    stranger.tick()
    assert not stranger.is_leader


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"POD_NAME": "walras-abc", "HOSTNAME": "x", "KUBERNETES_SERVICE_HOST": "10.0.0.1"},
            "walras-abc",
        ),
        ({"HOSTNAME": "walras-xyz", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "walras-xyz"),
    ],
)
def test_the_default_identity_is_the_pod_name_inside_a_pod(
    environ: dict[str, str], expected: str
) -> None:
    assert default_identity(environ, pid=42) == expected
    assert default_identity(environ, pid=43) == expected  # a restarted container: the same


def test_outside_a_pod_the_default_identity_differs_per_process() -> None:
    environ = {"HOSTNAME": "laptop"}  # a shell sets HOSTNAME too: not a pod
    assert default_identity(environ, pid=42) != default_identity(environ, pid=43)
    assert default_identity(environ, pid=42).endswith("-42")

"""Leader election over a ``coordination.k8s.io/v1`` Lease: one active controller per cluster.

The operator command starts one ``LeaderElector`` next to kopf and writes to the API only while
``elector.is_leader`` is true (kopf peering alone only pauses handlers; it is not an election)::

    elector = leader.LeaderElector(api, namespace="walras-system", name="walras-controller",
                                   identity=pod_name)
    task = asyncio.create_task(elector.run(stop))
    await elector.wait_leader()

The protocol is client-go's ``leaderelection`` with a Lease lock:

- **Acquire** when the Lease is absent, has no holder (released), or its record has not changed
  for ``leaseDurationSeconds`` *as measured on our own monotonic clock since we first saw that
  record*. Measuring locally, not against the holder's ``renewTime``, makes the election immune
  to clock skew between nodes. Taking over from another holder increments ``leaseTransitions``.
- **Renew** every ``renew_seconds`` by writing ``renewTime``.
- **Optimistic concurrency**: every write is a ``replace`` carrying the ``resourceVersion`` we
  read; a competing write makes the API answer 409 Conflict, and we simply re-read next tick.
- **Step down safely**: the leader trusts its leadership only until ``t_sent + renew_deadline``
  where ``t_sent`` is taken *before* the last successful renewal request and
  ``renew_deadline = 2/3 · lease_seconds`` (client-go's 10 s of 15 s). A follower can take over
  only ``lease_seconds`` after it observed that renewal, which happened after ``t_sent``, so two
  leaders never overlap (for equal clock rates).
- **Fencing**: :meth:`LeaderElector.holds_lease` is ``is_leader`` with a safety margin; the API
  writes (``walras.kube.writes.Api``) check it right before sending each request, so a leader whose
  renewals stopped (partition, RBAC, API trouble) writes nothing once its deadline minus the margin
  has passed, whatever it was doing.
- **Errors a person can act on**: an API failure is logged as one line (never a response-header
  dump), and the same failure again only at debug level. A missing Lease namespace says so and
  names the fix (create the namespace, or ``--no-leader-elect``).
- **Identity**: stable per pod (:func:`default_identity`: ``POD_NAME`` from the downward API, or
  the hostname inside a pod, which is the pod's name, as client-go's callers use). A restarted
  container of the same pod is then the Lease's holder, not a stranger who must wait the lease
  out: it renews at once. Fencing is unchanged: the old process is gone (the kubelet starts a
  container only after the previous one has exited), and pod names are unique. Outside a pod
  the identity is ``host-pid``: two processes on one machine are two replicas.
- **Release** on a clean stop: clear the holder and shorten the lease to 1 s, so a standby takes
  over at its next poll instead of waiting out the lease.

API calls are the blocking ``kubernetes`` client run in worker threads (``asyncio.to_thread``),
each with a request timeout, so a hung connection can never keep a stale leader alive. The
storage is behind the small ``LeaseStore`` protocol so the state machine is unit-tested against
an in-memory store that mimics resourceVersion conflicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)

RENEW_DEADLINE_FRACTION = 2.0 / 3.0


def default_identity(environ: Mapping[str, str] | None = None, pid: int | None = None) -> str:
    """The Lease holder identity when none is given: the pod's name inside a pod, else host-pid.

    ``POD_NAME`` (the chart sets it from ``metadata.name``) first; then, inside a pod
    (``KUBERNETES_SERVICE_HOST`` is set by the kubelet), ``HOSTNAME``, which the kubelet sets to
    the pod's name.
    """
    env = os.environ if environ is None else environ
    if env.get("POD_NAME"):
        return env["POD_NAME"]
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("HOSTNAME"):
        return env["HOSTNAME"]
    return f"{socket.gethostname()}-{os.getpid() if pid is None else pid}"


class LeaseConflictError(Exception):
    """The Lease changed (409) or already exists: someone else wrote first; re-read and retry."""


class LeaseApiError(Exception):
    """A Lease request failed; ``str()`` is one line a person can act on (no HTTP headers)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def _api_message(exc: Any) -> str:
    """The API server's ``message`` of an ``ApiException`` body, else its reason (one line)."""
    import json

    body = getattr(exc, "body", None)
    try:
        parsed = json.loads(body) if body else {}
    except (TypeError, ValueError):
        parsed = {}
    text = parsed.get("message") if isinstance(parsed, dict) else None
    text = text or getattr(exc, "reason", None) or type(exc).__name__
    return " ".join(str(text).split())[:300]


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease that the election reads and writes."""

    holder: str | None
    lease_seconds: float
    acquire_time: dt.datetime | None
    renew_time: dt.datetime | None
    transitions: int
    resource_version: str | None = None


class LeaseStore(Protocol):
    """Where the Lease lives. ``create``/``update`` raise ``LeaseConflictError`` on a lost race."""

    def get(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord: ...

    def update(self, record: LeaseRecord) -> LeaseRecord: ...


def _micro_now() -> dt.datetime:
    now = dt.datetime.now(dt.UTC)
    # MicroTime is parsed with a fixed 6-digit fraction; isoformat() drops ".000000" when the
    # microsecond is exactly 0, so nudge that one-in-a-million case to keep the format valid.
    return now if now.microsecond else now.replace(microsecond=1)


class KubernetesLeaseStore:
    """``LeaseStore`` on ``CoordinationV1Api`` (blocking; the elector calls it from a thread)."""

    def __init__(self, api_client: Any, namespace: str, name: str, timeout: float) -> None:
        from kubernetes import client  # deferred: keeps `walras --help` fast

        self._client = client
        self._api = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.timeout = namespace, name, timeout

    def _record(self, lease: Any) -> LeaseRecord:
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or None,
            lease_seconds=float(spec.lease_duration_seconds or 0),
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=int(spec.lease_transitions or 0),
            resource_version=lease.metadata.resource_version,
        )

    def _body(self, record: LeaseRecord) -> Any:
        c = self._client
        return c.V1Lease(
            metadata=c.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=record.resource_version,
            ),
            spec=c.V1LeaseSpec(
                holder_identity=record.holder,
                # The API field is an integer number of seconds; never round a lease down to 0.
                lease_duration_seconds=max(1, round(record.lease_seconds)),
                acquire_time=record.acquire_time,
                renew_time=record.renew_time,
                lease_transitions=record.transitions,
            ),
        )

    def _call(self, verb: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflictError(str(exc.reason)) from None
            where = f"lease {self.namespace}/{self.name}"
            if exc.status == 404 and verb == "create":
                raise LeaseApiError(
                    f"{where}: namespace {self.namespace!r} does not exist; create it "
                    f"(kubectl create namespace {self.namespace}) or run with --no-leader-elect",
                    404,
                ) from None
            if exc.status == 403:
                raise LeaseApiError(
                    f"{where}: not allowed to {verb} leases.coordination.k8s.io in "
                    f"{self.namespace!r} ({_api_message(exc)}); grant it (the chart's Role does) "
                    "or run with --no-leader-elect",
                    403,
                ) from None
            raise LeaseApiError(
                f"{where}: {verb} failed: HTTP {exc.status}: {_api_message(exc)}", exc.status or 0
            ) from None
        except Exception as exc:  # connection refused, timeout, TLS: one line, no traceback
            text = " ".join(str(exc).split())[:300]
            raise LeaseApiError(
                f"lease {self.namespace}/{self.name}: {verb} failed: {type(exc).__name__}: {text}"
            ) from None

    def get(self) -> LeaseRecord | None:
        try:
            lease = self._call("get", self._api.read_namespaced_lease, self.name, self.namespace)
        except LeaseApiError as exc:
            if exc.status == 404:
                return None
            raise
        return self._record(lease)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        body = self._body(dataclasses.replace(record, resource_version=None))
        return self._record(
            self._call("create", self._api.create_namespaced_lease, self.namespace, body)
        )

    def update(self, record: LeaseRecord) -> LeaseRecord:
        body = self._body(record)
        return self._record(
            self._call(
                "update", self._api.replace_namespaced_lease, self.name, self.namespace, body
            )
        )


class LeaderElector:
    """Campaigns for one Lease; ``is_leader`` says whether this process may write right now."""

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
        retry_seconds: float | None = None,
        store: LeaseStore | None = None,
        clock: Callable[[], float] = time.monotonic,
        fence_margin: float | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if not 0 < renew_seconds < RENEW_DEADLINE_FRACTION * lease_seconds:
            raise ValueError(
                f"renew_seconds={renew_seconds} must be positive and below 2/3 of "
                f"lease_seconds={lease_seconds}, so one missed renewal does not drop leadership"
            )
        self.identity = identity
        self.namespace, self.name = namespace, name
        self.lease_seconds = float(lease_seconds)
        self.renew_seconds = float(renew_seconds)
        # Standbys poll faster than the leader renews so a takeover is not delayed by a full
        # renew period after the lease expires.
        self.retry_seconds = float(retry_seconds or min(renew_seconds, 2.0))
        self.renew_deadline = RENEW_DEADLINE_FRACTION * self.lease_seconds
        # Writes stop this long before the renew deadline: a request sent just before it must
        # still reach the API server before a standby can take over (lease_seconds after it saw
        # our last renewal). The default leaves a third of the renew deadline, at most 2 s.
        self.fence_margin = (
            float(fence_margin) if fence_margin is not None else min(2.0, self.renew_deadline / 3.0)
        )
        self._last_error = ""
        self._store: LeaseStore = store or KubernetesLeaseStore(
            api_client, namespace, name, timeout=self.renew_seconds
        )
        self._clock = clock
        self._valid_until = float("-inf")  # monotonic time up to which we may act as leader
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._leading = asyncio.Event()
        # tick() and release() run in worker threads; a cancelled run() may release while a tick
        # is still in flight, and the release must not be overtaken by that tick's renewal.
        self._lock = threading.Lock()
        self._stopped = False  # set when run() ends: no tick may write after that
        self.holder: str | None = None  # the last holder we saw (ourselves included)

    @property
    def is_leader(self) -> bool:
        """True while we hold the Lease and our last renewal is younger than the renew deadline."""
        return self._clock() < self._valid_until

    @property
    def valid_until(self) -> float:
        """Clock time (``clock``, monotonic by default) up to which we may act as leader."""
        return self._valid_until

    def holds_lease(self) -> bool:
        """The write fence: leader, with ``fence_margin`` seconds to spare before the deadline."""
        return self._clock() + self.fence_margin < self._valid_until

    async def wait_leader(self) -> None:
        """Return once this process leads (immediately if it already does)."""
        while not self.is_leader:
            self._leading.clear()
            await self._leading.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign and renew until ``stop`` is set; then release the Lease if we hold it."""
        self._stopped = False
        try:
            while not stop.is_set():
                try:
                    delay = await asyncio.to_thread(self.tick)
                    self._last_error = ""
                except Exception as exc:  # API down, timeout, 5xx: keep campaigning
                    self._report(exc)
                    delay = self.retry_seconds
                self._sync_event()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
        finally:
            self._stopped = True
            if self.is_leader or self.holder == self.identity:
                await asyncio.to_thread(self.release)
            self._sync_event()

    def tick(self) -> float:
        """One campaign step (blocking); returns the seconds to wait before the next one."""
        with self._lock:
            if self._stopped:
                return self.retry_seconds
            return self._tick()

    def _tick(self) -> float:
        t_sent = self._clock()
        now = _micro_now()
        record = self._store.get()
        if record is None:
            mine = LeaseRecord(self.identity, self.lease_seconds, now, now, 0)
            return self._write(self._store.create, mine, t_sent)
        if record != self._observed:
            # Observed *after* the read returned: the write we see happened before this instant,
            # so expiry measured from here never precedes the holder's own renew deadline.
            self._observed, self._observed_at = record, self._clock()
        self.holder = record.holder
        if record.holder == self.identity:
            renewed = dataclasses.replace(record, lease_seconds=self.lease_seconds, renew_time=now)
            return self._write(self._store.update, renewed, t_sent)
        expires_at = self._observed_at + record.lease_seconds
        if record.holder is None or self._clock() >= expires_at:
            taken = LeaseRecord(
                holder=self.identity,
                lease_seconds=self.lease_seconds,
                acquire_time=now,
                renew_time=now,
                transitions=record.transitions + 1,
                resource_version=record.resource_version,
            )
            return self._write(self._store.update, taken, t_sent)
        self._valid_until = float("-inf")  # someone else holds a live lease
        # Wake exactly at expiry if that comes before the next regular poll.
        return max(0.05, min(self.retry_seconds, expires_at - self._clock()))

    def _write(
        self, write: Callable[[LeaseRecord], LeaseRecord], record: LeaseRecord, t_sent: float
    ) -> float:
        try:
            written = write(record)
        except LeaseConflictError:
            # Another replica wrote in between; whatever it wrote, we learn it on the next read.
            logger.info("lease %s/%s: conflict, re-reading", self.namespace, self.name)
            return min(self.retry_seconds, 0.5)
        was_leader = self.is_leader
        self._observed, self._observed_at = written, t_sent
        self.holder = written.holder
        self._valid_until = t_sent + self.renew_deadline
        if not was_leader:
            logger.info(
                "lease %s/%s: %s became leader (transitions=%d)",
                self.namespace,
                self.name,
                self.identity,
                written.transitions,
            )
        return self.renew_seconds

    def release(self) -> None:
        """Give the Lease up (blocking): empty holder, 1 s duration. Best effort."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        self._valid_until = float("-inf")
        try:
            record = self._store.get()
            if record is None or record.holder != self.identity:
                return
            released = dataclasses.replace(
                record, holder=None, lease_seconds=1.0, renew_time=_micro_now()
            )
            self._store.update(released)
            self.holder = None
            logger.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
        except Exception as exc:  # leaving anyway; the lease then simply expires
            logger.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)

    def _report(self, exc: Exception) -> None:
        """One line per distinct failure; the same failure again only at debug level."""
        text = str(exc) if isinstance(exc, LeaseApiError) else f"{type(exc).__name__}: {exc}"
        text = " ".join(text.split())
        if not text.startswith("lease "):
            text = f"lease {self.namespace}/{self.name}: {text}"
        if text == self._last_error:
            logger.debug("%s (again)", text)
            return
        self._last_error = text
        logger.warning("%s", text)

    def _sync_event(self) -> None:
        if self.is_leader:
            self._leading.set()
        else:
            self._leading.clear()

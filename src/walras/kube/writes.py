"""The one module of the operator that writes to the Kubernetes API.

Called by the round loop (``walras.operator.loop``) and the SoW shell (``walras.operator.sow``) for
their writes: create pod, bind it through the ``pods/binding`` subresource, delete pod, merge-patch
the status of Walras objects (FungibleJob, ResourcePool, StatementOfWork), post Events on them.
Reads never come here: the watch handlers keep the indexes.

Requests go through the ``kubernetes`` client's connection pool (its TLS settings and
authentication) with plain dict bodies, in a private thread pool so that many writes of one round
run in parallel without blocking the event loop. With a real ``ApiClient`` they skip its generic
request builder (``param_serialize``: a recursive sanitising walk of the body, and an auth refresh
per request) and go straight to its urllib3 pool: compact JSON, the headers it would send, the
same pool, which about halves the client's own CPU per request
(docs/evaluation.md#client-cpu-per-write); any other client object (the tests' stand-ins) takes the
generic path. Conflicts are idempotent outcomes, not errors:

- create → 409 AlreadyExists is :attr:`Outcome.EXISTS` (a restarted operator re-creating the
  deterministic pod name);
- bind → 409 (already bound) is :attr:`Outcome.CONFLICT`, 404 is :attr:`Outcome.GONE`;
- delete → 404 is :attr:`Outcome.GONE`.

Transient failures are retried inside the call, a bounded number of times with exponential backoff
and full jitter (``base · 2^k``, at most ``max_attempts`` attempts): HTTP 429 and 5xx, connection
errors and timeouts, and 409 Conflict on a status patch. A ``Retry-After`` header (seconds) replaces
the computed delay, capped at ``max_delay``. What still fails comes back as :attr:`Outcome.ERROR`
with the API server's message (one line; never the response headers) and its ``reason``
(``Forbidden``, ``Invalid``, ...); the next round retries from a fresh snapshot.

**Fencing.** ``fence`` (the leader elector's ``holds_lease``) is checked in the worker thread
immediately before every request is sent, retries included; when it says no, nothing is sent and
the call returns :attr:`Outcome.FENCED`. A deposed leader therefore writes nothing, even for
requests that were queued before it lost the Lease.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import enum
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from walras.core import crd

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Outcome(enum.Enum):
    OK = "ok"
    EXISTS = "exists"
    CONFLICT = "conflict"
    GONE = "gone"
    ERROR = "error"
    FENCED = "fenced"  # not sent: this process no longer holds the Lease


# Answers worth another attempt: throttled, server-side trouble, or no answer at all (status 0).
RETRY_STATUSES = frozenset({0, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    status: int
    message: str = ""
    reason: str = ""  # the API server's Status.reason (Forbidden, Invalid, AlreadyExists, ...)

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.OK, Outcome.EXISTS)


class Involved(Protocol):
    """What an Event names: a namespaced object (FungibleJob, StatementOfWork, ...)."""

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...


class Api:
    """Writes to the API server; every method is safe to call concurrently."""

    def __init__(
        self,
        api_client: Any,
        *,
        # Requests in flight. 32 rather than 16: the API server spends fewer CPU-seconds per
        # write with more in flight, so a cold round is shorter
        # (docs/evaluation.md#writes-in-flight).
        # The operator's connection pool holds as many (walras.operator.main: pool_size=32).
        workers: int = 32,
        timeout: float = 15.0,
        fence: Callable[[], bool] | None = None,
        max_attempts: int = 4,
        base_delay: float = 0.2,
        max_delay: float = 5.0,
    ) -> None:
        self.client = api_client
        self.timeout = timeout
        self.fence = fence
        self.max_attempts = max(1, max_attempts)
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.concurrency = workers  # requests in flight at most (callers size their waves)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="walras-api")
        rest = getattr(api_client, "rest_client", None)
        self._urllib3 = getattr(rest, "pool_manager", None)
        self._config = getattr(api_client, "configuration", None)
        if not isinstance(getattr(self._config, "host", None), str):
            self._urllib3 = None  # not a kubernetes ApiClient: the generic path
        self.writes = 0  # requests actually sent (retries included)
        self.fenced = 0  # requests the fence stopped
        # Monotonic send time of the latest writes (the fencing test reads them).
        self.sent_at: collections.deque[float] = collections.deque(maxlen=4096)
        # Whoever watches the pod events is the operator itself; a UID per process lets Events
        # name their reporting instance.
        self.instance = uuid.uuid4().hex[:8]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ plumbing

    def _request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        retry_conflict: bool = False,
    ) -> Result:
        """Send with bounded retries (see the module docstring); blocking, in a worker thread."""
        # Jitter only spreads retries of concurrent writers; its seed does not matter.
        rng = random.Random(f"{self.instance}-{path}")
        result = Result(Outcome.ERROR, 0, "not sent")
        for attempt in range(self.max_attempts):
            if self.fence is not None and not self.fence():
                self.fenced += 1
                return Result(Outcome.FENCED, 0, "not sent: this process does not hold the Lease")
            result, retry_after = self._send(method, path, body, content_type)
            retryable = result.status in RETRY_STATUSES and result.outcome == Outcome.ERROR
            if retry_conflict and result.outcome == Outcome.CONFLICT:
                retryable = True
            if not retryable or attempt + 1 == self.max_attempts:
                return result
            delay = rng.uniform(0.0, self.base_delay * 2**attempt)
            if retry_after is not None:
                delay = retry_after
            time.sleep(min(max(delay, 0.0), self.max_delay))
        return result

    def _send(
        self, method: str, path: str, body: object, content_type: str
    ) -> tuple[Result, float | None]:
        self.writes += 1
        self.sent_at.append(time.monotonic())
        try:
            if self._urllib3 is not None:
                resp = self._direct(method, path, body, content_type)
                return self._outcome(int(resp.status), resp)
            _method, url, headers, data, post = self.client.param_serialize(
                method=method,
                resource_path=path,
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.client.call_api(
                _method,
                url,
                header_params=headers,
                body=data,
                post_params=post,
                _request_timeout=self.timeout,
            )
            resp.read()
            status = int(resp.status)
        except Exception as exc:  # connection reset, timeout, TLS: retried, then the next round
            text = " ".join(str(exc).split())[:300]
            return Result(Outcome.ERROR, 0, f"{type(exc).__name__}: {text}"), None
        return self._outcome(status, resp)

    def _direct(self, method: str, path: str, body: object, content_type: str) -> Any:
        """One request on the ApiClient's own urllib3 pool (module docstring): the headers
        ``param_serialize`` would build (default headers, authentication) and compact JSON."""
        config: Any = self._config
        headers = auth_headers(self.client)
        headers["Content-Type"] = content_type
        headers["Accept"] = "application/json"
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        pool: Any = self._urllib3
        # retries=False: urllib3 would otherwise re-send a DELETE after a 429's Retry-After by
        # itself, past the fence and the cap; every attempt goes through _request instead.
        return pool.request(
            method,
            config.host + path,
            body=data,
            headers=headers,
            timeout=self.timeout,
            retries=False,
        )

    def _outcome(self, status: int, resp: Any) -> tuple[Result, float | None]:
        if 200 <= status < 300:
            return Result(Outcome.OK, status), None
        message, reason = _message(resp.data), _reason(resp.data)
        retry_after = _retry_after(resp)
        if status == 404:
            return Result(Outcome.GONE, status, message, reason), None
        if status == 409:
            outcome = Outcome.EXISTS if reason == "AlreadyExists" else Outcome.CONFLICT
            return Result(outcome, status, message, reason), None
        return Result(Outcome.ERROR, status, message or f"HTTP {status}", reason), retry_after

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Result:
        loop = asyncio.get_running_loop()
        result: Result = await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))
        return result

    # ------------------------------------------------------------------ pods

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> Result:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods"
        return await self._run(self._request, "POST", path, dict(manifest))

    async def bind_pod(self, namespace: str, name: str, node: str) -> Result:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding"
        return await self._run(self._request, "POST", path, body)

    async def delete_pod(
        self, namespace: str, name: str, *, force: bool = False, uid: str = ""
    ) -> Result:
        """Delete a pod; ``force`` (grace period 0) for a pod whose node is gone, since no
        kubelet will ever confirm its graceful deletion (the pod GC of kube-controller-manager
        does the same). With ``uid``, only that incarnation of the pod is deleted (a
        precondition: a pod re-created under the same name by someone else is left alone)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if force:
            body["gracePeriodSeconds"] = 0
        if uid:
            body["preconditions"] = {"uid": uid}
        result = await self._run(self._request, "DELETE", path, body if force or uid else None)
        if result.outcome == Outcome.CONFLICT:  # the uid precondition failed: not our pod
            return Result(Outcome.GONE, result.status, result.message, result.reason)
        return result

    async def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Result:
        """Merge-patch a pod's annotations (``None`` removes one). A pod gone is
        :attr:`Outcome.GONE` (it was deleted meanwhile: nothing left to say on it)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        return await self._run(
            self._request,
            "PATCH",
            path,
            {"metadata": {"annotations": dict(annotations)}},
            content_type="application/merge-patch+json",
        )

    # ------------------------------------------------------------------ status

    async def patch_status(
        self, plural: str, name: str, status: Mapping[str, Any], *, namespace: str = ""
    ) -> Result:
        """Merge-patch the ``status`` subresource of a Walras custom resource.

        ``plural`` is the resource's plural (``fungiblejobs``, ``statementsofwork``, ...);
        ``namespace`` empty for a cluster-scoped resource (``resourcepools``). Conflicts are
        retried: a merge patch carries no resourceVersion, so a retry cannot undo another write.
        """
        scope = f"namespaces/{quote(namespace)}/" if namespace else ""
        path = f"/apis/{crd.GROUP}/{crd.VERSION}/{scope}{plural}/{quote(name)}/status"
        return await self._run(
            self._request,
            "PATCH",
            path,
            {"status": dict(status)},
            content_type="application/merge-patch+json",
            retry_conflict=True,
        )

    async def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> Result:
        return await self.patch_status(crd.JOB_PLURAL, name, status, namespace=namespace)

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> Result:
        return await self.patch_status(crd.POOL_PLURAL, name, status)

    # ------------------------------------------------------------------ any object

    async def create_object(self, path: str, body: Mapping[str, Any]) -> Result:
        """POST ``body`` to the collection at ``path`` (an adopted workload's mirror)."""
        return await self._run(self._request, "POST", path, dict(body))

    async def patch_object(self, path: str, patch: Mapping[str, Any]) -> Result:
        """Merge-patch the object at ``path`` (suspending or starting an adopted workload)."""
        return await self._run(
            self._request, "PATCH", path, dict(patch), content_type="application/merge-patch+json"
        )

    async def replace_spec(self, path: str, spec: Mapping[str, Any]) -> Result:
        """Replace the ``spec`` of the object at ``path`` whole (a JSON patch: a merge patch
        would keep map keys the new spec drops), e.g. an adopted workload's mirror."""
        body = [{"op": "replace", "path": "/spec", "value": dict(spec)}]
        return await self._run(
            self._request, "PATCH", path, body, content_type="application/json-patch+json"
        )

    # ------------------------------------------------------------------ configmaps

    async def put_configmap(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str],
        binary_data: Mapping[str, str],
    ) -> Result:
        """Create or overwrite the keys ``binary_data`` (base64 strings) of a ConfigMap.

        A merge patch first (the common case: it exists), a create when it is missing. The
        schedule history (``walras.operator.history_store``) is its only user.
        """
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps"
        meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
        patch = {"metadata": {"labels": dict(labels)}, "binaryData": dict(binary_data)}
        item = f"{path}/{quote(name)}"
        result = await self._run(
            self._request, "PATCH", item, patch, content_type="application/merge-patch+json"
        )
        if result.outcome != Outcome.GONE:
            return result
        body = {"apiVersion": "v1", "kind": "ConfigMap", **patch, "metadata": meta}
        result = await self._run(self._request, "POST", path, body)
        if result.outcome == Outcome.EXISTS:  # created meanwhile: overwrite it
            result = await self._run(
                self._request, "PATCH", item, patch, content_type="application/merge-patch+json"
            )
        return result

    # ------------------------------------------------------------------ events

    async def post_event(
        self,
        obj: Involved,
        *,
        kind: str = crd.JOB_KIND,
        api_version: str = crd.API_VERSION,
        uid: str,
        event_type: str,
        reason: str,
        message: str,
        now: str,
    ) -> Result:
        """A core/v1 Event on the object ``obj`` of ``kind`` (a Walras object unless
        ``api_version`` says otherwise; the caller deduplicates)."""
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{obj.name[:200]}.", "namespace": obj.namespace},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "namespace": obj.namespace,
                "name": obj.name,
                "uid": uid,
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": "walras-operator"},
            "reportingComponent": "walras.dev/operator",
            "reportingInstance": f"walras-operator-{self.instance}",
        }
        path = f"/api/v1/namespaces/{quote(obj.namespace)}/events"
        return await self._run(self._request, "POST", path, body)


def auth_headers(api_client: Any) -> dict[str, str]:
    """The headers ``param_serialize`` would send: the client's defaults and its credentials
    (``auth_settings()`` runs the token refresh hook, throttled by walras.kube.client)."""
    headers = {str(k): str(v) for k, v in api_client.default_headers.items()}
    for setting in api_client.configuration.auth_settings().values():
        if setting.get("in") == "header" and setting.get("value"):
            headers[str(setting["key"])] = str(setting["value"])
    return headers


async def gather_limited(coros: Iterable[Awaitable[T]]) -> list[T]:
    """Await all; the thread pool already bounds the concurrency of the requests."""
    return list(await asyncio.gather(*coros))


def _decode(data: object) -> Mapping[str, Any]:
    try:
        raw = data.decode() if isinstance(data, bytes) else str(data)
        parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _message(data: object) -> str:
    return str(_decode(data).get("message", ""))[:500]


def _reason(data: object) -> str:
    return str(_decode(data).get("reason", ""))


def _retry_after(resp: Any) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), if any."""
    try:
        # ``headers`` first: urllib3 2 deprecates ``getheaders()``.
        headers = getattr(resp, "headers", None)
        if headers is None and hasattr(resp, "getheaders"):
            headers = resp.getheaders()
        value = headers.get("Retry-After") if headers is not None else None
    except Exception:  # a response object without headers: no hint
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def list_objects(
    api_client: Any,
    path: str,
    *,
    label_selector: str = "",
    missing_ok: bool = True,
    limit: int = 0,
) -> list[dict[str, Any]]:
    """Every object under a collection path (one LIST; with ``limit`` > 0 at most that many, the
    first page). A 404 (the CRD is not installed) is an empty list, or with ``missing_ok=False``
    an error like any other status outside 2xx."""
    query = [("labelSelector", label_selector)] if label_selector else []
    if limit > 0:
        query.append(("limit", str(limit)))
    _method, url, headers, data, post = api_client.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    resp = api_client.call_api(
        _method, url, header_params=headers, body=data, post_params=post, _request_timeout=30
    )
    resp.read()
    if int(resp.status) == 404 and missing_ok:
        return []  # e.g. the CRD is not installed yet
    if not 200 <= int(resp.status) < 300:
        raise RuntimeError(f"LIST {path}: HTTP {resp.status}: {_message(resp.data)}")
    items = _decode(resp.data).get("items") or []
    return [item for item in items if isinstance(item, dict)]


def can_i(
    api_client: Any, verb: str, resource: str, *, group: str = "", namespace: str = ""
) -> bool:
    """Whether this client may ``verb`` the ``resource`` in ``namespace`` (empty: in every
    namespace): one SelfSubjectAccessReview, which every authenticated user may create; start-up
    only. Lets a feature that needs optional RBAC turn itself off quietly instead of logging 403s.
    """
    attributes = {"verb": verb, "resource": resource, "group": group, "namespace": namespace}
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    _method, url, headers, data, post = api_client.param_serialize(
        method="POST",
        resource_path="/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api_client.call_api(
        _method, url, header_params=headers, body=data, post_params=post, _request_timeout=30
    )
    resp.read()
    if not 200 <= int(resp.status) < 300:
        return False
    return bool((_decode(resp.data).get("status") or {}).get("allowed"))

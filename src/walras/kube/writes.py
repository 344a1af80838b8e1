"""The one module of the operator that writes to the Kubernetes API.

Called by the round loop (``walras.operator.loop``) for its writes: create pod, bind it through the
``pods/binding`` subresource, delete pod, merge-patch FungibleJob/ResourcePool status, post Events.
Reads never come here: the watch handlers keep the indexes.

Requests go through the ``kubernetes`` client's REST layer (its authentication, TLS and connection
pool) with plain dict bodies, in a private thread pool so that many writes of one round run in
parallel without blocking the event loop. Conflicts are idempotent outcomes, not errors:

- create → 409 AlreadyExists is :attr:`Outcome.EXISTS` (a restarted operator re-creating the
  deterministic pod name);
- bind → 409 (already bound) is :attr:`Outcome.CONFLICT`, 404 is :attr:`Outcome.GONE`;
- delete → 404 is :attr:`Outcome.GONE`.

Server errors (5xx, timeouts) come back as :attr:`Outcome.ERROR` with the message; the next round
retries from a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import uuid
from collections.abc import Awaitable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

from walras.core import crd, model

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Outcome(enum.Enum):
    OK = "ok"
    EXISTS = "exists"
    CONFLICT = "conflict"
    GONE = "gone"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    status: int
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.OK, Outcome.EXISTS)


class Api:
    """Writes to the API server; every method is safe to call concurrently."""

    def __init__(self, api_client: Any, *, workers: int = 16, timeout: float = 15.0) -> None:
        self.client = api_client
        self.timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="walras-api")
        self.writes = 0
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
    ) -> Result:
        self.writes += 1
        try:
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
        except Exception as exc:  # connection reset, timeout, TLS: the next round retries
            return Result(Outcome.ERROR, 0, f"{type(exc).__name__}: {exc}")
        if 200 <= status < 300:
            return Result(Outcome.OK, status)
        message = _message(resp.data)
        if status == 404:
            return Result(Outcome.GONE, status, message)
        if status == 409:
            reason = _reason(resp.data)
            outcome = Outcome.EXISTS if reason == "AlreadyExists" else Outcome.CONFLICT
            return Result(outcome, status, message)
        return Result(Outcome.ERROR, status, message)

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

    async def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> Result:
        """Delete a pod; ``force`` (grace period 0) for a pod whose node is gone, since no
        kubelet will ever confirm its graceful deletion (the pod GC of kube-controller-manager
        does the same)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        return await self._run(self._request, "DELETE", path, body if force else None)

    # ------------------------------------------------------------------ status

    async def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> Result:
        path = (
            f"/apis/{crd.GROUP}/{crd.VERSION}/namespaces/{quote(namespace)}/"
            f"{crd.JOB_PLURAL}/{quote(name)}/status"
        )
        return await self._run(
            self._request,
            "PATCH",
            path,
            {"status": dict(status)},
            content_type="application/merge-patch+json",
        )

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> Result:
        path = f"/apis/{crd.GROUP}/{crd.VERSION}/{crd.POOL_PLURAL}/{quote(name)}/status"
        return await self._run(
            self._request,
            "PATCH",
            path,
            {"status": dict(status)},
            content_type="application/merge-patch+json",
        )

    # ------------------------------------------------------------------ events

    async def post_event(
        self,
        job: model.JobSpec | model.JobDefect,
        *,
        uid: str,
        event_type: str,
        reason: str,
        message: str,
        now: str,
    ) -> Result:
        """A core/v1 Event on the FungibleJob (the caller deduplicates)."""
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{job.name[:200]}.", "namespace": job.namespace},
            "involvedObject": {
                "apiVersion": crd.API_VERSION,
                "kind": crd.JOB_KIND,
                "namespace": job.namespace,
                "name": job.name,
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
        path = f"/api/v1/namespaces/{quote(job.namespace)}/events"
        return await self._run(self._request, "POST", path, body)


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


def list_keys(api_client: Any, path: str, *, label_selector: str = "") -> set[tuple[str, str]]:
    """(namespace, name) of every object under a collection path (one LIST, at start-up only).

    The operator compares it with what its watches delivered to know when its indexes hold the
    whole cluster (see ``walras.operator.handlers.Readiness``).
    """
    query = [("labelSelector", label_selector)] if label_selector else []
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
    if int(resp.status) == 404:
        return set()  # e.g. the CRD is not installed yet
    if not 200 <= int(resp.status) < 300:
        raise RuntimeError(f"LIST {path}: HTTP {resp.status}: {_message(resp.data)}")
    items = _decode(resp.data).get("items") or []
    out: set[tuple[str, str]] = set()
    for item in items:
        meta = item.get("metadata") or {}
        out.add((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
    return out

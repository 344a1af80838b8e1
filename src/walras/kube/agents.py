"""The agents' only door to the Kubernetes API (synchronous ``kubernetes`` client).

Used by the agent loop (``walras.agent.runner``), the totals aggregator
(``walras.agent.aggregator``) and the benchmark. Responses are read as raw JSON (plain dicts, the
shape ``walras.core.model`` parses) rather than through the client's model classes, which
costs far less CPU per call. Every call is counted so that the benchmark can report API requests
per agent step.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from walras.kube import watch

log = logging.getLogger("walras.kube.agents")

GROUP = "walras.dev"
VERSION = "v1alpha1"
ALLOCATIONS = "nodeallocations"
JOBS = "fungiblejobs"
POOLS = "resourcepools"
TENANTS = "tenants"
NODES = "nodes"

Obj = dict[str, Any]
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


class NotFoundError(Exception):
    """The object (node or NodeAllocation) does not exist."""


def _status(exc: client.ApiException) -> int:
    return int(getattr(exc, "status", 0) or 0)


class Kube:
    """Thin wrapper over CoreV1Api/CustomObjectsApi with read/write counters (thread-safe)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._lock = threading.Lock()
        self.reads = 0
        self.writes = 0

    def _count(self, *, write: bool) -> None:
        with self._lock:
            if write:
                self.writes += 1
            else:
                self.reads += 1

    @staticmethod
    def _json(response: Any) -> Obj:
        data = json.loads(response.data)
        return data if isinstance(data, dict) else {}

    # ------------------------------------------------------------------ reads

    def read_node(self, name: str) -> Obj:
        """The Node ``name`` as a dict; raises :class:`NotFoundError`."""
        self._count(write=False)
        try:
            return self._json(self.core.read_node(name, _preload_content=False))
        except client.ApiException as exc:
            if _status(exc) == 404:
                raise NotFoundError(name) from exc
            raise

    def node_names(self) -> set[str]:
        """Names of every Node (aggregator only; agents never list nodes).

        Asks for metadata only (PartialObjectMetadataList): a tenth of the bytes of full Nodes.
        """
        self._count(write=False)
        data = self._json(
            self.core.list_node(
                _preload_content=False,
                _headers={"Accept": _METADATA_ONLY},
            )
        )
        return {str(i["metadata"]["name"]) for i in data.get("items", [])}

    def list_custom(self, plural: str) -> tuple[list[Obj], str | None]:
        """Every object of a walras.dev kind (all namespaces) and the list's resourceVersion."""
        self._count(write=False)
        data = self._json(
            self.custom.list_cluster_custom_object(GROUP, VERSION, plural, _preload_content=False)
        )
        rv = (data.get("metadata") or {}).get("resourceVersion")
        return list(data.get("items", [])), None if rv is None else str(rv)

    def get_allocation(self, name: str) -> Obj | None:
        """NodeAllocation ``name``, or None."""
        self._count(write=False)
        try:
            return self._json(
                self.custom.get_cluster_custom_object(
                    GROUP, VERSION, ALLOCATIONS, name, _preload_content=False
                )
            )
        except client.ApiException as exc:
            if _status(exc) == 404:
                return None
            raise

    # ----------------------------------------------------------------- writes

    def create_allocation(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        owner: Mapping[str, str] | None = None,
    ) -> Obj:
        """Create NodeAllocation ``name`` (no status yet); an existing one is returned as is."""
        meta: Obj = {"name": name, "labels": dict(labels or {})}
        if owner is not None:
            # Garbage-collected with its Node where a controller manager runs; the aggregator
            # deletes it anyway once the node is gone.
            meta["ownerReferences"] = [dict(owner)]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeAllocation",
            "metadata": meta,
            "spec": {"nodeName": name},
        }
        self._count(write=True)
        try:
            return self._json(
                self.custom.create_cluster_custom_object(
                    GROUP, VERSION, ALLOCATIONS, body, _preload_content=False
                )
            )
        except client.ApiException as exc:
            if _status(exc) != 409:
                raise
        found = self.get_allocation(name)
        if found is None:  # deleted between the conflict and the read: try once more
            return self.create_allocation(name, labels=labels, owner=owner)
        return found

    def patch_allocation_status(self, name: str, status: Mapping[str, Any]) -> str:
        """Merge-patch ``status`` (None values delete keys); returns the new resourceVersion."""
        self._count(write=True)
        try:
            data = self._json(
                self.custom.patch_cluster_custom_object_status(
                    GROUP,
                    VERSION,
                    ALLOCATIONS,
                    name,
                    {"status": dict(status)},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )
        except client.ApiException as exc:
            if _status(exc) == 404:
                raise NotFoundError(name) from exc
            raise
        return str(data["metadata"]["resourceVersion"])

    def delete_allocation(self, name: str) -> None:
        """Delete NodeAllocation ``name``; a missing one is fine."""
        self._count(write=True)
        try:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, ALLOCATIONS, name)
        except client.ApiException as exc:
            if _status(exc) != 404:
                raise


# --------------------------------------------------------------------------------- informer


def collection_path(kind: str) -> str:
    """The API path of ``kind``'s collection: ``"nodes"`` or a walras.dev plural."""
    if kind == NODES:
        return "/api/v1/nodes"
    return f"/apis/{GROUP}/{VERSION}/{kind}"


class Informer:
    """One resource's objects by name, kept current by Walras's one LIST+WATCH mechanism
    (:class:`walras.kube.watch.CollectionWatch`, in a thread of its own; raw JSON).

    A listing replaces the cache; ADDED/MODIFIED/DELETED events then apply in resourceVersion
    order. Steady state costs one request per ``watch.WATCH_SECONDS`` per informer, however
    often the caller reads. ``version`` is the resourceVersion of the last LIST or event
    applied: every write up to it is in :meth:`items`.

    ``kind``: ``"nodes"`` or a walras.dev plural. ``optional``: a 403/404 on the LIST (CRD not
    installed, no RBAC) gives an empty, synced cache, listed again every ``retry`` seconds.
    ``on_change(name)`` runs on the informer's thread after each applied change ("" after a
    listing).
    """

    def __init__(
        self,
        kube: Kube,
        kind: str,
        *,
        field_selector: str | None = None,
        optional: bool = False,
        on_change: Callable[[str], None] | None = None,
        retry: float = 30.0,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.on_change = on_change
        self._lock = threading.Condition()
        self._items: dict[str, Obj] = {}
        self.version: str | None = None
        self.generation = 0  # +1 per applied change (and per listing)
        self.synced = threading.Event()
        self.collection = watch.CollectionWatch(
            kube.api_client,
            collection_path(kind),
            self._deliver,
            # An agent resumes quickly: its steps wait on this cache, not on a round timer.
            retry_seconds=0.5,
            query={"fieldSelector": field_selector} if field_selector else None,
            optional=optional,
            refused_retry=retry,
            on_request=lambda: kube._count(write=False),
        )

    @property
    def forbidden(self) -> int | None:
        """HTTP status of an optional LIST that was refused (None once one succeeds)."""
        return self.collection.refused

    # ---------------------------------------------------------------- reading

    def items(self) -> list[Obj]:
        """The cached objects, sorted by name (stable order for the callers' models)."""
        with self._lock:
            return [self._items[k] for k in sorted(self._items)]

    def get(self, name: str) -> Obj | None:
        with self._lock:
            return self._items.get(name)

    def snapshot(self) -> tuple[list[Obj], str | None, int]:
        """Objects, the version they include, and the generation, read together."""
        with self._lock:
            return [self._items[k] for k in sorted(self._items)], self.version, self.generation

    def wait_change(self, generation: int, timeout: float) -> int:
        """Block until the generation differs from ``generation`` (or ``timeout``); returns it."""
        with self._lock:
            self._lock.wait_for(lambda: self.generation != generation, timeout=timeout)
            return self.generation

    # ---------------------------------------------------------------- applying

    def _deliver(self, events: list[Mapping[str, Any]], listing: bool) -> None:
        if listing:
            self._relisted(events)
            return
        for event in events:
            self.apply(event)

    def _relisted(self, events: list[Mapping[str, Any]]) -> None:
        items = {}
        for event in events:
            obj = event.get("object")
            if isinstance(obj, Mapping):
                items[str((obj.get("metadata") or {}).get("name"))] = dict(obj)
        with self._lock:
            self._items = items
            self.version = self.collection.version
            self.generation += 1
            self._lock.notify_all()
        self.synced.set()
        if self.on_change is not None:
            self.on_change("")

    def apply(self, event: Mapping[str, Any]) -> None:
        """Apply one ADDED/MODIFIED/DELETED watch event."""
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            return
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._items[name] = dict(obj)
            elif kind == "DELETED":
                self._items.pop(name, None)
            if meta.get("resourceVersion"):
                self.version = str(meta["resourceVersion"])
            self.generation += 1
            self._lock.notify_all()
        if self.on_change is not None:
            self.on_change(name)

    def run(self, stop: threading.Event) -> None:
        """Keep the cache current until ``stop`` is set (a WATCH ends within WATCH_SECONDS)."""
        self.collection.run(stop)

    def start(self, stop: threading.Event, *, wait: float = 30.0) -> Informer:
        """Run in a daemon thread; wait up to ``wait`` seconds for the first LIST."""
        self.collection.start(stop)
        started = time.monotonic()
        while not self.synced.wait(0.1) and time.monotonic() - started < wait:
            pass
        return self

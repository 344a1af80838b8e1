"""The agents' only door to the Kubernetes API (synchronous ``kubernetes`` client).

Used by the agent loop (``walras.agent.runner``), the totals aggregator
(``walras.agent.aggregator``) and the benchmark. Responses are read as raw JSON (plain dicts, the
shape ``walras.core.model`` parses) rather than through the client's model classes, which
costs far less CPU per call. Every call is counted so that the benchmark can report API requests
per agent step.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes import client

GROUP = "walras.dev"
VERSION = "v1alpha1"
ALLOCATIONS = "nodeallocations"
JOBS = "fungiblejobs"
POOLS = "resourcepools"

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

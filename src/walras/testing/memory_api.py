"""An in-memory stand-in for ``walras.kube.writes.Api`` that plays the API server and its watch.

Test infrastructure (benchmarks and tests; never product code). The round loop
(``walras.operator.loop.RoundLoop``) writes to it as to the real one; it keeps the objects it
was given and applies every write to them the way the API server would show them back through
the watch (a created pod appears, bound where it was created or bound, Running; a deleted pod
disappears; a status or annotation merge patch is merged), and feeds them to the loop's watch
handlers (``walras.operator.handlers.Watcher``). A benchmark can then count the writes of many
rounds of the real loop without a control plane: :attr:`MemoryApi.counts` per verb, and
:attr:`MemoryApi.patched_keys` the status keys each job patch carried.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Mapping
from typing import Any

from walras.kube import writes


def _merge(old: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386): a null removes the key."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(old) if isinstance(old, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


class MemoryApi:
    """The writes of ``walras.kube.writes.Api``, applied to objects held in memory."""

    concurrency = 8  # requests in flight, as walras.kube.writes.Api says of itself
    client = None  # no API client: the loop's ConfigMap history store is left out

    def __init__(self, watcher: Any = None) -> None:
        self.watcher = watcher  # a walras.operator.handlers.Watcher, set once the loop exists
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.counts: collections.Counter[str] = collections.Counter()
        self.patched_keys: collections.Counter[str] = collections.Counter()

    def add_job(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        self.jobs[(meta["namespace"], meta["name"])] = copy.deepcopy(dict(obj))
        self._show("job", "ADDED", self.jobs[(meta["namespace"], meta["name"])])

    def _show(self, kind: str, etype: str, obj: Mapping[str, Any]) -> None:
        if self.watcher is not None:
            self.watcher.apply(kind, {"type": etype, "object": copy.deepcopy(dict(obj))})

    def _ok(self, verb: str, code: int = 200) -> writes.Result:
        self.counts[verb] += 1
        return writes.Result(writes.Outcome.OK, code)

    async def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> writes.Result:
        obj = copy.deepcopy(dict(manifest))
        obj["metadata"] = {
            **obj["metadata"],
            "namespace": namespace,
            "uid": manifest["metadata"]["name"],
        }
        obj["status"] = {"phase": "Running" if obj["spec"].get("nodeName") else "Pending"}
        self.pods[(namespace, obj["metadata"]["name"])] = obj
        self._show("pod", "ADDED", obj)
        return self._ok("create", 201)

    async def bind_pod(self, namespace: str, name: str, node: str) -> writes.Result:
        obj = self.pods.get((namespace, name))
        if obj is None:
            self.counts["bind"] += 1
            return writes.Result(writes.Outcome.GONE, 404)
        obj["spec"]["nodeName"] = node
        obj["status"] = {"phase": "Running"}
        self._show("pod", "MODIFIED", obj)
        return self._ok("bind", 201)

    async def delete_pod(self, namespace: str, name: str, **_: Any) -> writes.Result:
        obj = self.pods.pop((namespace, name), None)
        if obj is None:
            self.counts["delete"] += 1
            return writes.Result(writes.Outcome.GONE, 404)
        self._show("pod", "DELETED", obj)
        return self._ok("delete")

    async def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> writes.Result:
        obj = self.pods.get((namespace, name))
        if obj is None:
            self.counts["annotate"] += 1
            return writes.Result(writes.Outcome.GONE, 404)
        meta = obj["metadata"]
        meta["annotations"] = _merge(meta.get("annotations") or {}, dict(annotations))
        self._show("pod", "MODIFIED", obj)
        return self._ok("annotate")

    async def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> writes.Result:
        obj = self.jobs.get((namespace, name))
        if obj is None:
            self.counts["job_status"] += 1
            return writes.Result(writes.Outcome.GONE, 404)
        old = obj.get("status") or {}
        self.patched_keys.update(k for k, v in status.items() if old.get(k) != v)
        obj["status"] = _merge(old, dict(status))
        self._show("job", "MODIFIED", obj)
        return self._ok("job_status")

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> writes.Result:
        return self._ok("pool_status")

    async def patch_status(
        self, plural: str, name: str, status: Mapping[str, Any], *, namespace: str = ""
    ) -> writes.Result:
        return self._ok(f"{plural}_status")

    async def post_event(self, obj: Any, **_: Any) -> writes.Result:
        return self._ok("event", 201)

    async def put_configmap(self, namespace: str, name: str, **_: Any) -> writes.Result:
        return self._ok("configmap")

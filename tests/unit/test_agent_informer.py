"""List-then-watch reads of the agents (walras.kube.agents.Informer over walras.kube.watch.
CollectionWatch, walras.agent.runner.SharedReads) and the aggregator's change trigger, against a
scripted fake connection pool (no cluster).

Oracle: the objects the fake API's LIST and WATCH events describe, applied by hand.
"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from prometheus_client import CollectorRegistry, generate_latest

from walras.agent import aggregator, metrics, runner
from walras.core.totals import TOTALS_NAME
from walras.kube.agents import ALLOCATIONS, JOBS, NODES, Informer, Kube


def _obj(name: str, rv: int, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "status": status}


class _Response:
    """What urllib3 answers: a status, and a body read whole or streamed in chunks."""

    def __init__(
        self, status: int = 200, *, data: dict[str, Any] | None = None, events: list[Any] = ()
    ) -> None:
        self.status = status
        self.data = json.dumps(data or {}).encode()
        # Events split across chunks at odd places, as a chunked HTTP stream may deliver them.
        text = "".join(json.dumps(e) + "\n" for e in events).encode()
        self._chunks = [text[i : i + 7] for i in range(0, len(text), 7)]
        self.released = False

    def read(self) -> bytes:
        return self.data

    def stream(self, amt: Any = None, decode_content: bool = True) -> Any:
        yield from self._chunks

    def release_conn(self) -> None:
        self.released = True


class _Api:
    """An ApiClient whose connection pool answers LISTs from ``lists`` in turn and plays the
    next script of ``watches`` for each WATCH; ``calls`` records each request's path and query."""

    def __init__(
        self, lists: list[dict[str, Any] | int], watches: list[list[Any]], stop: Any
    ) -> None:
        self.lists, self.watches, self.stop = lists, watches, stop
        self.calls: list[dict[str, str]] = []
        self.default_headers: dict[str, str] = {}
        self.configuration = SimpleNamespace(host="https://fake", auth_settings=dict)
        self.rest_client = SimpleNamespace(pool_manager=SimpleNamespace(request=self.request))

    def request(self, method: str, url: str, **_: Any) -> _Response:
        parts = urlsplit(url)
        self.calls.append({"path": parts.path, **dict(parse_qsl(parts.query))})
        if self.calls[-1].get("watch"):
            if not self.watches:
                self.stop.set()
                return _Response()
            return _Response(events=self.watches.pop(0))
        answer = self.lists.pop(0)
        if isinstance(answer, int):  # a refusal
            if not self.lists:
                self.stop.set()
            return _Response(answer)
        return _Response(data=answer)


def _kube(api: _Api) -> Kube:
    kube = Kube.__new__(Kube)
    kube.api_client = api
    kube._lock = threading.Lock()
    kube.reads = kube.writes = 0
    return kube


def test_informer_lists_then_applies_watch_events_and_relists_on_gone() -> None:
    stop = threading.Event()
    first_list = {"metadata": {"resourceVersion": "5"}, "items": [_obj("a", 3), _obj("b", 4)]}
    second_list = {"metadata": {"resourceVersion": "20"}, "items": [_obj("c", 19)]}
    watch_1 = [
        {"type": "MODIFIED", "object": _obj("a", 6, x=1)},
        {"type": "DELETED", "object": _obj("b", 7)},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}},
    ]
    watch_2 = [{"type": "ADDED", "object": _obj("d", 21)}]
    api = _Api([first_list, second_list], [watch_1, watch_2], stop)
    changes: list[str] = []
    kube = _kube(api)
    informer = Informer(kube, ALLOCATIONS, on_change=changes.append)
    informer.run(stop)
    # After the 410 the informer listed again (c only) and watched from version 20.
    assert [i["metadata"]["name"] for i in informer.items()] == ["c", "d"]
    assert informer.version == "21"
    assert {c["path"] for c in api.calls} == {"/apis/walras.dev/v1alpha1/nodeallocations"}
    watches = [c for c in api.calls if c.get("watch")]
    assert [w["resourceVersion"] for w in watches[:2]] == ["5", "20"]
    assert all(w["allowWatchBookmarks"] == "true" for w in watches)
    # Every request is counted as a read (the benchmark's API requests per agent step).
    assert (kube.reads, kube.writes) == (len(api.calls), 0)
    # Relists report "", events their object; the bookmark changed nothing.
    assert changes == ["", "a", "b", "", "d"]
    assert informer.generation == 5


def test_informer_on_a_kind_it_may_not_list_is_empty_and_synced() -> None:
    stop = threading.Event()
    informer = Informer(_kube(_Api([403], [], stop)), "tenants", optional=True, retry=0.0)
    informer.run(stop)
    assert informer.synced.is_set() and informer.items() == [] and informer.forbidden == 403


def test_an_optional_kind_granted_later_fills_the_cache_and_clears_the_refusal() -> None:
    stop = threading.Event()
    granted = {"metadata": {"resourceVersion": "8"}, "items": [_obj("t", 7)]}
    api = _Api([404, granted], [], stop)
    changes: list[str] = []
    informer = Informer(_kube(api), "tenants", optional=True, retry=0.0, on_change=changes.append)
    informer.run(stop)
    assert [i["metadata"]["name"] for i in informer.items()] == ["t"]
    assert informer.forbidden is None and changes == ["", ""]


def test_a_field_selector_reaches_every_request_of_a_nodes_informer() -> None:
    stop = threading.Event()
    lists = [{"metadata": {"resourceVersion": "1"}, "items": [_obj("n1", 1)]}]
    api = _Api(lists, [], stop)
    nodes = Informer(_kube(api), NODES, field_selector="metadata.name=n1")
    nodes.run(stop)
    assert [c["path"] for c in api.calls] == ["/api/v1/nodes", "/api/v1/nodes"]
    assert all(c["fieldSelector"] == "metadata.name=n1" for c in api.calls)
    assert nodes.get("n1") is not None


def test_watching_reads_wait_for_totals_that_include_the_agents_write() -> None:
    stop = threading.Event()
    totals_v1 = _obj(TOTALS_NAME, 30, tasks={"t": 1.0}, iteration=1, sourceResourceVersion="30")
    reads = runner.SharedReads.__new__(runner.SharedReads)
    informer = Informer(_kube(_Api([], [], stop)), ALLOCATIONS)
    informer.apply({"type": "ADDED", "object": totals_v1})
    reads._informers = {"totals": informer}
    # Our write has version 31: the cached totals (30) are behind; a publish arrives later.
    totals_v2 = _obj(TOTALS_NAME, 33, tasks={"t": 2.0}, iteration=2, sourceResourceVersion="32")
    timer = threading.Timer(0.05, informer.apply, args=({"type": "MODIFIED", "object": totals_v2},))
    timer.start()
    got = reads.totals(31, wait=30.0)  # returns on the event, long before the bound
    timer.join()
    assert got is not None and got.source_version == 32 and got.tasks == {"t": 2.0}
    # Without waiting, the cached (behind) totals come back and the caller skips its step.
    informer.apply({"type": "MODIFIED", "object": totals_v1})
    behind = reads.totals(31)
    assert behind is not None and behind.source_version == 30


def test_aggregator_publishes_on_agent_changes_not_on_its_own() -> None:
    dirty = aggregator._Dirty()
    dirty.mark(TOTALS_NAME)
    assert dirty.wait(0.0) is None
    dirty.mark("node-1")
    dirty.mark("node-2")
    assert dirty.wait(0.0) is not None  # one publish for both
    assert dirty.wait(0.0) is None


def test_metrics_expose_the_processes_api_requests() -> None:
    kube = _kube(_Api([], [], threading.Event()))
    kube.reads, kube.writes = 7, 3
    registry = CollectorRegistry()
    registry.register(metrics._KubeRequests(kube))
    text = generate_latest(registry).decode()
    assert 'walras_agent_api_requests_total{kind="read"} 7.0' in text
    assert 'walras_agent_api_requests_total{kind="write"} 3.0' in text


def test_jobs_informer_feeds_the_columns_generation() -> None:
    stop = threading.Event()
    lists = [{"metadata": {"resourceVersion": "1"}, "items": []}]
    jobs = Informer(_kube(_Api(lists, [[{"type": "ADDED", "object": _obj("j", 2)}]], stop)), JOBS)
    jobs.run(stop)
    assert jobs.generation == 2 and [i["metadata"]["name"] for i in jobs.items()] == ["j"]

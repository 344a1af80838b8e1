"""List-then-watch reads of the agents (walras.kube.agents.Informer, walras.agent.runner.
SharedReads) and the aggregator's change trigger, against a scripted fake API (no cluster).

Oracle: the objects the fake API's LIST and WATCH events describe, applied by hand.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from walras.agent import aggregator, metrics, runner
from walras.core.totals import TOTALS_NAME
from walras.kube.agents import ALLOCATIONS, JOBS, Informer, Kube


def _obj(name: str, rv: int, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "status": status}


class _Response:
    def __init__(self, *, data: dict[str, Any] | None = None, events: list[Any] = ()) -> None:
        self.data = json.dumps(data or {}).encode()
        # Events split across chunks at odd places, as a chunked HTTP stream may deliver them.
        text = "".join(json.dumps(e) + "\n" for e in events).encode()
        self._chunks = [text[i : i + 7] for i in range(0, len(text), 7)]
        self.released = False

    def stream(self, amt: Any = None, decode_content: bool = True) -> Any:
        yield from self._chunks

    def release_conn(self) -> None:
        self.released = True


class _Custom:
    """LIST answers from ``lists`` in turn; each WATCH plays the next script of ``watches``."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[list[Any]], stop: Any) -> None:
        self.lists, self.watches, self.stop = lists, watches, stop
        self.calls: list[dict[str, Any]] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> Any:
        self.calls.append({"plural": plural, **kw})
        if kw.get("watch"):
            if not self.watches:
                self.stop.set()
                return _Response()
            return _Response(events=self.watches.pop(0))
        return _Response(data=self.lists.pop(0))


def _kube(custom: _Custom) -> Kube:
    kube = Kube.__new__(Kube)
    kube.custom = custom  # type: ignore[assignment]  # a scripted fake of CustomObjectsApi
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
    custom = _Custom([first_list, second_list], [watch_1, watch_2], stop)
    changes: list[str] = []
    informer = Informer(_kube(custom), ALLOCATIONS, on_change=changes.append)
    informer.run(stop)
    # After the 410 the informer listed again (c only) and watched from version 20.
    assert [i["metadata"]["name"] for i in informer.items()] == ["c", "d"]
    assert informer.version == "21"
    watches = [c for c in custom.calls if c.get("watch")]
    assert [w["resource_version"] for w in watches[:2]] == ["5", "20"]
    assert all(w["allow_watch_bookmarks"] for w in watches)
    # Relists report "", events their object; the bookmark changed nothing.
    assert changes == ["", "a", "b", "", "d"]
    assert informer.generation == 5


def test_informer_on_a_kind_it_may_not_list_is_empty_and_synced() -> None:
    class _Forbidden(_Custom):
        def list_cluster_custom_object(self, *args: Any, **kw: Any) -> Any:
            from kubernetes.client import ApiException

            self.stop.set()
            raise ApiException(status=403, reason="Forbidden")

    stop = threading.Event()
    informer = Informer(_kube(_Forbidden([], [], stop)), "tenants", optional=True, retry=0.0)
    informer.run(stop)
    assert informer.synced.is_set() and informer.items() == [] and informer.forbidden == 403


def test_watching_reads_wait_for_totals_that_include_the_agents_write() -> None:
    stop = threading.Event()
    totals_v1 = _obj(TOTALS_NAME, 30, tasks={"t": 1.0}, iteration=1, sourceResourceVersion="30")
    reads = runner.SharedReads.__new__(runner.SharedReads)
    informer = Informer(_kube(_Custom([], [], stop)), ALLOCATIONS)
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
    kube = _kube(_Custom([], [], threading.Event()))
    kube.reads, kube.writes = 7, 3
    registry = CollectorRegistry()
    registry.register(metrics._KubeRequests(kube))
    text = generate_latest(registry).decode()
    assert 'walras_agent_api_requests_total{kind="read"} 7.0' in text
    assert 'walras_agent_api_requests_total{kind="write"} 3.0' in text


def test_jobs_informer_feeds_the_columns_generation() -> None:
    stop = threading.Event()
    lists = [{"metadata": {"resourceVersion": "1"}, "items": []}]
    jobs = Informer(
        _kube(_Custom(lists, [[{"type": "ADDED", "object": _obj("j", 2)}]], stop)), JOBS
    )
    jobs.run(stop)
    assert jobs.generation == 2 and [i["metadata"]["name"] for i in jobs.items()] == ["j"]

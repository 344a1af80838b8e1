"""``walras.kube.watch``: ``lines`` (a WATCH stream split into its events, chunk by chunk), the
watch's control flow (410 Gone lists again, other failures resume), and
``handlers.Watcher.apply_listed`` (a LIST's result drops the pods it lacks)."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from walras.core import snapshot
from walras.kube import watch
from walras.operator import cache, handlers


@given(
    st.lists(st.binary(min_size=1, max_size=12).filter(lambda b: b"\n" not in b), max_size=8),
    st.lists(st.integers(min_value=0, max_value=200), max_size=6),
)
def test_lines_gives_every_line_whole_however_the_stream_is_cut(
    events: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(e + b"\n" for e in events)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    batches = list(watch.lines(iter(chunks)))
    flat = [line for batch in batches for line in batch]
    # The oracle: the stream itself, split at its newlines (blank events are skipped).
    assert flat == [e for e in events if e.strip()]
    assert all(batches)  # no empty batch is handed over


def test_lines_keeps_an_unterminated_tail() -> None:
    assert list(watch.lines(iter([b'{"a":1}\n{"b"', b":2}"]))) == [[b'{"a":1}'], [b'{"b":2}']]


class _Rounds:
    """What the watch handler calls on the round loop."""

    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1

    def poke_binds(self) -> None:
        self.pokes += 1


def pod(namespace: str, name: str, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"u-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_a_listing_drops_the_jobs_it_does_not_hold() -> None:
    store = snapshot.Store()
    watcher = handlers.Watcher(cache.ClusterCache(store), _Rounds())

    def job(name: str) -> dict[str, Any]:
        meta = {"namespace": "a", "name": name, "uid": f"u-{name}", "generation": 1}
        return {"metadata": meta, "spec": {"replicas": 1, "throughput": {"g": 1.0}}}

    watcher.apply_listed("job", [{"type": "ADDED", "object": job(j)} for j in "pq"], True)
    assert set(store.jobs) == {("a", "p"), ("a", "q")}
    watcher.apply_listed("job", [{"type": "ADDED", "object": job("q")}], True)
    assert set(store.jobs) == {("a", "q")}


def test_a_listing_drops_the_pods_it_does_not_hold() -> None:
    store = snapshot.Store()
    watcher = handlers.Watcher(cache.ClusterCache(store), _Rounds())
    watcher.apply_listed(
        "pod", [{"type": "ADDED", "object": pod("a", p, "n0")} for p in "xyz"], True
    )
    known = set(store.pods) | set(store.foreign)
    assert known == {("a", "x"), ("a", "y"), ("a", "z")}
    # y was deleted while no watch was open: the next LIST does not have it.
    watcher.apply_listed(
        "pod", [{"type": "ADDED", "object": pod("a", p, "n0")} for p in "xz"], True
    )
    assert set(store.pods) | set(store.foreign) == {("a", "x"), ("a", "z")}
    # A watch batch is applied as is: a DELETED event removes, nothing else does.
    watcher.apply_listed("pod", [{"type": "DELETED", "object": pod("a", "x")}], False)
    assert set(store.pods) | set(store.foreign) == {("a", "z")}


class _Response:
    """What urllib3 answers: a status, and a body read whole or streamed in chunks."""

    def __init__(
        self, status: int, body: bytes = b"", chunks: list[bytes | Exception] | None = None
    ) -> None:
        self.status = status
        self.data = body
        self.chunks = chunks or []

    def read(self) -> bytes:
        return self.data

    def stream(self, amt: Any = None, decode_content: bool = True) -> Any:
        for chunk in self.chunks:
            if isinstance(chunk, Exception):
                raise chunk  # the connection dropped mid-stream
            yield chunk

    def release_conn(self) -> None:
        pass


class _Scripted(watch.CollectionWatch):
    """A CollectionWatch whose requests are answered from a script, one answer per request:
    the control flow (LIST, WATCH, 410, resume) without a server. The protocol itself is
    exercised against the real API server in tests/integration/test_pod_watch.py."""

    def __init__(self, answers: list[_Response], stop: Any) -> None:
        self.got: list[tuple[list[Any], bool]] = []
        super().__init__(object(), "/api/v1/pods", lambda e, listing: self.got.append((e, listing)))
        self.answers = answers
        self.queries: list[dict[str, str]] = []
        self.stop = stop

    def _get(self, query: Any, *, stream: bool, read_timeout: float) -> Any:
        self.queries.append(dict(query))
        if len(self.answers) == 1:
            self.stop.set()  # the last answer: run() returns after it
        return self.answers.pop(0)


def _event(kind: str, name: str, version: str) -> bytes:
    obj = {"metadata": {"namespace": "a", "name": name, "resourceVersion": version}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def _listing(version: str, *names: str) -> _Response:
    items = [{"metadata": {"namespace": "a", "name": n}} for n in names]
    return _Response(
        200, json.dumps({"metadata": {"resourceVersion": version}, "items": items}).encode()
    )


def test_gone_lists_again_and_other_failures_resume_from_the_version() -> None:
    stop = threading.Event()
    scripted = _Scripted(
        [
            _listing("10", "x"),
            _Response(200, chunks=[_event("ADDED", "y", "11"), _event("BOOKMARK", "", "12")]),
            _Response(500, b"overloaded"),  # resumed from 12 after a pause
            _Response(
                200, chunks=[b'{"type":"ERROR","object":{"code":410,"message":"too old"}}\n']
            ),
            _listing("20", "y"),
            _Response(200, chunks=[_event("DELETED", "y", "21")]),
        ],
        stop,
    )
    scripted.retry_seconds = 0.0
    scripted.run(stop)
    watches = [q.get("resourceVersion") for q in scripted.queries if q.get("watch")]
    assert watches == ["10", "12", "12", "20"]
    names = [
        ([e["object"]["metadata"]["name"] for e in events], listing)
        for events, listing in scripted.got
    ]
    assert names == [(["x"], True), (["y"], False), (["y"], True), (["y"], False)]
    assert (scripted.lists, scripted.version) == (2, "21")


class _RecordedStop(threading.Event):
    """A stop event that records each pause asked of it instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses.append(float(timeout or 0.0))
        return self.is_set()


def test_the_back_off_starts_over_once_the_server_answers_again() -> None:
    stop = _RecordedStop()
    outage = [_Response(503, b"down") for _ in range(7)]
    scripted = _Scripted(
        [
            _listing("10", "x"),
            *outage,  # a long outage: pauses 1, 2, 4, 8, 16, 32, 32 (capped at 2^5)
            # Accepted, an event, then the stream breaks (the API server restarted again).
            _Response(200, chunks=[_event("ADDED", "y", "11"), ConnectionResetError("reset")]),
            _Response(200, chunks=[_event("ADDED", "z", "12")]),
        ],
        stop,
    )
    scripted.run(stop)
    # The oracle: the rule in the module docstring, retry_seconds · 2^min(n, 5) after the n-th
    # failure in a row, n counted from zero again once a WATCH was accepted.
    assert stop.pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 32.0, 1.0]
    assert [q.get("resourceVersion") for q in scripted.queries if q.get("watch")][-1] == "11"


def test_a_successful_listing_also_starts_the_back_off_over() -> None:
    stop = _RecordedStop()
    scripted = _Scripted(
        [
            _listing("10", "x"),
            _Response(503, b"down"),
            _Response(503, b"down"),
            _Response(410, b"too old"),  # refused: a relist follows at once, no pause
            _listing("20", "x"),  # the relist succeeds
            _Response(503, b"down"),
            _Response(200, chunks=[_event("ADDED", "z", "21")]),
        ],
        stop,
    )
    scripted.run(stop)
    assert stop.pauses == [1.0, 2.0, 1.0]


def test_a_refused_listing_is_empty_for_an_optional_kind_and_a_failure_otherwise() -> None:
    stop = _RecordedStop()
    optional = _Scripted(
        [_Response(403, b"forbidden"), _listing("5", "t"), _Response(200, chunks=[])], stop
    )
    optional.optional, optional.refused_retry = True, 7.0
    optional.run(stop)
    # An empty listing (every object it held is gone), the refusal's own pause, then the grant.
    assert optional.got[0] == ([], True)
    assert stop.pauses == [7.0] and optional.refused is None and optional.lists == 1

    stop = _RecordedStop()
    required = _Scripted([_Response(403, b"forbidden"), _listing("5", "t"), _Response(200)], stop)
    required.run(stop)
    assert [listing for _, listing in required.got] == [True]  # only the granted listing
    assert stop.pauses == [1.0]  # the back-off's first pause

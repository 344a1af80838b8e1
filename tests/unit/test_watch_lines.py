"""``walras.kube.watch.lines`` (a WATCH stream split into its events, chunk by chunk) and
``handlers.Watcher.apply_pods`` (a LIST's result drops the pods it lacks)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from walras.core import snapshot
from walras.kube import watch
from walras.operator import handlers, loop


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
        self.facts = loop.Facts()
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


def test_a_listing_drops_the_pods_it_does_not_hold() -> None:
    store = snapshot.Store()
    watcher = handlers.Watcher(store, _Rounds())  # type: ignore[arg-type]  # duck-typed stand-in
    watcher.apply_pods([{"type": "ADDED", "object": pod("a", p, "n0")} for p in "xyz"], True)
    known = set(store.pods) | set(store.foreign)
    assert known == {("a", "x"), ("a", "y"), ("a", "z")}
    # y was deleted while no watch was open: the next LIST does not have it.
    watcher.apply_pods([{"type": "ADDED", "object": pod("a", p, "n0")} for p in "xz"], True)
    assert set(store.pods) | set(store.foreign) == {("a", "x"), ("a", "z")}
    # A watch batch is applied as is: a DELETED event removes, nothing else does.
    watcher.apply_pods([{"type": "DELETED", "object": pod("a", "x")}], False)
    assert set(store.pods) | set(store.foreign) == {("a", "z")}

"""One way to watch: every kind the operator follows goes through ``walras.kube.watch.
CollectionWatch`` (``walras.operator.handlers.watch_all``), none through kopf.

Oracles: kopf's own registry (which handlers exist), the kinds the store holds
(``walras.core.snapshot.Store``), and the objects a listing names.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
from typing import Any

import kopf
import pytest

from walras.core import snapshot
from walras.operator import cache, handlers, main


def test_kopf_watches_no_kind_in_either_entry_point() -> None:
    importlib.import_module("walras.operator.kopf_entry")
    registry = kopf.get_default_registry()
    assert not registry._watching.get_all_handlers()
    assert not registry._changing.get_all_handlers()
    assert not registry._spawning.get_all_handlers()
    assert not registry._webhooks.get_all_handlers()
    # What kopf does run there: its login, and the startup and cleanup that start Walras's parts.
    assert registry._activities.get_all_handlers()


def test_every_kind_of_the_store_is_watched_and_listed_at_start_up() -> None:
    assert set(handlers.WATCHED) == set(handlers.KINDS)
    assert {k: p for k, (p, _) in handlers.kinds_paths().items()} == handlers.WATCHED


class _Rounds:
    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1

    def poke_binds(self) -> None:
        pass


def _pool(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 1}, "spec": {"selector": {}}}


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4"}}}


def _tenant(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 1}, "spec": {"namespaces": [name]}}


def _priority_class(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "value": 10}


def test_a_listing_drops_the_cluster_scoped_objects_it_does_not_hold() -> None:
    rounds = _Rounds()
    watcher = handlers.Watcher(cache.ClusterCache(snapshot.Store()), rounds)
    kinds = (
        ("pool", _pool),
        ("node", _node),
        ("tenant", _tenant),
        ("priorityclass", _priority_class),
    )
    for kind, make in kinds:
        added = [{"type": "ADDED", "object": make(n)} for n in ("a", "b")]
        watcher.apply_listed(kind, added, False)
        # A relist after a gap: "a" was deleted while no watch was open.
        watcher.apply_listed(kind, [{"type": "ADDED", "object": make("b")}], True)
    store = watcher.store
    held = (list(store.pools), list(store.nodes), list(store.tenants), list(store.priority_classes))
    assert held == (["b"], ["b"], ["b"], ["b"])
    assert rounds.pokes >= 3 * len(kinds)  # two new objects and one deletion per kind each wake
    assert store.freeze(now=0.0).priority_classes["b"].value == 10


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_walras_operator_stops_on_sigterm_and_sigint_without_kopf(number: int) -> None:
    """kopf no longer runs in ``walras operator``, so its signal handling is the operator's own."""

    async def scenario() -> bool:
        flag = asyncio.Event()
        main.stop_on_signals(flag)
        signal.raise_signal(number)
        # The handler runs on the loop's next turn; the timeout only guards against a hang.
        await asyncio.wait_for(flag.wait(), timeout=60)
        return flag.is_set()

    assert asyncio.run(scenario())

"""The start-up guard of the round loop (walras.operator.handlers.Readiness), no cluster needed.

Oracle: what the watches delivered. The round loop may start once every watched kind's first
complete listing is in the store, and not before: in particular not before the pods' listing,
whose foreign pods (made by other controllers) take room on the nodes the first round plans on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from walras.core import snapshot
from walras.operator import cache, handlers


class _Rounds:
    def poke(self) -> None:
        pass

    def poke_binds(self) -> None:
        pass


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}


def _foreign_pod(name: str, node: str) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": "3"}}}
    return {
        "metadata": {"namespace": "kube-system", "name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running"},
    }


def _added(obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ADDED", "object": obj}


def test_ready_only_after_every_kind_delivered_a_listing() -> None:
    readiness = handlers.Readiness(["node", "pod"])
    watcher = handlers.Watcher(cache.ClusterCache(snapshot.Store()), _Rounds(), readiness)
    states = [readiness.ready()]
    watcher.apply_listed("node", [_added(_node("n1"))], True)
    states.append(readiness.ready())
    # Watch events that are not a listing (the stream after one) do not make the kind listed.
    watcher.apply_listed("pod", [_added(_foreign_pod("agent", "n1"))], False)
    states.append(readiness.ready())
    watcher.apply_listed("pod", [_added(_foreign_pod("agent", "n1"))], True)
    states.append(readiness.ready())
    assert states == [False, False, False, True]
    # What the first round then sees: the foreign pod, whose requests count on its node.
    assert ("kube-system", "agent") in watcher.store.foreign


def test_an_empty_listing_counts_and_nothing_watched_is_ready_at_once() -> None:
    readiness = handlers.Readiness(["priorityclass"])
    watcher = handlers.Watcher(cache.ClusterCache(snapshot.Store()), _Rounds(), readiness)
    assert not readiness.ready()
    # A refused optional kind (walras.kube.watch) and an empty cluster both deliver [].
    watcher.apply_listed("priorityclass", [], True)
    assert readiness.ready()
    assert handlers.Readiness([]).ready()


def test_the_first_round_waits_for_the_pods_listing_and_says_which_kind_it_waits_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[bool, bool]:
        readiness = handlers.Readiness(handlers.WATCHED, report_every=0.05)
        watcher = handlers.Watcher(cache.ClusterCache(snapshot.Store()), _Rounds(), readiness)
        for kind in handlers.WATCHED:
            if kind != "pod":
                watcher.apply_listed(kind, [], True)
        waiter = asyncio.ensure_future(readiness.wait())
        await asyncio.sleep(0.2)  # four report periods: the wait must still be going on
        early = waiter.done()
        watcher.apply_listed("pod", [], True)
        await asyncio.wait_for(waiter, timeout=5)
        return early, readiness.ready()

    with caplog.at_level(logging.WARNING, logger="walras.operator.handlers"):
        assert asyncio.run(scenario()) == (False, True)
    waits = [r.getMessage() for r in caplog.records if "first listing" in r.getMessage()]
    assert waits and all(m.endswith("of pod before the first round") for m in waits), waits

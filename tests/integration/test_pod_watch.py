"""``walras.kube.watch.CollectionWatch`` against the real API server: the LIST, then every change
in order (created, modified, deleted), and a watch resumed from its resourceVersion that gets
what happened meanwhile without listing again."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest
from operator_helpers import wait_for

from walras.kube import watch
from walras.operator import main
from walras.testing import devcluster

pytestmark = pytest.mark.slow


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[list[Mapping[str, Any]], bool]] = []
        self.lock = threading.Lock()

    def __call__(self, events: list[Mapping[str, Any]], listing: bool) -> None:
        with self.lock:
            self.batches.append((list(events), listing))

    def events(self) -> list[tuple[str, str, bool]]:
        with self.lock:
            return [
                (str(e["type"]), str(e["object"]["metadata"]["name"]), listing)
                for batch, listing in self.batches
                for e in batch
            ]


def started(
    client: Any, path: str, version: str | None = None
) -> tuple[watch.CollectionWatch, Recorder, threading.Event]:
    """A CollectionWatch of ``path`` running in its thread (from ``version``, if given)."""
    seen = Recorder()
    stop = threading.Event()
    collection = watch.CollectionWatch(client, path, seen)
    collection.version = version
    collection.start(stop)
    return collection, seen, stop


def test_list_then_every_change_in_order(
    control_plane: devcluster.ControlPlane, kube: Any, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    devcluster.request(kube, "POST", pods, body=pod("before"))
    client = main.watch_client(control_plane.admin_kubeconfig)
    watcher, seen, stop = started(client, pods)
    try:
        wait_for(seen.events, 30, "the LIST")
        assert seen.events() == [("ADDED", "before", True)]
        devcluster.request(kube, "POST", pods, body=pod("after"))
        devcluster.request(
            kube,
            "PATCH",
            f"{pods}/after",
            body={"metadata": {"labels": {"x": "1"}}},
            content_type="application/merge-patch+json",
        )
        devcluster.request(kube, "DELETE", f"{pods}/after", body={"gracePeriodSeconds": 0})
        wait_for(lambda: ("DELETED", "after", False) in seen.events(), 30, "the deletion")
        got = seen.events()
        assert got[:3] == [
            ("ADDED", "before", True),
            ("ADDED", "after", False),
            ("MODIFIED", "after", False),  # the label
        ]
        # Then its deletion: possibly a MODIFIED (deletionTimestamp set) before the DELETED.
        assert got[-1] == ("DELETED", "after", False)
        assert set(got[3:-1]) <= {("MODIFIED", "after", False)}
        assert (watcher.lists, watcher.version is not None) == (1, True)
    finally:
        stop.set()
        client.close()


def test_a_watch_resumed_from_its_version_gets_what_it_missed_without_a_list(
    control_plane: devcluster.ControlPlane, kube: Any, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    devcluster.request(kube, "POST", pods, body=pod("old"))
    client = main.watch_client(control_plane.admin_kubeconfig)
    watcher, first, stop = started(client, pods)
    wait_for(first.events, 30, "the LIST")
    stop.set()  # the first watch ends (at its next chunk or its timeout); nothing more is read
    version = watcher.version  # before the change: that watch may still see it and move on
    devcluster.request(kube, "POST", pods, body=pod("missed"))
    later, resumed, again = started(client, pods, version=version)
    try:
        wait_for(resumed.events, 30, "the missed pod")
        assert resumed.events() == [("ADDED", "missed", False)]
        assert later.lists == 0
    finally:
        again.set()
        client.close()

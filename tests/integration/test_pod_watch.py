"""``walras.kube.watch.CollectionWatch`` against the real API server: the LIST, then every change
in order (created, modified, deleted), and a watch resumed from its resourceVersion that gets
what happened meanwhile without listing again."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

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


def wait_until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_list_then_every_change_in_order(
    control_plane: devcluster.ControlPlane, kube: Any, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    devcluster.request(kube, "POST", pods, body=pod("before"))
    client = main.watch_client(control_plane.admin_kubeconfig)
    seen = Recorder()
    stop = threading.Event()
    watcher = watch.CollectionWatch(client, pods, seen)
    watcher.start(stop)
    try:
        wait_until(lambda: seen.events(), "the LIST")
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
        wait_until(lambda: ("DELETED", "after", False) in seen.events(), "the deletion")
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
    first = Recorder()
    stop = threading.Event()
    watcher = watch.CollectionWatch(client, pods, first)
    watcher.start(stop)
    wait_until(lambda: first.events(), "the LIST")
    stop.set()  # the first watch ends (at its next chunk or its timeout); nothing more is read
    version = watcher.version
    devcluster.request(kube, "POST", pods, body=pod("missed"))
    resumed = Recorder()
    again = threading.Event()
    later = watch.CollectionWatch(client, pods, resumed)
    later.version = version
    later.start(again)
    try:
        wait_until(lambda: resumed.events(), "the missed pod")
        assert resumed.events() == [("ADDED", "missed", False)]
        assert later.lists == 0
    finally:
        again.set()
        client.close()

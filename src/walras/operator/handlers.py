"""Watch handlers: keep the in-memory indexes current and wake the round loop.

Every kind the operator follows (FungibleJobs, Pods, ResourcePools, Nodes, Tenants,
PriorityClasses) comes from
Walras's one LIST-then-WATCH mechanism (``walras.kube.watch.CollectionWatch``), a thread per kind
started by ``watch_all``: no kopf handler. kopf's per-object machinery (a deep copy, a diff and a
handler dispatch per event) would run for every event, and pods and jobs (a job's own status
patches come back as events too) make most of a large round's traffic. The batches run on the
event loop, so they never race the round loop. The handlers never call the API and never patch
the object: every write belongs to the round loop.

They write into the cluster cache (:class:`walras.operator.cache.ClusterCache`): the store, and
beside it the facts a parsed view drops: each pod's controller FungibleJob uid (ownership),
whether it carries a ``DisruptionTarget`` condition, and each job's ``spec.backoffLimit``.

Wake-ups: a job created, deleted or edited (generation), a pool, Tenant or PriorityClass
changed, a node added, removed or changing readiness, and a Walras pod finishing run an
incremental round; a pod going away lets queued bindings proceed. Status-only updates (our own
patches) wake nothing.

``Readiness`` holds the round loop back until the watch of every kind has delivered its first
complete listing, so the operator never mistakes "not listed yet" for "missing" or "free" and
plans against a partial view.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from walras.core import adapters, crd, governance, priorities, snapshot
from walras.kube import watch
from walras.operator import cache

logger = logging.getLogger("walras.operator.handlers")

KINDS = ("job", "pool", "node", "pod", "tenant", "priorityclass")


class Readiness:
    """Ready once the watch of every kind has delivered its first complete listing.

    This is client-go's ``HasSynced``: a LIST gives every object that exists at one
    resourceVersion, delivered in one batch (``walras.kube.watch``), so once each kind's listing
    is in the store the first round sees the whole cluster. Every kind counts, foreign pods too:
    a pod Walras did not create still takes cpu, memory and GPUs on its node, and a round planned
    before the pods' listing arrived would place gangs where they cannot be bound (they would
    wait in the queue and be planned again rounds later). An object deleted before the listing
    is simply absent from it, so nothing waits for objects that are gone.

    There is no deadline: planning against part of the cluster is exactly what this prevents,
    and a kind whose LIST keeps failing is retried by its watch (with back-off) while ``/readyz``
    says not ready. ``wait`` logs the kinds still missing every ``report_every`` seconds.

    Why not kopf's own facilities, from when kopf watched some kinds (kopf 1.45, read in its
    source); they would still apply if a kind moved back under kopf:

    - ``@kopf.index``: with an index on a kind, kopf holds every other handler back until the
      initial listings of all indexed kinds went through the index handlers (an internal
      ``ToggleSet`` in ``kopf._core.reactor.orchestration``). Nothing public exposes that moment:
      its only visible effect is that resource handlers start to run. The round loop and
      ``/readyz`` run outside any handler, and when no watched object exists no handler ever
      runs, so "some handler ran" cannot be the signal; after the gate the per-object workers
      run their ``on.event`` handlers concurrently in no set order, so the first call does not
      mean the store holds the rest.
    - kopf's probes (``--liveness``, ``@kopf.on.probe``) answer liveness from kopf's own server
      and know nothing of the listings; readiness here also needs leadership and a healthy round
      loop, served with the metrics by ``walras.operator.health``.
    """

    def __init__(self, kinds: Iterable[str], report_every: float = 30.0) -> None:
        self.unlisted: set[str] = set(kinds)
        self.report_every = report_every
        self._event = asyncio.Event()
        self._check()

    def listed(self, kind: str) -> None:
        """The watch of ``kind`` applied a complete listing to the store."""
        self.unlisted.discard(kind)
        self._check()

    def _check(self) -> None:
        if not self.unlisted:
            self._event.set()

    def ready(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        start = time.monotonic()
        while not self.ready():
            try:
                await asyncio.wait_for(self._event.wait(), timeout=self.report_every)
            except TimeoutError:
                logger.warning(
                    "waiting %.0f s for the first listing of %s before the first round",
                    time.monotonic() - start,
                    ", ".join(sorted(self.unlisted)),
                )


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _generation(obj: Mapping[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)


def controller_uid(obj: Mapping[str, Any]) -> str:
    """The uid of a pod's controller FungibleJob, when that is the job its label names; else ''.

    Only such pods are Walras's (``walras.core.admission``): a label alone proves nothing.
    """
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    job = str(labels.get(crd.LABEL_JOB) or "")
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion") or "").split("/", 1)[0]
        if group == crd.GROUP and ref.get("kind") == crd.JOB_KIND and ref.get("name") == job:
            return str(ref.get("uid") or "")
        if group == "batch" and ref.get("kind") == "Job":
            # A pod of an adopted workload (walras.operator.adoption): its Job made it from the
            # template Walras started, which names the mirror FungibleJob by uid.
            return str(labels.get(adapters.base.LABEL_MIRROR_UID) or "")
    return ""


def disrupted(obj: Mapping[str, Any]) -> bool:
    """The pod carries ``DisruptionTarget=True`` (preempted, evicted, deleted: not a failure)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "DisruptionTarget":
            return c.get("status") == "True"
    return False


def backoff_limit(obj: Mapping[str, Any]) -> int:
    """``spec.backoffLimit`` (default 3; the schema bounds it)."""
    value = (obj.get("spec") or {}).get("backoffLimit")
    try:
        return max(0, int(value)) if value is not None else 3
    except (TypeError, ValueError):
        return 3


class Rounds(Protocol):
    """What the handlers wake: the round loop (``walras.operator.loop.RoundLoop``)."""

    def poke(self) -> None: ...

    def poke_binds(self) -> None: ...


class Watcher:
    """Applies watch events to the cluster cache and pokes the round loop."""

    def __init__(
        self, cluster: cache.ClusterCache, rounds: Rounds, readiness: Readiness | None = None
    ) -> None:
        self.cluster = cluster
        self.rounds = rounds
        self.readiness = readiness

    @property
    def store(self) -> snapshot.Store:
        return self.cluster.store

    def apply_listed(self, kind: str, events: list[Mapping[str, Any]], listing: bool) -> None:
        """A batch of events of one ``WATCHED`` kind from ``watch_all``; a listing (every
        object that exists) first drops those it lacks: deleted while no watch was open."""
        if listing:
            listed = {_key(e.get("object") or {}) for e in events}
            known = self._known(kind)
            for key in sorted(known - listed):
                gone = {"metadata": {"namespace": key[0], "name": key[1]}}
                self.apply(kind, {"type": "DELETED", "object": gone})
        for event in events:
            self.apply(kind, event)
        if listing and self.readiness is not None:
            self.readiness.listed(kind)

    def _known(self, kind: str) -> set[tuple[str, str]]:
        """The keys of ``kind`` the store holds (cluster-scoped kinds: namespace "")."""
        store = self.store
        if kind == "pod":
            return set(store.pods.keys() | store.foreign.keys())
        if kind == "job":
            return set(store.jobs)
        names: dict[str, set[str]] = {
            "pool": set(store.pools),
            "node": set(store.nodes),
            "tenant": set(store.tenants),
            "priorityclass": set(store.priority_classes),
        }
        return {("", name) for name in names[kind]}

    def apply(self, kind: str, event: Mapping[str, Any]) -> None:
        obj = event.get("object") or {}
        etype = event.get("type")
        key = _key(obj)
        facts = self.cluster.facts
        if etype == "DELETED":
            self.store.delete(kind, *key)
            if kind == "pod":
                facts.owner.pop(key, None)
                facts.disrupted.discard(key)
                self.rounds.poke_binds()
            if kind == "job":
                facts.backoff.pop(key, None)
            if kind in ("job", "pool", "node", "tenant", "priorityclass"):
                self.rounds.poke()
            return
        if kind in ("tenant", "priorityclass"):
            self.store.upsert(kind, obj)
            self.rounds.poke()
            return
        if kind == "pod":
            owner = controller_uid(obj)
            if owner:
                facts.owner[key] = owner
            else:
                facts.owner.pop(key, None)
            if disrupted(obj):
                facts.disrupted.add(key)
            else:
                facts.disrupted.discard(key)
        if kind == "job":
            facts.backoff[key] = backoff_limit(obj)
        if kind == "job":
            prev = self.store.jobs.get(key)
            self.store.upsert(kind, obj)
            if prev is None or prev.generation != _generation(obj):
                self.rounds.poke()
        elif kind == "pool":
            prev_pool = self.store.pools.get(key[1])
            self.store.upsert(kind, obj)
            if prev_pool is None or prev_pool.generation != _generation(obj):
                self.rounds.poke()
        elif kind == "node":
            prev_node = self.store.nodes.get(key[1])
            self.store.upsert(kind, obj)
            node = self.store.nodes[key[1]]
            if (
                prev_node is None
                or prev_node.ready != node.ready
                or prev_node.schedulable != node.schedulable
                or prev_node.labels != node.labels
                or prev_node.allocatable != node.allocatable
            ):
                self.rounds.poke()
        else:
            prev_pod = self.store.pods.get(key)
            self.store.upsert(kind, obj)
            pod = self.store.pods.get(key)
            if pod is None:
                return
            if prev_pod is None or prev_pod.steps_done != pod.steps_done:
                # A new start or a new reading: restart costs are timed as the watch sees them.
                self.cluster.observe_restart(key)
            if pod.terminating and (prev_pod is None or not prev_pod.terminating):
                self.rounds.poke_binds()
            if pod.finished and (prev_pod is None or not prev_pod.finished):
                self.rounds.poke()
            if prev_pod is None and not pod.node and adapters.base.ANN_NODES in _annotations(obj):
                # A started workload's controller made this pod: bind its gang soon.
                self.rounds.poke()


# Every kind the operator follows, by its collection path: one CollectionWatch each. A new kind
# is one line here, its case in ``Watcher.apply`` (and ``Store``); its start-up probe in
# ``kinds_paths`` and the wait for its first listing (``Readiness``) follow from it.
WATCHED = {
    "job": f"/apis/{crd.GROUP}/{crd.VERSION}/{crd.JOB_PLURAL}",
    "pool": f"/apis/{crd.GROUP}/{crd.VERSION}/{crd.POOL_PLURAL}",
    "node": "/api/v1/nodes",
    "pod": "/api/v1/pods",
    "tenant": f"/apis/{crd.GROUP}/{crd.VERSION}/{governance.TENANT_PLURAL}",
    "priorityclass": priorities.PRIORITY_CLASS_PATH,
}
# Kinds whose LIST may be refused (403: a ClusterRole from before the kind was read, during an
# upgrade) without stopping the operator: an empty collection, said once, listed again later.
# Without PriorityClasses every job is scheduled as the default class.
OPTIONAL = frozenset({"priorityclass"})


def watch_all(
    api_client: Any, watcher: Watcher, stop: threading.Event
) -> list[watch.CollectionWatch]:
    """Start a LIST-then-WATCH thread per ``WATCHED`` kind; their batches run on the calling
    event loop (``Watcher.apply_listed``) until ``stop`` is set. ``api_client``: one of their own
    (a WATCH holds a connection for minutes)."""
    event_loop = asyncio.get_running_loop()
    started = []
    for kind, path in WATCHED.items():

        def deliver(events: list[Mapping[str, Any]], listing: bool, kind: str = kind) -> None:
            if stop.is_set():
                return
            try:
                event_loop.call_soon_threadsafe(watcher.apply_listed, kind, events, listing)
            except RuntimeError:  # the event loop closed at shutdown
                stop.set()

        collection = watch.CollectionWatch(api_client, path, deliver, optional=kind in OPTIONAL)
        collection.start(stop)
        started.append(collection)
    return started


def kinds_paths() -> dict[str, tuple[str, str]]:
    """Collection path and label selector of each watched kind, for the start-up probe
    (``walras.operator.main.Operator.readiness``: one object of each is enough to know the LIST
    is granted; the pods' selector keeps that page small on a large cluster)."""
    selectors = {"pod": crd.LABEL_JOB}
    return {kind: (path, selectors.get(kind, "")) for kind, path in WATCHED.items()}

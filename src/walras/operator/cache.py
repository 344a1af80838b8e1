"""The operator's cluster cache: what the watches delivered, and the binds assumed in flight.

One owner for two kinds of facts:

- **Watched.** ``store`` holds the parsed pods, nodes, jobs, pools and tenants
  (:class:`walras.core.snapshot.Store`); ``facts`` (:class:`walras.core.admission.Facts`) holds
  what a parsed view drops (each pod's
  controller FungibleJob uid, its ``DisruptionTarget`` condition, each job's
  ``spec.backoffLimit``). Only the watch handlers (``walras.operator.handlers``) write them.
- **Assumed.** A pod the operator bound, or created bound, counts on its node from that moment
  until the watch shows it bound: kube-scheduler's assume-then-bind. Without it the next
  bind-time fit check would see the node emptier than it is and hand it a pod it has no room for.
  An assumed pod the watch never shows (deleted before its creation was delivered) is forgotten
  after ``ASSUME_TTL_S``.

- **Restarts.** ``restarts`` (:class:`walras.core.restarts.Tracker`) measures each job's restart
  cost and steps lost from its pods' creation times and progress readings. It is fed from the
  pod watch as readings change (:meth:`ClusterCache.observe_restart`), so a cost is late by the
  watch's delay, not by a round; forked jobs (whose copies count from zero) are not measured.

The bind-time fit check lives here because it reads nothing else: a whole gang fits when each
node exists and is not cordoned, and every resource each member requests fits next to every pod
on the node (Walras's and foreign ones, those being deleted included) and every assumed one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from walras.core import admission, crd, filters, model, restarts, snapshot
from walras.operator import metrics

# How long an assumed pod the watch never delivered still counts on its node.
ASSUME_TTL_S = 10.0


@dataclass(slots=True)
class PendingBind:
    """One pod of a gang to bind: where, how many GPUs, and the job it belongs to."""

    namespace: str
    name: str
    node: str
    gpus: int
    job: str = ""


@dataclass(frozen=True, slots=True)
class Assumed:
    """A pod bound by this process that the watch has not shown bound yet."""

    node: str
    requests: dict[str, float]
    since: float  # time.monotonic() when bound
    job: model.JobKey


Fit = list[tuple[PendingBind, dict[str, float]]]


class ClusterCache:
    """The watched objects, the facts beside them, and the pods assumed bound."""

    def __init__(
        self, store: snapshot.Store | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store if store is not None else snapshot.Store()
        self.facts = admission.Facts()
        self.assumed: dict[model.JobKey, Assumed] = {}
        self.restarts = restarts.Tracker()
        # The rounds' clock (a simulated one in the same-code-path test): restart costs are
        # differences of pod creation times and of this clock's readings.
        self.clock = clock

    def observe_restart(self, key: model.JobKey) -> None:
        """Feed one pod's creation and progress reading to the restart tracker (watch event)."""
        pod = self.store.pods.get(key)
        if pod is None or not pod.job:
            return
        job = self.store.jobs.get(pod.job_key)
        if not isinstance(job, model.JobSpec) or job.forkable or job.finished:
            return
        if self.facts.owner.get(key) != job.uid:
            return  # not (or not yet known to be) Walras's pod of this job
        self.observe_job(job, [pod], self.clock())

    def observe_job(
        self, job: model.JobSpec, pods: Iterable[model.PodInfo], now: float
    ) -> list[restarts.Sample]:
        """Feed a job's pods to the restart tracker; counts the samples it took in the metrics."""
        samples = self.restarts.observe(job.uid, list(pods), now, status=job.status)
        for sample in samples:
            metrics.RESTART_SECONDS.labels(tenant=job.tenant).observe(sample.seconds)
            if sample.steps_lost:
                metrics.STEPS_LOST.labels(tenant=job.tenant).inc(sample.steps_lost)
        return samples

    def owns(self, pod: model.PodInfo, job_uids: dict[model.JobKey, str]) -> bool:
        """Walras's pod: its controller is the live FungibleJob it is labelled with (same uid)."""
        return admission.owns(pod, job_uids, self.facts)

    def assume(
        self, job: model.JobKey, pods: Iterable[tuple[PendingBind, dict[str, float]]]
    ) -> None:
        """Count pods bound just now on their nodes until the watch shows them bound."""
        now = time.monotonic()
        for b, requests in pods:
            self.assumed[(b.namespace, b.name)] = Assumed(b.node, requests, now, job)

    def forget(self, pod: model.JobKey) -> None:
        """The bind did not hold (its gang is being removed): the pod no longer counts."""
        self.assumed.pop(pod, None)

    def node_usage(self) -> dict[str, dict[str, float]]:
        """Per node, every resource requested by the pods on it (Walras's and foreign ones, those
        being deleted included) and by assumed pods, plus their count under ``"pods"``."""
        now = time.monotonic()
        for key, assumed in list(self.assumed.items()):
            pod = self.store.pods.get(key)
            if (pod is not None and pod.node) or (
                pod is None and now - assumed.since > ASSUME_TTL_S
            ):
                del self.assumed[key]
        usage = snapshot.node_usage([*self.store.pods.values(), *self.store.foreign.values()])
        for assumed in self.assumed.values():
            filters.add_usage(usage.setdefault(assumed.node, {}), assumed.requests)
        return usage

    def bound_nodes(self) -> dict[model.JobKey, list[str]]:
        """Per job, the node of each live pod: seen bound, or assumed bound (also when the watch
        has not delivered the pod's creation yet)."""
        index: dict[model.JobKey, list[str]] = {}
        for pod_key, pod in self.store.pods.items():
            if pod.terminating or pod.finished:
                continue
            assumed = self.assumed.get(pod_key)
            node = pod.node or (assumed.node if assumed is not None else "")
            if node:
                index.setdefault(pod.job_key, []).append(node)
        for pod_key, assumed in self.assumed.items():
            if pod_key not in self.store.pods:
                index.setdefault(assumed.job, []).append(assumed.node)
        return index

    def resource_name(self, node: model.NodeInfo) -> str:
        """The GPU resource of the node's pool (the default one outside every pool)."""
        pool = snapshot.node_pool(node, sorted(self.store.pools.values(), key=lambda p: p.name))
        return pool.resource_name if pool else crd.DEFAULT_RESOURCE_NAME

    def requests(self, key: model.JobKey, b: PendingBind) -> dict[str, float]:
        """What one pod to bind requests: its own spec once the watch has it, else its job's."""
        pod = self.store.pods.get((b.namespace, b.name))
        if pod is not None:
            return dict(pod.requests)
        node = self.store.nodes.get(b.node)
        resource = self.resource_name(node) if node is not None else crd.DEFAULT_RESOURCE_NAME
        job = self.store.jobs.get(key)
        if isinstance(job, model.JobSpec):
            requests = job.pod_requests(resource)
            requests[resource] = float(b.gpus)
            return requests
        return {resource: float(b.gpus)}

    def gang_fit(
        self, key: model.JobKey, gang: list[PendingBind], usage: dict[str, dict[str, float]]
    ) -> Fit | None:
        """The bind-time check for one whole gang (module docstring): ``None`` when a node is gone
        or cordoned, ``[]`` when some resource does not fit now, else each pod with its requests
        (and ``usage`` then counts them)."""
        nodes = [self.store.nodes.get(b.node) for b in gang]
        if any(n is None or not filters.unschedulable(n, ()).ok for n in nodes):
            return None
        wanted = [(b, self.requests(key, b)) for b in gang]
        trial = {n: dict(usage.get(n, {})) for n in {b.node for b in gang}}
        for b, requests in wanted:
            node = self.store.nodes[b.node]
            if not filters.resource_fit(requests, node.allocatable, trial[b.node]).ok:
                return []
            filters.add_usage(trial[b.node], requests)
        usage.update(trial)
        return wanted

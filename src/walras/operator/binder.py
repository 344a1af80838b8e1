"""The gang binder: carry out a round's realisation as pod deletes, creates and binds.

Guarantees:

- **Only whole gangs are bound.** A gang is created and bound as a unit. If the API server
  rejects one member (quota, Pod Security admission, an invalid template, a missing
  ServiceAccount) or a member cannot be bound, the members already made are deleted, no member
  stays bound, and the job is held out of the solve (``walras.core.admission``) with the API
  server's message.
- **Commit by the last member.** When binding at creation, every pod but the last member of each
  gang created whole this round is created first, unbound; then each such gang's last member,
  its commit point. If the gang passes the bind-time check (``walras.operator.cache``) that
  member is created with ``spec.nodeName`` (bound by its create) and the others are bound right
  after it; otherwise it is created unbound and the gang waits in the queue. A gang of k pods so
  costs k creates and k - 1 binds instead of k + k, and a member the API server refuses (a
  ResourceQuota, an admission webhook) is refused before any member is bound: the API server
  admits a pod when it is created, and the members created first are the ones checked first.
- **The queue binds only what fits.** Queued gangs (this round's unbound ones, and whole gangs of
  earlier rounds still unbound: a restarted or newly elected operator binds what its predecessor
  created) are bound when every member passes the bind-time check; a gang whose node is gone or
  cordoned is dropped (the next round plans it again). A bound pod is assumed in the cache until
  the watch shows it.
- **Fenced.** Nothing is sent unless ``is_leader()``; a write refused because the Lease was lost
  leaves the clean-up to the new leader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from walras.core import admission, model, realise
from walras.kube import writes as kubeapi
from walras.operator import cache, metrics
from walras.operator.round_report import RoundReport
from walras.operator.round_scratch import RoundScratch

logger = logging.getLogger("walras.operator.binder")


def create_failure_reason(result: kubeapi.Result) -> str:
    """A condition reason for an API error on pod create (the message carries the details)."""
    text = result.message.lower()
    if result.status == 403 and "exceeded quota" in text:
        return "QuotaExceeded"
    if result.status == 403 and "violates podsecurity" in text:
        return "PodSecurityRejected"
    if result.status == 403 and "service account" in text:
        return "ServiceAccountMissing"
    if result.status == 403:
        return "CreateForbidden"
    if result.status in (400, 422):
        return "TemplateRejected"
    return "PodCreateFailed"


def api_text(result: kubeapi.Result, pod_name: str) -> str:
    """The API server's message without the pod's own name (so that the same rejection of a
    later round's pod reads the same, and its Event is posted once)."""
    text = result.message or f"HTTP {result.status}"
    return text.replace(f'pods "{pod_name}" is ', "").replace(pod_name, "<pod>")


def _on_node(manifest: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The pod manifest with ``spec.nodeName`` set: created bound."""
    return {**manifest, "spec": {**manifest["spec"], "nodeName": node}}


def _gpus(pod: model.PodInfo) -> int:
    """GPUs a pod requests: its largest request that is not cpu or memory (1 if none)."""
    return int(max((v for r, v in pod.requests.items() if r not in ("cpu", "memory")), default=1))


Creates = dict[model.JobKey, list[realise.PodCreate]]


class GangBinder:
    """Deletes, creates and binds whole gangs; holds the queue of gangs waiting to be bound."""

    def __init__(
        self,
        api: kubeapi.Api,
        cluster: cache.ClusterCache,
        rules: admission.Admission,
        is_leader: Callable[[], bool],
        *,
        bind_at_create: bool = True,
    ) -> None:
        self.api = api
        self.cluster = cluster
        self.rules = rules
        self.is_leader = is_leader
        self.bind_at_create = bind_at_create
        self.queue: dict[model.JobKey, list[cache.PendingBind]] = {}

    async def act(
        self,
        plan: realise.Realisation,
        scratch: RoundScratch,
        *,
        going: frozenset[model.JobKey] = frozenset(),
    ) -> None:
        """The round's writes: deletes, then creates, then the binds of every queued gang.
        ``going``: pods their own controller is deleting (a suspended adopted workload's), never
        bound."""
        report = scratch.report
        t0 = time.perf_counter()
        deleted = await self._delete(plan, scratch.retry_deletes, report) | going
        t1 = time.perf_counter()
        report.deletes_s = t1 - t0
        by_job: Creates = {}
        for c in plan.creates:
            by_job.setdefault(c.job.key, []).append(c)
        if plan.creates and self.is_leader():
            await self._create_gangs(plan.creates, by_job, scratch)
        else:
            by_job = {}
        self.queue = self._earlier_gangs(deleted, by_job)
        for key, creates in by_job.items():
            self.queue[key] = [
                cache.PendingBind(key[0], c.name, c.node, c.gpus, job=key[1]) for c in creates
            ]
        t2 = time.perf_counter()
        report.creates_s = t2 - t1
        await self.bind_pending(scratch)
        report.binds_s = time.perf_counter() - t2

    async def _delete(
        self,
        plan: realise.Realisation,
        retried: Sequence[model.PodInfo],
        report: RoundReport,
    ) -> set[model.JobKey]:
        """Delete the plan's pods and the failed pods to retry; returns the pods deleted."""
        planned = {d.pod.key for d in plan.deletes}
        deletes = [
            *plan.deletes,
            *(realise.PodDelete(p, "Retried") for p in retried if p.key not in planned),
        ]
        if deletes and self.is_leader():
            results = await kubeapi.gather_limited(
                self.api.delete_pod(
                    d.pod.namespace, d.pod.name, force=d.reason == "NodeGone", uid=d.pod.uid
                )
                for d in deletes
            )
            report.deletes += sum(r.ok for r in results)
            report.errors += sum(
                not r.ok and r.outcome not in (kubeapi.Outcome.GONE, kubeapi.Outcome.FENCED)
                for r in results
            )
            preempted = sum(
                r.ok and d.reason == "SliceEnded" for d, r in zip(deletes, results, strict=True)
            )
            metrics.PREEMPTIONS.inc(preempted)
        return {d.pod.key for d in deletes}

    def _earlier_gangs(
        self, deleted: set[model.JobKey], this_round: Creates
    ) -> dict[model.JobKey, list[cache.PendingBind]]:
        """Whole gangs of earlier rounds with members still unbound (a restarted or newly
        elected operator binds what its predecessor created)."""
        store = self.cluster.store
        job_uids = {k: j.uid for k, j in store.jobs.items()}
        gangs: dict[tuple[model.JobKey, int], list[model.PodInfo]] = {}
        for pod in store.pods.values():
            if (
                pod.terminating
                or pod.finished
                or pod.key in deleted
                or pod.job_key in this_round
                or not self.cluster.owns(pod, job_uids)
            ):
                continue
            gangs.setdefault((pod.job_key, pod.round), []).append(pod)
        queue: dict[model.JobKey, list[cache.PendingBind]] = {}
        for (key, _), members in sorted(gangs.items()):
            job = store.jobs.get(key)
            # An assumed pod was bound by us just now: the watch has not shown it yet.
            unbound = [
                p
                for p in members
                if not p.node and p.planned_node and p.key not in self.cluster.assumed
            ]
            # Only a complete gang is ever bound: a member missing means it is not one.
            if not isinstance(job, model.JobSpec) or not unbound or len(members) != job.replicas:
                continue
            if job.uid in self.rules.blocked:
                continue
            queue[key] = [
                cache.PendingBind(p.namespace, p.name, p.planned_node, _gpus(p), job=p.job)
                for p in unbound
            ]
        return queue

    async def _create_gangs(
        self, creates: Sequence[realise.PodCreate], by_job: Creates, scratch: RoundScratch
    ) -> None:
        """Create this round's gangs (module docstring: commit by the last member); those
        committed on their nodes leave ``by_job``, the rest (created unbound) stay in it for the
        queue."""
        report = scratch.report
        staged: dict[model.JobKey, realise.PodCreate] = {}
        if self.bind_at_create:
            staged = {k: cs[-1] for k, cs in by_job.items() if len(cs) == cs[0].job.replicas}
        first = [c for c in creates if staged.get(c.job.key) is not c]
        results = await kubeapi.gather_limited(
            self.api.create_pod(c.job.namespace, c.manifest) for c in first
        )
        report.creates += sum(r.outcome == kubeapi.Outcome.OK for r in results)
        outcome = {(c.job.key, c.name): r for c, r in zip(first, results, strict=True)}
        sent = {k: [c for c in cs if staged.get(k) is not c] for k, cs in by_job.items()}
        for key in await self._whole_gangs_created(sent, outcome, scratch):
            del by_job[key]
            staged.pop(key, None)
        if not staged:
            return
        # A gang goes on its nodes only when the first wave made all its other members (a pod
        # that existed already may be a predecessor's, maybe bound: the queue sorts those out,
        # where 409 means bound) and it fits now.
        fresh = {
            k: by_job[k]
            for k in staged
            if all(outcome[(k, c.name)].outcome == kubeapi.Outcome.OK for c in by_job[k][:-1])
        }
        direct = self._fitting_gangs(fresh)
        # At most as many gangs in flight as requests: a gang's binds follow its commit at once
        # instead of queueing behind every other gang's create.
        slots = asyncio.Semaphore(self.api.concurrency)

        async def commit(key: model.JobKey) -> tuple[kubeapi.Result, list[kubeapi.Result]]:
            last = staged[key]
            async with slots:
                if key not in direct:
                    return await self.api.create_pod(last.job.namespace, last.manifest), []
                made = await self.api.create_pod(
                    last.job.namespace, _on_node(last.manifest, last.node)
                )
                if made.outcome != kubeapi.Outcome.OK:
                    return made, []
                others = direct[key][:-1]
                binds = await asyncio.gather(
                    *(self.api.bind_pod(b.namespace, b.name, b.node) for b, _ in others)
                )
                return made, list(binds)

        keys = sorted(staged)
        done = await asyncio.gather(*(commit(k) for k in keys))
        report.creates += sum(made.outcome == kubeapi.Outcome.OK for made, _ in done)
        outcome.update({(k, staged[k].name): made for k, (made, _) in zip(keys, done, strict=True)})
        sent = {k: by_job[k] for k in keys}
        for key in await self._whole_gangs_created(sent, outcome, scratch):
            del by_job[key]
        ready: cache.Fit = []
        results = []
        members: dict[model.JobKey, list[cache.PendingBind]] = {}
        for key, (made, binds) in zip(keys, done, strict=True):
            if key not in direct or made.outcome != kubeapi.Outcome.OK:
                continue  # created unbound (or refused and undone above)
            *others, last = direct[key]
            self.cluster.assume(key, [last])
            report.bound_at_create += 1
            ready.extend(others)
            results.extend(binds)
            members[key] = [last[0]]
            by_job.pop(key, None)
        metrics.BINDINGS.inc(report.bound_at_create)
        await self._bound(ready, results, scratch, members)

    async def _whole_gangs_created(
        self,
        by_job: Creates,
        outcome: dict[tuple[model.JobKey, str], kubeapi.Result],
        scratch: RoundScratch,
    ) -> list[model.JobKey]:
        """Drop every gang with a member the API server did not create: delete the members it
        did create, and hold the job out with the API server's message. Returns the gangs
        dropped (``by_job`` maps each gang to the creates sent; ``outcome`` has their answers).
        """
        undo: list[realise.PodCreate] = []
        dropped: list[model.JobKey] = []
        for key in sorted(by_job):
            creates = by_job[key]
            failed = [(c, outcome[(key, c.name)]) for c in creates]
            failed = [(c, r) for c, r in failed if not r.ok]
            if not failed:
                continue
            dropped.append(key)
            undo.extend(c for c in creates if outcome[(key, c.name)].ok)
            c, r = failed[0]
            if r.outcome == kubeapi.Outcome.FENCED:
                continue  # we lost the Lease: the new leader cleans up
            scratch.report.errors += 1
            message = api_text(r, c.name)
            held = self.rules.hold(c.job, create_failure_reason(r), f"creating its pods: {message}")
            scratch.held[key] = held
            logger.warning(
                "job %s/%s: pod %s not created (%s); %d pods of its gang removed, retry in %.0f s",
                key[0],
                key[1],
                c.name,
                message,
                sum(outcome[(key, x.name)].ok for x in creates),
                held.retry_at - self.rules.clock(),
            )
        if undo:
            await kubeapi.gather_limited(self.api.delete_pod(c.job.namespace, c.name) for c in undo)
        return dropped

    def _fitting_gangs(self, gangs: Creates) -> dict[model.JobKey, cache.Fit]:
        """The whole gangs about to be committed that pass the bind-time check already, each
        pod with its requests, the gang's commit member last. A gang that does not fit now (a
        deleted pod still terminating on its node) is created unbound and waits in the queue,
        so a node is never handed a pod it has no room for."""
        usage = self.cluster.node_usage()
        fitting = {}
        for key in sorted(gangs):
            gang = [
                cache.PendingBind(key[0], c.name, c.node, c.gpus, job=key[1]) for c in gangs[key]
            ]
            wanted = self.cluster.gang_fit(key, gang, usage)
            if wanted:
                fitting[key] = wanted
        return fitting

    async def bind_pending(self, scratch: RoundScratch | None = None) -> None:
        """Bind every queued gang whose pods all pass the bind-time check on their nodes now
        (``walras.operator.cache``); a gang whose node is gone or cordoned leaves the queue and
        the next round plans it again; one that does not fit yet waits."""
        if not self.queue or not self.is_leader():
            return
        usage = self.cluster.node_usage()
        ready: cache.Fit = []
        for key in sorted(self.queue):
            wanted = self.cluster.gang_fit(key, self.queue[key], usage)
            if wanted is None:
                del self.queue[key]  # its node is gone or cordoned; the next round re-plans
            elif wanted:
                ready.extend(wanted)
                del self.queue[key]
        if not ready:
            return
        results = await kubeapi.gather_limited(
            self.api.bind_pod(b.namespace, b.name, b.node) for b, _ in ready
        )
        await self._bound(ready, results, scratch)

    async def _bound(
        self,
        ready: cache.Fit,
        results: list[kubeapi.Result],
        scratch: RoundScratch | None,
        members: dict[model.JobKey, list[cache.PendingBind]] | None = None,
    ) -> None:
        """Account binds sent (``results`` answer ``ready``, pod by pod); a gang with a member
        not bound is removed whole: its other ``members`` (already bound) go with it."""
        bound = 0
        broken: dict[model.JobKey, tuple[cache.PendingBind, kubeapi.Result]] = {}
        members = {k: list(v) for k, v in (members or {}).items()}
        for (b, requests), r in zip(ready, results, strict=True):
            key = (b.namespace, b.job)
            members.setdefault(key, []).append(b)
            # 409: the pod is bound already (an earlier attempt whose answer was lost).
            if r.outcome in (kubeapi.Outcome.OK, kubeapi.Outcome.CONFLICT):
                bound += 1
                self.cluster.assume(key, [(b, requests)])
            elif key not in broken:
                broken[key] = (b, r)
        metrics.BINDINGS.inc(bound)
        if scratch is not None:
            scratch.report.binds += bound
        await self._whole_gangs_bound(broken, members, scratch)

    async def _whole_gangs_bound(
        self,
        broken: dict[model.JobKey, tuple[cache.PendingBind, kubeapi.Result]],
        members: dict[model.JobKey, list[cache.PendingBind]],
        scratch: RoundScratch | None,
    ) -> None:
        """A gang with a member that could not be bound is removed whole (bound members too),
        and its job held out with the reason; never a partial gang past the round."""
        undo: list[cache.PendingBind] = []
        for key, (b, r) in sorted(broken.items()):
            if r.outcome == kubeapi.Outcome.FENCED:
                continue  # we lost the Lease: write nothing more
            undo.extend(members[key])
            for m in members[key]:
                self.cluster.forget((m.namespace, m.name))
            message = f"binding pod {b.name} to {b.node}: {api_text(r, b.name)}"
            logger.warning("job %s/%s: %s; its gang is removed", key[0], key[1], message)
            job = self.cluster.store.jobs.get(key)
            held = (
                self.rules.hold(job, "BindFailed", message)
                if isinstance(job, model.JobSpec)
                else None
            )
            if scratch is not None:
                scratch.report.errors += 1
                if held is not None:
                    scratch.held[key] = held
        if undo:
            await kubeapi.gather_limited(self.api.delete_pod(m.namespace, m.name) for m in undo)

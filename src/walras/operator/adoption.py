"""Adopted workloads: Jobs and JobSets labelled ``walras.dev/managed: "true"``, run through suspend.

The watch (:func:`watch`) keeps the latest object of every labelled workload of each kind in
``walras.core.adapters`` and pokes the round loop; it writes nothing. Every round, after the plan
and before the gang binder (:meth:`Adoption.act`, leader only):

1. **Mirror.** Each workload gets its mirror FungibleJob (``walras.core.adapters.mirror``) when
   it has none. A workload that is not a gang Walras can run (``BadWorkloadError``: not Indexed,
   ``parallelism != completions``, no GPU request, a GPU type no pool has) gets a mirror that is
   ``Failed`` with the condition ``Admitted=False`` naming the field, and one Warning Event on
   the workload; it stays suspended and is never started. A rejected workload fixed in place
   (a new generation that is a gang) has its mirror's spec replaced and is admitted again
   (``Admitted=True``, ``WorkloadFixed``, phase Pending); a gang whose size changes (a Job's
   indexes that succeeded are not run again: ``walras.core.adapters.batch_job``) has its
   mirror's spec replaced. The mirror is never deleted by Walras.
2. **Kept suspended.** A workload running that Walras did not start (created without
   ``suspend: true`` where no admission policy sets it) is suspended.
3. **Outcome.** A workload's own ``Complete``/``Failed`` condition makes its mirror Succeeded or
   Failed.
4. **Slices.** The plan's pods of mirrors are not created: a mirror placed this round starts its
   workload (the node of each replica, Walras's labels and annotations on its suspended template,
   ``suspend: false``: one patch); a mirror whose pods the plan deletes (its slice ended, or it
   moves) has its workload suspended, and the workload's controller deletes its pods with their
   grace period. A workload that must move is suspended this round and started by a later one,
   once suspended (Kubernetes accepts template changes only then). A mirror that finished (its
   reported work reached its total) leaves its workload's pods their termination grace period
   to exit on their own, so that its controller counts them (``_FINISHED``), and is suspended
   after it. Its pods, made by its controller, carry the mirror's labels: the round loop binds
   them as whole gangs like its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from walras.core import adapters, admission, crd, model, realise
from walras.core import conditions as cond
from walras.core.adapters import base, mirror
from walras.kube import watch as kubewatch
from walras.kube import writes as kubeapi
from walras.operator import cache
from walras.operator.round_scratch import RoundScratch

logger = logging.getLogger("walras.operator.adoption")

# The reason on a mirror whose workload Walras cannot run, and on its Event.
REJECTED = "WorkloadRejected"
# The reason on a mirror whose workload was fixed in place after its rejection.
READMITTED = "WorkloadFixed"
# Delete reasons after which the workload's own controller (or the garbage collector) is done.
_DONE = ("JobGone",)
# The mirror finished (its reported work reached its total): the workload's pods are expected to
# exit 0 on their own, and its controller to count them. Suspending it at once would race them:
# the Job controller deletes a suspended Job's pods uncounted, so a Job suspended between its
# workload's last report and its exit would never be Complete. Its pods get as long to exit as a
# suspension would give them after SIGTERM (the template's terminationGracePeriodSeconds,
# Kubernetes's default 30 s): those still running then are suspended (a workload that does not
# exit at its total work does not hold its GPUs for ever).
_FINISHED = "JobFinished"
_DEFAULT_GRACE_S = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class _Ref:
    """A workload's name as an Event's involved object."""

    namespace: str
    name: str


def _path(kind: base.Kind, namespace: str, name: str = "") -> str:
    prefix = "/api" if not kind.group else "/apis"
    item = f"/{quote(name)}" if name else ""
    return f"{prefix}/{kind.api_version}/namespaces/{quote(namespace)}/{kind.plural}{item}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return base.mapping(obj.get("metadata"))


def _started_by_walras(adapter: base.Adapter, obj: Mapping[str, Any]) -> bool:
    """Its template carries a mirror's uid: Walras started it (it does not suspend it again)."""
    spec = base.mapping(obj.get("spec"))
    # A TrainJob has no pod template: a start writes Walras's labels into its spec.labels.
    if base.LABEL_MIRROR_UID in base.mapping(spec.get("labels")):
        return True
    templates = [base.mapping(spec.get("template"))]
    for rjob in spec.get("replicatedJobs") or []:
        rspec = base.mapping(base.mapping(base.mapping(rjob).get("template")).get("spec"))
        templates.append(base.mapping(rspec.get("template")))
    return any(
        base.LABEL_MIRROR_UID in base.mapping(_meta(t).get("labels")) for t in templates if t
    )


def _rejected(status: Mapping[str, Any]) -> bool:
    """The mirror carries the rejection Walras wrote (``Admitted=False``, ``REJECTED``)."""
    return any(
        isinstance(c, Mapping)
        and c.get("type") == cond.ADMITTED
        and c.get("status") == "False"
        and c.get("reason") == REJECTED
        for c in status.get("conditions") or []
    )


class Adoption:
    """The adopted workloads and the writes that run them (module docstring)."""

    def __init__(
        self, api: kubeapi.Api, cluster: cache.ClusterCache, rules: admission.Admission
    ) -> None:
        self.api = api
        self.cluster = cluster
        self.rules = rules
        # This round's pods of suspended workloads: their controller deletes them, so the gang
        # binder must not bind them (a bind would find them gone and hold the job).
        self.going: frozenset[model.JobKey] = frozenset()
        self._suspended_now: set[model.JobKey] = set()
        # Mirrors whose pods the plan deletes as finished (``_FINISHED``): since when (round
        # clock), for as long as every round's plan does.
        self._finishing: dict[model.JobKey, float] = {}
        # (namespace, name) -> (adapter, latest object), from the watch.
        self.workloads: dict[model.JobKey, tuple[base.Adapter, Mapping[str, Any]]] = {}
        # Writes done once per workload uid and generation (Events, rejections, outcomes).
        self._done: set[tuple[str, str, int]] = set()

    # ------------------------------------------------------------------ the watch

    def seen(self, adapter: base.Adapter, event: Mapping[str, Any]) -> bool:
        """A watch event of a labelled workload; True when a round should run soon."""
        obj = base.mapping(event.get("object"))
        meta = _meta(obj)
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if event.get("type") == "DELETED":
            self.workloads.pop(key, None)  # the garbage collector deletes its mirror
            return False
        if base.mapping(meta.get("labels")).get(base.LABEL_MANAGED) != "true":
            self.workloads.pop(key, None)
            return False
        prev = self.workloads.get(key)
        self.workloads[key] = (adapter, obj)
        if prev is None:
            return True
        before, after = prev[1], obj
        return bool(
            _meta(before).get("generation") != _meta(after).get("generation")
            or adapter.outcome(before) != adapter.outcome(after)
        )

    def seen_all(
        self, adapter: base.Adapter, events: list[Mapping[str, Any]], listing: bool
    ) -> bool:
        """A batch of watch events of one kind; a listing (every labelled object that exists)
        first forgets those of that kind it lacks. True when a round should run soon."""
        wake = False
        if listing:
            listed = {
                (
                    str(_meta(e.get("object") or {}).get("namespace", "")),
                    str(_meta(e.get("object") or {}).get("name", "")),
                )
                for e in events
            }
            for key in [k for k, (a, _) in self.workloads.items() if a is adapter]:
                if key not in listed:
                    del self.workloads[key]
        for event in events:
            wake = self.seen(adapter, event) or wake
        return wake

    # ------------------------------------------------------------------ the round

    async def act(self, plan: realise.Realisation, scratch: RoundScratch) -> realise.Realisation:
        """Mirrors, suspensions and outcomes; the plan's pods of mirrors turned into starts and
        suspensions of their workloads. Returns the plan without them (for the gang binder)."""
        self._suspended_now = set()
        accepted = await self._reconcile(scratch)
        # Every mirror, its workload seen by the watch or not yet (just after a restart): the
        # binder never makes pods of a mirror itself.
        adopted = {
            key
            for key, job in self.cluster.store.jobs.items()
            if isinstance(job, model.JobSpec) and job.workload_uid
        }
        starts: dict[model.JobKey, list[realise.PodCreate]] = {}
        stops: set[model.JobKey] = set()
        for c in plan.creates:
            if c.job.key in adopted:
                starts.setdefault(c.job.key, []).append(c)
        self._finishing = {
            d.pod.job_key: self._finishing.get(d.pod.job_key, scratch.now)
            for d in plan.deletes
            if d.pod.job_key in adopted and d.reason == _FINISHED
        }
        for d in plan.deletes:
            if d.pod.job_key not in adopted or d.reason in _DONE or d.pod.finished:
                continue  # a pod that ended is its controller's (a completed index): no slice end
            key = d.pod.job_key
            if d.reason == _FINISHED and scratch.now - self._finishing[key] < self._grace(key):
                continue  # finished: its pods may still exit on their own
            stops.add(key)
        scratch.retry_deletes = [p for p in scratch.retry_deletes if p.job_key not in adopted]
        suspended = {key for key, (a, obj) in self.workloads.items() if a.suspended(obj)}
        suspended |= self._suspended_now
        for key in sorted(stops | set(starts)):
            if key not in self.workloads or self._mirror_of(key, self.workloads[key][1]) is None:
                continue  # not seen yet (or another workload of that name): a later round acts
            adapter, obj = self.workloads[key]
            if adapter.outcome(obj) is not None:
                continue
            gang = starts.get(key)
            if gang and key in accepted and adapter.suspended(obj) and key not in stops:
                if await self._start(key, adapter, obj, gang, scratch):
                    suspended.discard(key)
            elif not adapter.suspended(obj) and await self._write(
                adapter, key, adapter.suspend_patch(obj), "suspend", scratch
            ):
                suspended.add(key)
        self.going = frozenset(
            p.key for p in self.cluster.store.pods.values() if p.job_key in suspended
        )
        return dataclasses.replace(
            plan,
            creates=tuple(c for c in plan.creates if c.job.key not in adopted),
            deletes=tuple(d for d in plan.deletes if d.pod.job_key not in adopted),
        )

    def _grace(self, key: model.JobKey) -> float:
        """The termination grace period of the mirror's pods (seconds; ``_FINISHED``)."""
        job = self.cluster.store.jobs.get(key)
        spec = base.mapping(job.template.get("spec")) if isinstance(job, model.JobSpec) else {}
        grace = spec.get("terminationGracePeriodSeconds")
        if isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0:
            return float(grace)
        return _DEFAULT_GRACE_S

    def _mirror_of(self, key: model.JobKey, obj: Mapping[str, Any]) -> model.JobSpec | None:
        """The mirror FungibleJob of the workload ``obj`` (None while it has none)."""
        job = self.cluster.store.jobs.get(key)
        if not isinstance(job, model.JobSpec):
            return None
        uid = str(_meta(obj).get("uid", ""))
        return job if uid and job.workload_uid == uid else None

    async def _reconcile(self, scratch: RoundScratch) -> set[model.JobKey]:
        """Steps 1 to 3 of the module docstring; returns the workloads Walras may start."""
        pool_types = {p.gpu_type for p in self.cluster.store.pools.values()}
        accepted: set[model.JobKey] = set()
        for key, (adapter, obj) in sorted(self.workloads.items()):
            meta = _meta(obj)
            uid, generation = str(meta.get("uid", "")), int(meta.get("generation") or 0)
            annotations = {str(k): str(v) for k, v in base.mapping(meta.get("annotations")).items()}
            bad: base.BadWorkloadError | None = None
            spec: dict[str, Any] = {}
            try:
                gang = adapter.gang(obj)
                spec = mirror.spec_of(gang, annotations)
                if pool_types:
                    bad = mirror.unknown_types(spec, pool_types)
            except base.BadWorkloadError as exc:
                bad = exc
            outcome = adapter.outcome(obj)
            existing = self.cluster.store.jobs.get(key)
            if existing is None:
                await self._create_mirror(key, adapter, obj, spec, scratch)
            elif bad is None and outcome is None:
                await self._follow(key, adapter, obj, spec, existing, scratch)
            if bad is not None:
                await self._reject(key, adapter, obj, bad, (uid, bad.reason, generation))
            elif outcome is None:
                accepted.add(key)
            if outcome is not None:
                scratch.ended.add(key)
                await self._finish(key, outcome, (uid, outcome.phase, generation))
            elif (
                not adapter.suspended(obj)
                and (bad is not None or not _started_by_walras(adapter, obj))
                and await self._write(adapter, key, adapter.suspend_patch(obj), "suspend", scratch)
            ):
                self._suspended_now.add(key)
        return accepted

    async def _create_mirror(
        self,
        key: model.JobKey,
        adapter: base.Adapter,
        obj: Mapping[str, Any],
        spec: Mapping[str, Any],
        scratch: RoundScratch,
    ) -> None:
        if not spec:  # not a gang: a mirror of one pod, never started, carries the rejection
            template = base.mapping(base.mapping(obj.get("spec")).get("template"))
            spec = {"replicas": 1, "template": dict(template) or {"spec": {"containers": []}}}
        body = mirror.manifest(adapter, obj, spec)
        path = f"/apis/{crd.API_VERSION}/namespaces/{quote(key[0])}/{crd.JOB_PLURAL}"
        result = await self.api.create_object(path, body)
        if not result.ok and result.outcome != kubeapi.Outcome.EXISTS:
            scratch.report.errors += 1
            logger.warning(
                "%s %s/%s: mirror not created: %s", adapter.kind.kind, *key, result.message
            )

    async def _follow(
        self,
        key: model.JobKey,
        adapter: base.Adapter,
        obj: Mapping[str, Any],
        spec: Mapping[str, Any],
        existing: model.JobSpec | model.JobDefect,
        scratch: RoundScratch,
    ) -> None:
        """Step 1, once the mirror exists: a workload fixed in place (its mirror rejected, the
        workload now a gang) has its mirror's spec replaced and its rejection lifted; a gang whose
        size changed (indexes of a Job that succeeded) has its mirror's spec replaced."""
        uid = str(_meta(obj).get("uid", ""))
        if isinstance(existing, model.JobSpec) and existing.workload_uid != uid:
            return  # a FungibleJob of its own, or the mirror of a workload since re-created
        rejected = _rejected(existing.status)
        resized = (
            isinstance(existing, model.JobSpec)
            and not existing.finished  # a finished mirror's gang runs no more
            and existing.replicas != spec["replicas"]
        )
        if not (rejected or resized):
            return
        body = mirror.manifest(adapter, obj, spec)["spec"]
        path = (
            f"/apis/{crd.API_VERSION}/namespaces/{quote(key[0])}/{crd.JOB_PLURAL}/{quote(key[1])}"
        )
        result = await self.api.replace_spec(path, body)
        if not result.ok:
            if result.outcome not in (kubeapi.Outcome.GONE, kubeapi.Outcome.FENCED):
                scratch.report.errors += 1
                logger.warning(
                    "%s %s/%s: mirror spec not replaced: %s",
                    adapter.kind.kind,
                    *key,
                    result.message,
                )
            return
        if rejected:
            # Pending again, admitted: the status writer takes it from the next round on.
            generation = int(_meta(obj).get("generation") or 0)
            status = {
                "phase": crd.PHASE_PENDING,
                "conditions": [
                    cond.condition(
                        cond.ADMITTED,
                        True,
                        READMITTED,
                        f"the {adapter.kind.kind} was fixed in place (generation {generation})",
                        generation,
                    )
                ],
            }
            await self.api.patch_job_status(key[0], key[1], status)
            logger.info("%s %s/%s: fixed in place, re-admitted", adapter.kind.kind, *key)
        else:
            logger.info(
                "%s %s/%s: gang of %d pods now", adapter.kind.kind, *key, int(spec["replicas"])
            )

    async def _reject(
        self,
        key: model.JobKey,
        adapter: base.Adapter,
        obj: Mapping[str, Any],
        bad: base.BadWorkloadError,
        once: tuple[str, str, int],
    ) -> None:
        if once in self._done:
            return
        message = cond.issue_message(bad.field, bad.message)
        generation = int(_meta(obj).get("generation") or 0)
        status = {
            "phase": crd.PHASE_FAILED,
            "conditions": [cond.condition(cond.ADMITTED, False, REJECTED, message, generation)],
        }
        mirrored = await self.api.patch_job_status(key[0], key[1], status)
        event = await self.api.post_event(
            _Ref(*key),
            kind=adapter.kind.kind,
            api_version=adapter.kind.api_version,
            uid=str(_meta(obj).get("uid", "")),
            event_type="Warning",
            reason=bad.reason,
            message=f"Walras cannot run this {adapter.kind.kind}: {message}; left suspended",
            now=_now(),
        )
        logger.warning("%s %s/%s rejected: %s", adapter.kind.kind, *key, message)
        if mirrored.ok and event.ok:
            self._done.add(once)

    async def _finish(
        self, key: model.JobKey, outcome: base.Outcome, once: tuple[str, str, int]
    ) -> None:
        job = self.cluster.store.jobs.get(key)
        if once in self._done or not isinstance(job, model.JobSpec) or job.finished:
            return
        ctype = cond.READY
        status = {
            "phase": outcome.phase,
            "conditions": [
                cond.condition(ctype, False, outcome.reason, outcome.message, job.generation)
            ],
        }
        if (await self.api.patch_job_status(key[0], key[1], status)).ok:
            self._done.add(once)

    async def _start(
        self,
        key: model.JobKey,
        adapter: base.Adapter,
        obj: Mapping[str, Any],
        gang: list[realise.PodCreate],
        scratch: RoundScratch,
    ) -> bool:
        job = gang[0].job
        start = mirror.start_of(adapter, job.uid, [(c.replica, c.node, c.manifest) for c in gang])
        started = await self._write(adapter, key, adapter.start_patch(obj, start), "start", scratch)
        if started:
            # A new gang, as when the binder creates one: an earlier hold of the mirror (a bind
            # that failed) no longer keeps its pods from being bound.
            self.rules.blocked.pop(job.uid, None)
        return started

    async def _write(
        self,
        adapter: base.Adapter,
        key: model.JobKey,
        patch: Mapping[str, Any],
        what: str,
        scratch: RoundScratch,
    ) -> bool:
        result = await self.api.patch_object(_path(adapter.kind, *key), patch)
        if result.ok:
            logger.info("%s %s/%s: %s", adapter.kind.kind, key[0], key[1], what)
            return True
        elif result.outcome not in (kubeapi.Outcome.GONE, kubeapi.Outcome.FENCED):
            # Typically a start sent before the Job controller cleared status.startTime after a
            # suspension: the next round plans the job again.
            scratch.report.errors += 1
            logger.warning(
                "%s %s/%s: %s refused: %s", adapter.kind.kind, key[0], key[1], what, result.message
            )
        return False


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def watch(
    api_client: Any, adoption: Adoption, poke: Callable[[], None], stop: threading.Event
) -> list[kubewatch.CollectionWatch]:
    """LIST then WATCH every adapter's kind, labelled objects only (an unlabelled one is never
    seen), on the calling event loop until ``stop``; a kind the API server does not serve (no
    JobSet CRD) is retried now and then."""
    event_loop = asyncio.get_running_loop()
    started = []
    for adapter in adapters.ADAPTERS:
        kind = adapter.kind
        prefix = "/api" if not kind.group else "/apis"
        path = f"{prefix}/{kind.api_version}/{kind.plural}"

        def apply(
            events: list[Mapping[str, Any]], listing: bool, adapter: base.Adapter = adapter
        ) -> None:
            if adoption.seen_all(adapter, events, listing):
                poke()

        def deliver(events: list[Mapping[str, Any]], listing: bool, apply: Any = apply) -> None:
            if stop.is_set():
                return
            try:
                event_loop.call_soon_threadsafe(apply, events, listing)
            except RuntimeError:  # the event loop closed at shutdown
                stop.set()

        collection = kubewatch.CollectionWatch(
            api_client,
            path,
            deliver,
            query={"labelSelector": f"{base.LABEL_MANAGED}=true"},
            optional=True,
        )
        collection.start(stop)
        started.append(collection)
    return started

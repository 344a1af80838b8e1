"""The status writer: one round's job and pool statuses, and its Events.

Rules:

- **Patch only what a user sees change, at most once per round.** A job's status is
  merge-patched when its phase, conditions or other user-facing fields changed at the precision
  they are shown (``walras.operator.status.changed``, ``walras.operator.visible``: a price or
  share moving within its last shown digit is not a change), when its failure count changed,
  when it finished, or in a refresh round (the first after start-up or Lease take-over), which
  rewrites every status once so each carries the new leader's round number. The schedule
  history rides along only on a patch made anyway: its own store is the ConfigMaps
  (``walras.operator.history_sync``).
- **What each job is told.** A job held out this round (its gang could not be created or bound)
  gets ``Admitted=False`` with the API server's message; a solved job its allocation; a job the
  policy rejected, or a defect of its spec, the field and reason; a finished job its final phase
  (with the back-off limit when its pods failed too often).
- **Each Event once.** An Event is posted when its reason or message for the object differs from
  the last one this process posted for it, so a condition that persists over rounds is said once.
- Pool statuses (allocation and utilisation per ``ResourcePool``) follow the same change rule,
  and ``walras_pending_jobs{reason}`` counts the pending jobs by reason.
- Each Tenant's ``QuotasValid`` condition says whether its parent and guarantees were accepted
  (``walras.core.tenant_tree``), naming the refused field, and ``status.gpus``/``summary`` its
  GPUs per type (guaranteed, in use, borrowed, lent: ``walras.operator.quota_status``); written
  together when either changes at its shown precision.
- A job waiting on its tenant's maximum gets ``Allocated=False``/``QuotaExceeded`` (and a Normal
  Event), one stopped because a guarantee's owner took its GPUs back ``Preempted=True``/
  ``Reclaimed`` (and a Warning Event), with the tenants, type and numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from walras.core import (
    admission,
    crd,
    cycle,
    field_notices,
    governance,
    history,
    lost_nodes,
    model,
)
from walras.core import conditions as cond
from walras.kube import writes as kubeapi
from walras.operator import cache, metrics, quota_status, status, throughputs, visible
from walras.operator.round_scratch import RoundScratch

Job = model.JobSpec | model.JobDefect

TENANT_QUOTAS_VALID = "QuotasValid"


@dataclass(slots=True)
class _Batch:
    """The writes one round's statuses come to."""

    stamp: str
    scratch: RoundScratch
    histories: Mapping[model.JobKey, history.History]
    patches: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    pools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    tenants: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    events: list[tuple[Job, str, str, str, str]] = field(default_factory=list)
    pending: dict[str, int] = field(default_factory=dict)

    def warn(self, job: Job, reason: str, message: str) -> None:
        self.events.append((job, job.uid, "Warning", reason, message))

    def count_pending(self, reason: str) -> None:
        self.pending[reason] = self.pending.get(reason, 0) + 1


class StatusWriter:
    """Writes statuses and Events; remembers the Events it posted (module docstring)."""

    def __init__(
        self,
        api: kubeapi.Api,
        cluster: cache.ClusterCache,
        rules: admission.Admission,
        progress: throughputs.Throughputs,
    ) -> None:
        self.api = api
        self.cluster = cluster
        self.rules = rules
        self.progress = progress
        self.events_posted: dict[str, tuple[str, str]] = {}
        # Tenant -> its condition, GPUs and the condition's lastTransitionTime, as last written.
        self.tenants_told: dict[str, tuple[tuple[str, str, str], dict[str, Any], str]] = {}
        self.lost_nodes = lost_nodes.LostNodes()  # jobs whose pods ran on a node that is gone

    async def write(self, planned: cycle.CyclePlan, scratch: RoundScratch) -> None:
        batch = _Batch(model.format_time(planned.now), scratch, planned.histories)
        self._jobs(planned, batch)
        self._pools(planned, batch)
        self._tenants(planned, batch)
        await self._send(batch)

    def _add(self, batch: _Batch, job: Job, core: dict[str, Any], force: bool) -> None:
        """Queue the job's status patch if it changed (or ``force``), with every extra field."""
        old = job.status
        extra_conditions = self.progress.conditions(job)  # mismatch, profiling
        if extra_conditions:
            core = {**core, "conditions": [*core["conditions"], *extra_conditions]}
        extra = self.progress.status_fields(job, core)
        if (
            not (force or batch.scratch.refresh)
            and not status.changed(core, old)
            and not self.progress.changed(job, extra)
        ):
            return
        full = dict(core)
        full["conditions"] = cond.merge_times(
            core["conditions"], old.get("conditions") or [], batch.stamp
        )
        full["round"] = batch.scratch.round_no
        hist = batch.histories.get(job.key)
        if hist is not None:
            full.update(hist.status_fields())
        full.update(extra)
        failures = self.rules.failures(job.uid)
        if failures:
            full["failures"] = failures
        batch.patches.append((job.namespace, job.name, full))

    def _failures_changed(self, job: Job) -> bool:
        try:
            return self.rules.failures(job.uid) != int(job.status.get("failures") or 0)
        except (TypeError, ValueError):
            return True

    def _issue(self, batch: _Batch, job: Job, where: str, reason: str, message: str) -> None:
        """A job that cannot run as it stands: its status and a Warning name the field."""
        core = status.issue_status(job, job.tenant, where, reason, message)
        batch.count_pending(reason)
        self._add(batch, job, core, force=False)
        batch.warn(job, reason, cond.issue_message(where, message))

    def _jobs(self, planned: cycle.CyclePlan, batch: _Batch) -> None:
        snap, sol, plan = planned.snapshot, planned.solution, planned.realisation
        by_key = {j.key: j for j in snap.jobs}
        bound = self.cluster.bound_nodes()
        store = self.cluster.store
        lost = self.lost_nodes.observe(store.nodes, store.pods.values())
        # Accepted fields that do nothing, or not what was asked (walras.core.field_notices).
        notices = field_notices.notices(snap.jobs, snap.pools, snap.tenants, snap.priority_classes)
        for r, job in enumerate(sol.jobs):
            if job.key in batch.scratch.ended:
                continue  # its final status is the adoption step's (RoundScratch.ended)
            held = batch.scratch.held.get(job.key)
            if held is not None:
                # Its gang could not be created or bound this round: nothing of it runs.
                self._issue(batch, job, "spec.template", held.reason, held.message)
                continue
            jr = plan.jobs[job.key]
            hist = planned.histories[job.key]
            nodes = set(jr.nodes)
            core = status.solved_job_status(
                job,
                r,
                sol,
                jr,
                planned.view,
                has_run=sum(hist.received.values()) > 0,
                bound=sum(n in nodes for n in bound.get(job.key, ())),
            )
            why = planned.quotas.reasons.get(job.key)
            core = quota_status.mark_job(
                core, why, job.status.get("conditions") or [], job.generation
            )
            if why is not None:
                etype = "Normal" if why.reason == cond.QUOTA_EXCEEDED else "Warning"
                batch.events.append((job, job.uid, etype, why.reason, why.message()))
            if core["phase"] == crd.PHASE_PENDING:
                reason = next(
                    c["reason"] for c in core["conditions"] if c["type"] == cond.ALLOCATED
                )
                batch.count_pending(reason)
            if job.key in lost:
                core = lost_nodes.mark(core, lost[job.key], job.generation)
                batch.warn(job, lost_nodes.REASON, lost_nodes.message(lost[job.key]))
            found = notices.get(job.key)
            if found:
                core = field_notices.mark(core, found, job.generation)
                batch.warn(job, field_notices.reason(found), field_notices.message(found))
            self._add(batch, job, core, force=self._failures_changed(job))
        for job, reason, message in batch.scratch.retry_events:
            batch.warn(job, reason, message)
        for job, reason, message in self.progress.events():
            batch.warn(job, reason, message)
        for issue in sol.issues:
            self._issue(batch, by_key[issue.key], issue.field, issue.reason, issue.message)
        for defect in snap.defects:
            if defect.status.get("phase") in crd.TERMINAL_PHASES:
                continue
            self._issue(batch, defect, defect.field, defect.reason, defect.message)
        for key, done in planned.finished.items():
            job = by_key[key]
            phase, reason, message = done.phase, done.reason, done.message
            if reason == cond.POD_FAILED:
                message = (
                    f"backoffLimit {self.cluster.facts.backoff.get(key, 3)} reached after "
                    f"{self.rules.failures(job.uid)} pod failures; {message}"
                )
            self._add(batch, job, status.finished_status(job, phase, reason, message), force=True)
            etype = "Normal" if phase == crd.PHASE_SUCCEEDED else "Warning"
            batch.events.append((job, job.uid, etype, reason, message))

    def _pools(self, planned: cycle.CyclePlan, batch: _Batch) -> None:
        snap, view, sol = planned.snapshot, planned.view, planned.solution
        gpus = {j.key: int(sol.gpus_per_pod[r]) for r, j in enumerate(sol.jobs)}
        pool_cores = status.pool_statuses(snap, view, sol, planned.realisation.jobs, gpus)
        for pool in snap.pools:
            core = pool_cores[pool.name]
            if batch.scratch.refresh or status.changed(core, pool.status):
                full = dict(core)
                full["conditions"] = cond.merge_times(
                    core["conditions"], pool.status.get("conditions") or [], batch.stamp
                )
                full["round"] = batch.scratch.round_no
                batch.pools.append((pool.name, full))
            metrics.ALLOCATED_SHARE.labels(pool=pool.name).set(core["utilisation"])

    def _tenants(self, planned: cycle.CyclePlan, batch: _Batch) -> None:
        """Each Tenant's ``QuotasValid`` condition: False naming the field when its parent or
        guarantees are refused (it runs as a flat tenant without quotas), else True. Written when it
        changes (this process remembers what it wrote) and in a refresh round; with it, the
        tenant's GPUs per type (``walras.operator.quota_status``), by the same rule at the
        precision they are shown (``walras.operator.visible``). A type the API server still
        shows (``TenantSpec.shown_gpus``) or this process wrote, and the tenant no longer has, is
        nulled, so a restart leaves no stale type behind."""
        problems = planned.snapshot.tenant_problems
        usage = planned.quotas.usage
        quota_status.export(usage)
        for name, spec in planned.snapshot.tenants.items():
            problem = problems.get(name)
            if problem is None:
                condition = {
                    "type": TENANT_QUOTAS_VALID,
                    "status": "True",
                    "reason": "Valid",
                    "message": "parent and quotas accepted",
                }
            else:
                condition = {
                    "type": TENANT_QUOTAS_VALID,
                    "status": "False",
                    "reason": problem.reason,
                    "message": f"{problem.field}: {problem.message}; runs as a flat tenant "
                    "without quotas",
                }
            said = (condition["status"], condition["reason"], condition["message"])
            gpus = quota_status.tenant_gpus(usage.get(name, {}))
            told = self.tenants_told.get(name)
            # Types shown on the API server (or written by this process) the tenant no longer
            # has; the server's view counts too, as a restarted process remembers nothing.
            gone = {
                t: None for t in spec.shown_gpus | set(told[1] if told else ()) if t not in gpus
            }
            if (
                not batch.scratch.refresh
                and told is not None
                and told[0] == said
                and visible.same(gpus, told[1])
                and not spec.shown_gpus - gpus.keys()
            ):
                continue
            # lastTransitionTime moves only when the condition's status flips, not when a GPU
            # count does (Kubernetes convention, as ``conditions.merge_times`` for jobs).
            since = told[2] if told is not None and told[0][0] == said[0] else batch.stamp
            self.tenants_told[name] = (said, gpus, since)
            stamp = {**condition, "lastTransitionTime": since}
            # A merge patch keeps map keys it does not name: a type no longer shown is nulled.
            body = {
                "conditions": [stamp],
                "gpus": {**gone, **gpus},
                "summary": quota_status.summary(gpus),
            }
            batch.tenants.append((name, body))

    async def _send(self, batch: _Batch) -> None:
        new_events = []
        for obj, uid, etype, reason, message in batch.events:
            ref = f"{obj.namespace}/{obj.name}"
            if self.events_posted.get(ref) == (reason, message):
                continue
            self.events_posted[ref] = (reason, message)
            new_events.append((obj, uid, etype, reason, message))
        # At most one patch per job per round: what a job was told later in the round (its
        # issue, its completion) goes on top of what it was told before.
        patches: dict[tuple[str, str], dict[str, Any]] = {}
        for ns, name, body in batch.patches:
            patches[(ns, name)] = {**patches.get((ns, name), {}), **body}
        results = await kubeapi.gather_limited(
            [
                *(
                    self.api.patch_job_status(ns, name, body)
                    for (ns, name), body in patches.items()
                ),
                *(self.api.patch_pool_status(name, body) for name, body in batch.pools),
                *(
                    self.api.patch_status(governance.TENANT_PLURAL, name, body)
                    for name, body in batch.tenants
                ),
                *(
                    self.api.post_event(
                        obj,
                        uid=uid,
                        event_type=etype,
                        reason=reason,
                        message=message,
                        now=batch.stamp,
                    )
                    for obj, uid, etype, reason, message in new_events
                ),
            ]
        )
        report = batch.scratch.report
        report.status_patches = len(patches) + len(batch.pools)
        report.job_status_patches = len(patches)
        report.events = len(new_events)
        report.errors += sum(r.outcome == kubeapi.Outcome.ERROR for r in results)
        metrics.PENDING_JOBS.clear()
        for reason, count in batch.pending.items():
            metrics.PENDING_JOBS.labels(reason=reason).set(count)

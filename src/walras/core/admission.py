"""Admission rules applied to a frozen snapshot before the plan: ownership, retries, holds.

They need facts a parsed object drops (:class:`Facts`: pod ownership, disruption, each job's
back-off limit), which the operator's watches record; nothing here reads a clock of its own,
calls the API or logs, so any shell holding those facts can run them before ``cycle.plan``.

- **Ownership.** A pod is Walras's only if its controller ownerReference is the FungibleJob it is
  labelled with, with that job's uid. Any other pod carrying ``walras.dev/job`` is counted as a
  foreign pod (it uses its node's resources) and never deleted or bound; pods of a deleted job are
  left to the garbage collector.
- **Retries** (``spec.backoffLimit``, default 3). A pod that failed (phase Failed while not being
  deleted, and without a ``DisruptionTarget`` condition: preemption, eviction and deletion by
  Walras never count) is counted once, by uid. A job's failures are the count its status held
  when this process first saw it plus those counted since. Up to the limit the failed pod is
  deleted and hidden from the plan, so the job's gang is simply placed again; past it the job
  fails. A disrupted pod is deleted and hidden without counting.
- **Holds.** A job whose gang could not be created or bound (the operator's gang binder) sits out
  of the solve, reported as a defect of ``spec.template``, until its retry time: a back-off that
  doubles from ``RETRY_FIRST_S`` to ``RETRY_MAX_S`` with each failed attempt. A new
  ``generation`` of the job retries at once.
- **Pods that never start.** A pod whose container waits for a reason the kubelet cannot resolve
  by itself (``model.STUCK_REASONS``: a missing image, a template the runtime refuses) holds its
  GPUs for nothing. Its job's pods are all deleted and hidden (the gang's GPUs go to others) and
  the job is held with reason ``PodsNotStarting``, the message naming the container, the
  kubelet's reason and message, and one Warning Event (as any held job). Such a hold lasts
  ``STUCK_FIRST_S`` (the longest back-off) rather than starting at ``RETRY_FIRST_S``: only a
  person (or a registry coming back) fixes it, and each retry takes GPUs from jobs that can use
  them. It still retries, so a fixed image is picked up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from walras.core import crd, model, snapshot

RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0
STUCK_FIRST_S = RETRY_MAX_S
STUCK_REASON = "PodsNotStarting"


@dataclass(slots=True)
class Facts:
    """What the watches know of pods and jobs beyond their parsed views.

    ``owner``: pod -> uid of its controller FungibleJob (only when that is the job it is labelled
    with); ``disrupted``: pods with a ``DisruptionTarget`` condition; ``backoff``: job ->
    ``spec.backoffLimit``.
    """

    owner: dict[model.JobKey, str] = field(default_factory=dict)
    disrupted: set[model.JobKey] = field(default_factory=set)
    backoff: dict[model.JobKey, int] = field(default_factory=dict)


def owns(pod: model.PodInfo, job_uids: Mapping[model.JobKey, str], facts: Facts) -> bool:
    """Walras's pod: its controller is the live FungibleJob it is labelled with (same uid)."""
    owner = facts.owner.get(pod.key, "")
    return bool(owner) and job_uids.get(pod.job_key) == owner


@dataclass(slots=True)
class Blocked:
    """A job held out of the solve after its gang could not be created or bound."""

    generation: int
    reason: str
    message: str
    retry_at: float
    attempts: int


@dataclass(slots=True)
class Admitted:
    """The snapshot the plan sees, and what the rules ask the round to write besides the plan:
    failed pods to delete and the Events saying why (job, reason, message)."""

    snapshot: snapshot.Snapshot
    retry_deletes: list[model.PodInfo] = field(default_factory=list)
    retry_events: list[tuple[model.JobSpec, str, str]] = field(default_factory=list)


def as_defect(job: model.JobSpec, held: Blocked) -> model.JobDefect:
    """A held-out job as the defect the status code already knows how to report."""
    return model.JobDefect(
        namespace=job.namespace,
        name=job.name,
        uid=job.uid,
        tenant=job.tenant,
        generation=job.generation,
        field="spec.template",
        reason=held.reason,
        message=held.message,
        status=job.status,
    )


class Admission:
    """Pod failures counted per job and jobs held out, kept across rounds (module docstring)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.blocked: dict[str, Blocked] = {}  # job uid -> its hold
        self.failed_pods: dict[str, set[str]] = {}  # job uid -> failed pod uids counted
        self.failures_base: dict[str, int] = {}  # job uid -> failures its status held at first

    def apply(self, snap: snapshot.Snapshot, now: float, facts: Facts) -> Admitted:
        """Ownership, retries and holds applied to ``snap``."""
        job_uids = {j.key: j.uid for j in snap.jobs}
        job_uids.update({d.key: d.uid for d in snap.defects})
        owned: list[model.PodInfo] = []
        foreign = list(snap.foreign_pods)
        for pod in snap.pods:
            if owns(pod, job_uids, facts):
                owned.append(pod)
            elif pod.node and not pod.finished:
                foreign.append(pod)  # someone else's pod: it uses the node, we never touch it
        out = Admitted(snap)
        hidden = self._retries(snap, owned, facts, out)
        hidden |= self._stuck(snap, owned, now, out)
        jobs, defects = self._holds(snap, now)
        out.snapshot = dataclasses.replace(
            snap,
            jobs=tuple(jobs),
            defects=tuple(sorted(defects, key=lambda d: d.key)),
            pods=tuple(p for p in owned if p.key not in hidden),
            foreign_pods=tuple(sorted(foreign, key=lambda p: p.key)),
        )
        return out

    def _retries(
        self,
        snap: snapshot.Snapshot,
        owned: list[model.PodInfo],
        facts: Facts,
        out: Admitted,
    ) -> set[model.JobKey]:
        """Count each failed pod once; returns the pods to hide (``out`` gets their deletes)."""
        by_job: dict[model.JobKey, list[model.PodInfo]] = {}
        for pod in owned:
            by_job.setdefault(pod.job_key, []).append(pod)
        hidden: set[model.JobKey] = set()
        live = set()
        for job in snap.jobs:
            live.add(job.uid)
            if job.finished:
                continue
            if job.uid not in self.failures_base:
                try:
                    self.failures_base[job.uid] = max(0, int(job.status.get("failures") or 0))
                except (TypeError, ValueError):
                    self.failures_base[job.uid] = 0
            seen = self.failed_pods.setdefault(job.uid, set())
            limit = facts.backoff.get(job.key, 3)
            for pod in by_job.get(job.key, []):
                if pod.phase != crd.PHASE_FAILED or pod.terminating:
                    continue
                if pod.key in facts.disrupted:
                    # Evicted or preempted: not the workload's failure. Clean it up; the gang is
                    # placed again as after any preemption.
                    hidden.add(pod.key)
                    out.retry_deletes.append(pod)
                    continue
                if pod.uid not in seen:
                    seen.add(pod.uid)
                    count = self.failures_base[job.uid] + len(seen)
                    verdict = (
                        f"retry {count} of {limit}" if count <= limit else "backoffLimit reached"
                    )
                    out.retry_events.append(
                        (
                            job,
                            "PodFailed",
                            f"pod {pod.name} failed on {pod.node or 'no node'} "
                            f"({count} failures, backoffLimit {limit}): {verdict}",
                        )
                    )
                if self.failures(job.uid) <= limit:
                    hidden.add(pod.key)
                    out.retry_deletes.append(pod)
        for uid in [u for u in self.failed_pods if u not in live]:
            del self.failed_pods[uid]
            self.failures_base.pop(uid, None)
        return hidden

    def _stuck(
        self, snap: snapshot.Snapshot, owned: list[model.PodInfo], now: float, out: Admitted
    ) -> set[model.JobKey]:
        """Hold each job with a pod that never starts; returns its pods to hide and delete."""
        stuck: dict[model.JobKey, model.PodInfo] = {}
        for pod in sorted(owned, key=lambda p: p.key):
            if pod.stuck and not pod.terminating and not pod.finished:
                stuck.setdefault(pod.job_key, pod)
        hidden: set[model.JobKey] = set()
        for job in snap.jobs:
            first = stuck.get(job.key)
            if first is None or job.finished:
                continue
            held = self.blocked.get(job.uid)
            if held is None or held.generation != job.generation or now >= held.retry_at:
                # A fresh finding (not the same pods seen again before their delete lands). The
                # hold makes the job a defect this same round: its condition and its one Warning.
                message = f"pod {first.name} never starts: {first.stuck}"
                self.hold(job, STUCK_REASON, message, first_s=STUCK_FIRST_S)
            for pod in owned:
                if pod.job_key == job.key and not pod.terminating:
                    hidden.add(pod.key)
                    out.retry_deletes.append(pod)
        return hidden

    def _holds(
        self, snap: snapshot.Snapshot, now: float
    ) -> tuple[list[model.JobSpec], list[model.JobDefect]]:
        """Jobs whose gang could not be created or bound sit out until their retry time."""
        jobs: list[model.JobSpec] = []
        defects = list(snap.defects)
        live = {j.uid for j in snap.jobs}
        for job in snap.jobs:
            held = self.blocked.get(job.uid)
            if held is not None and held.generation != job.generation:
                del self.blocked[job.uid]  # the user changed the job: try it at once
                held = None
            if held is not None and now < held.retry_at and not job.finished:
                defects.append(as_defect(job, held))
            else:
                jobs.append(job)
        for uid in [u for u in self.blocked if u not in live]:
            del self.blocked[uid]
        return jobs, defects

    def failures(self, job_uid: str) -> int:
        """Pod failures counted for a job (its persisted count plus those seen since)."""
        return self.failures_base.get(job_uid, 0) + len(self.failed_pods.get(job_uid, ()))

    def hold(
        self, job: model.JobSpec, reason: str, message: str, first_s: float = RETRY_FIRST_S
    ) -> Blocked:
        """Hold a job out of the solve after a create or bind failure (doubling back-off from
        ``first_s``, at most ``max(first_s, RETRY_MAX_S)``)."""
        prev = self.blocked.get(job.uid)
        attempts = prev.attempts + 1 if prev is not None else 1
        delay = min(first_s * 2 ** (attempts - 1), max(first_s, RETRY_MAX_S))
        held = Blocked(job.generation, reason, message, self.clock() + delay, attempts)
        self.blocked[job.uid] = held
        return held

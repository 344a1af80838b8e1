"""Reported progress and effective throughputs in the operator's round.

The round loop calls :meth:`Throughputs.prepare` on each snapshot before the plan:

1. every active job's pods' ``walras.dev/steps-done`` annotations go through
   ``walras.core.progress.Tracker`` (checked, summed per job, steps/s measured per GPU type);
   ignored readings become Warning Events on the job naming the pod;
2. ``walras.core.estimation.effective`` gives each job the throughputs the policy sees
   (measured > declared > estimated; types nobody knows stay out);
3. a job with no information at all is profiled (``walras.core.profiling``): the policy sees it
   on the GPU type of its current profiling slice alone, at a provisional value;
4. the snapshot's jobs carry those throughputs and their progress in ``status.progress``, which
   ``walras.core.completion`` reads (a job completes when ``stepsDone >= totalWork``).

After the plan, :meth:`Throughputs.status_fields` adds ``status.progress`` (steps done, measured
steps/s per type with sample counts, estimated finish) and ``status.throughputs`` (per type: the
value and its source) and ``status.profiling`` to the job's status patch,
:meth:`Throughputs.conditions` the ``ThroughputMismatch`` and ``Profiling`` conditions, and the
metric ``walras_job_throughput{source}`` is set.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from walras.core import conditions as cond
from walras.core import crd, estimation, model, profiling, progress, restarts, snapshot
from walras.operator import metrics, status

MISMATCH: str = "ThroughputMismatch"
MISMATCH_REASON: str = "DeclaredDisagreesWithMeasured"


def _readings(
    snap: snapshot.Snapshot, job: model.JobSpec, pods: Sequence[model.PodInfo]
) -> list[progress.Reading]:
    nodes = {n.name: n for n in snap.nodes}
    out = []
    for pod in sorted(pods, key=lambda p: p.key):
        node = nodes.get(pod.where)
        pool = snapshot.node_pool(node, snap.pools) if node is not None else None
        out.append(
            progress.Reading(
                pod=pod.name,
                uid=pod.uid or pod.name,
                gpu_type=pool.gpu_type if pool is not None else pod.group,
                text=pod.steps_done,
                copy=f"{pod.round}/{pod.where}" if job.forkable else "",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Settings:
    """The ``walras operator`` flags for progress (``--measured-min-samples``,
    ``--mismatch-factor``, ``--absurd-factor``); defaults are those of ``walras.core.progress``."""

    min_samples: int = progress.MIN_SAMPLES
    mismatch_factor: float = progress.MISMATCH_FACTOR
    absurd_factor: float = progress.ABSURD_FACTOR
    # Profiling slices (walras.core.profiling): running seconds per GPU type; 0 = two rounds,
    # negative = no profiling. ``profile_declared``: profile the types a job declared too.
    profiling_seconds: float = 0.0
    profile_declared: bool = False


class Throughputs:
    """Owned by the round loop: the tracker and this round's effective throughputs."""

    def __init__(
        self,
        *,
        min_samples: int = progress.MIN_SAMPLES,
        factor: float = progress.ABSURD_FACTOR,
        mismatch_factor: float = progress.MISMATCH_FACTOR,
        profiler: profiling.Profiler | None = None,
        restarts: restarts.Tracker | None = None,
    ) -> None:
        self.tracker = progress.Tracker(factor)
        # Measured restart costs and steps lost (owned by the cluster cache, which the pod watch
        # feeds): shown in ``status.progress`` beside the steps.
        self.restarts = restarts
        # Off unless configured (walras operator configures it: Throughputs.configured).
        self.profiler = profiler if profiler is not None else profiling.Profiler(-1.0)
        self.profiles: dict[model.JobKey, tuple[profiling.Plan, bool]] = {}
        self.min_samples = min_samples
        self.mismatch_factor = mismatch_factor
        self.effective: dict[model.JobKey, estimation.Effective] = {}
        self.rejections: list[tuple[model.JobSpec, progress.Rejection]] = []
        self.declared: dict[model.JobKey, Mapping[str, float]] = {}
        self.active: set[model.JobKey] = set()
        # Each job's status as the watch delivered it (prepare puts the tracker's progress in
        # the snapshot's copy, which completion reads; patches compare with the API's).
        self.original: dict[model.JobKey, Mapping[str, Any]] = {}
        self.written: dict[model.JobKey, dict[str, Any]] = {}

    @classmethod
    def configured(
        cls,
        settings: Settings,
        round_seconds: float,
        *,
        restarts: restarts.Tracker | None = None,
    ) -> Throughputs:
        """From the operator's flags (``round_seconds``: the length of a round)."""
        seconds = settings.profiling_seconds
        return cls(
            restarts=restarts,
            min_samples=settings.min_samples,
            factor=settings.absurd_factor,
            mismatch_factor=settings.mismatch_factor,
            profiler=profiling.Profiler(
                2 * round_seconds if seconds == 0 else seconds,
                declared_too=settings.profile_declared,
            ),
        )

    def prepare(self, snap: snapshot.Snapshot, now: float) -> snapshot.Snapshot:
        """The snapshot with effective throughputs and reported progress on its jobs."""
        self.rejections = []
        self.profiles = {}
        self.declared = {j.key: j.throughput for j in snap.jobs}
        self.active = {j.key for j in snap.jobs if not j.finished}
        self.original = {j.key: j.status for j in snap.jobs}
        pods_by_job = snap.pods_by_job()
        for job in snap.jobs:
            if job.finished:
                # No readings: only restores its measurements from its status (a restarted
                # operator), which still inform the estimates of jobs like it.
                if not self.tracker.knows(job.uid) and "progress" in job.status:
                    self.tracker.observe(job.uid, [], now, created=job.created, status=job.status)
                continue
            pods = pods_by_job.get(job.key, [])
            if (
                not self.tracker.knows(job.uid)
                and "progress" not in job.status
                and not any(p.steps_done for p in pods)
            ):
                continue  # never reported anything: nothing to track (the common case)
            eff = self.effective.get(job.key)
            fastest = eff.fastest if eff is not None else None
            declared = max(job.throughput.values(), default=0.0)
            fastest = max(fastest or 0.0, declared) or None
            for bad in self.tracker.observe(
                job.uid,
                _readings(snap, job, pods),
                now,
                forked=job.forkable,
                fastest=fastest,
                created=job.created,
                status=job.status,
            ):
                self.rejections.append((job, bad))
        self.tracker.forget(j.uid for j in snap.jobs)
        self.profiler.forget(j.uid for j in snap.jobs if not j.finished)
        self.written = {k: v for k, v in self.written.items() if k in self.active}
        reported = {j.uid: self.tracker.progress(j.uid) for j in snap.jobs}
        self.effective = estimation.effective(
            snap.jobs,
            reported,
            [p.gpu_type for p in snap.pools],
            defaults=_pool_defaults(snap.pools),
            profiles={j.key: j.profile for j in snap.jobs if j.profile},
            min_samples=self.min_samples,
            mismatch_factor=self.mismatch_factor,
        )
        jobs = []
        nodes = {n.name: n for n in snap.nodes}
        for job in snap.jobs:
            if job.finished:
                jobs.append(job)
                continue
            fields = self.tracker.status_fields(job.uid)
            status = {**job.status, "progress": fields} if fields else job.status
            # Measured and estimated rates to three significant digits: one measured anew each
            # round does not re-solve the round (the policies' memo keys on the throughputs)
            # for noise. Declared values are used as given.
            # Types without a pool keep their declared value (issue messages name them).
            eff = self.effective[job.key]
            thr = {
                **job.throughput,
                **{
                    t: v if eff.source[t] == estimation.DECLARED else cond.num(v)
                    for t, v in eff.throughput.items()
                },
            }
            pods = pods_by_job.get(job.key, [])
            thr, status = self._profile(snap, job, pods, nodes, now, thr, status)
            if thr == job.throughput and not fields and status is job.status:
                jobs.append(job)  # nothing reported or estimated: the job as the watch gave it
                continue
            jobs.append(dataclasses.replace(job, throughput=thr, status=status))
        return dataclasses.replace(snap, jobs=tuple(jobs))

    def _profile(
        self,
        snap: snapshot.Snapshot,
        job: model.JobSpec,
        pods: Sequence[model.PodInfo],
        nodes: Mapping[str, model.NodeInfo],
        now: float,
        thr: dict[str, float],
        status: Mapping[str, Any],
    ) -> tuple[dict[str, float], Mapping[str, Any]]:
        """The job's throughputs and status for the plan under its profiling (if any)."""
        measured = self.tracker.progress(job.uid).measured
        reported = any(m.samples > 0 for m in measured.values())
        sources = self.effective[job.key].source
        if not self.profiler.wants(job, sources, reported):
            self.profiles.pop(job.key, None)
            return thr, status  # the common case: not profiled, nothing more to look at
        running = set()
        for pod in pods:
            node = (
                nodes.get(pod.node)
                if pod.phase == crd.PHASE_RUNNING and not pod.terminating
                else None
            )
            pool = snapshot.node_pool(node, snap.pools) if node is not None else None
            if pool is not None:
                running.add(pool.gpu_type)
        plan = self.profiler.observe(
            job,
            sources=sources,
            measured=reported,
            pools=snap.pools,
            nodes=snap.nodes,
            running=running,
            now=now,
        )
        if plan is None:
            self.profiles.pop(job.key, None)
            return thr, status
        self.profiles[job.key] = (plan, reported)
        override = plan.throughput(job.throughput, reported)
        if not override:
            return thr, status
        # Profiling: the current type alone; a silent job: known values win over provisional.
        thr = override if plan.current is not None else {**override, **thr}
        done = status.get("progress")
        if not (isinstance(done, Mapping) and "stepsDone" in done):
            # Accounted work at a provisional rate means nothing: completion by totalWork only
            # from reported steps (walras.core.completion reads this snapshot's status).
            old = done if isinstance(done, Mapping) else {}
            status = {**status, "progress": {**old, "stepsDone": 0}}
        return thr, status

    def status_fields(
        self, job: model.JobSpec | model.JobDefect, core: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``progress``, ``throughputs`` and the declared and measured throughputs on the
        status's ``gpuType`` (printer columns) for the job's status patch ({} for a defect).
        ``core``: the rest of the status (its ``expectedThroughput`` and ``gpuType``)."""
        eff = self.effective.get(job.key)
        if eff is None or isinstance(job, model.JobDefect):
            return {}
        expected = core.get("expectedThroughput")
        out: dict[str, Any] = {}
        fields = self.tracker.status_fields(job.uid)
        if self.restarts is not None:
            fields = {**fields, **self.restarts.status_fields(job.uid)}
        if fields:
            old = self.original.get(job.key, job.status).get("progress")
            old_copies = old.get("copies") if isinstance(old, Mapping) else None
            if isinstance(old_copies, Mapping) and "copies" in fields:
                # A merge patch keeps map keys it does not mention: copies gone are nulled.
                gone = {k: None for k in old_copies if k not in fields["copies"]}
                fields["copies"] = {**gone, **fields["copies"]}
            done = fields.get("stepsDone")
            # From the last reading, not from now: the status changes only when progress does
            # (and the rate's 3 significant digits, so that solver noise writes nothing).
            since = self.tracker.progress(job.uid).updated_at
            rate = cond.num(float(expected)) if expected is not None else 0.0
            finish = (
                progress.estimated_finish(since, float(done), job.total_work, rate)
                if done is not None and since is not None
                else None
            )
            fields["estimatedFinish"] = model.format_time(round(finish)) if finish else ""
            out["progress"] = fields
        declared = self.declared.get(job.key, {})
        gpu_type = str(core.get("gpuType") or "")
        # null removes a column's value that no longer applies (merge patch).
        out["declaredThroughput"] = declared.get(gpu_type)
        measured = self.tracker.progress(job.uid).measured.get(gpu_type)
        out["measuredThroughput"] = (
            cond.num(measured.rate) if measured is not None and measured.samples else None
        )
        out["throughputs"] = {
            t: {
                "value": cond.num(value),
                "source": eff.detail.get(t, eff.source[t]),
                **({"declared": declared[t]} if t in declared else {}),
                **({"samples": eff.samples[t]} if t in eff.samples else {}),
            }
            for t, value in sorted(eff.throughput.items())
        }
        profile = self.profiles.get(job.key)
        if profile is not None:
            out["profiling"] = profile[0].status()
        old_types = self.original.get(job.key, job.status).get("throughputs")
        if isinstance(old_types, Mapping):
            # A type no longer known (an estimate withdrawn) is removed from the merge patch.
            out["throughputs"].update({t: None for t in old_types if t not in eff.throughput})
        return out

    def changed(self, job: model.JobSpec | model.JobDefect, fields: Mapping[str, Any]) -> bool:
        """Whether ``fields`` (from :meth:`status_fields`) differ from the job's API status and
        from what was last written (an API server whose CRD lacks these fields prunes them: no
        write every round then)."""
        if not fields or self.written.get(job.key) == fields:
            return False
        if not status.changed(fields, self.original.get(job.key, job.status)):
            return False
        self.written[job.key] = dict(fields)
        return True

    def conditions(self, job: model.JobSpec | model.JobDefect) -> list[dict[str, Any]]:
        """The job's ``ThroughputMismatch`` and ``Profiling`` conditions, where they apply."""
        out = []
        mismatch = self.condition(job)
        if mismatch is not None:
            out.append(mismatch)
        profile = self.profiles.get(job.key)
        if profile is not None and not isinstance(job, model.JobDefect):
            plan, reported = profile
            state, reason, text = profiling.message(plan, self.profiler.seconds, reported)
            out.append(cond.condition(profiling.CONDITION, state, reason, text, job.generation))
        return out

    def condition(self, job: model.JobSpec | model.JobDefect) -> dict[str, Any] | None:
        """``ThroughputMismatch=True`` naming the types whose declared value is off."""
        eff = self.effective.get(job.key)
        if eff is None or not eff.mismatched or isinstance(job, model.JobDefect):
            return None
        declared = self.declared.get(job.key, {})
        parts = [
            f"{t}: declared {cond.fmt(declared.get(t, 0.0))}, measured "
            f"{cond.fmt(eff.throughput.get(t, 0.0))} steps/s ({eff.samples.get(t, 0)} samples)"
            for t in eff.mismatched
        ]
        return cond.condition(
            MISMATCH,
            True,
            MISMATCH_REASON,
            f"{'; '.join(parts)}: off by more than x{self.mismatch_factor:g}; "
            "the measured value is used",
            job.generation,
        )

    def events(self) -> list[tuple[model.JobSpec, str, str]]:
        """(job, reason, message) of this round's ignored readings (Warning Events)."""
        return [(job, bad.reason, bad.message) for job, bad in self.rejections]

    def observe_metrics(self) -> None:
        """``walras_job_throughput{namespace, job, gpu_type, source}`` for every active job."""
        metrics.JOB_THROUGHPUT.clear()
        for (namespace, name), eff in sorted(self.effective.items()):
            if (namespace, name) not in self.active:
                continue
            for t, value in sorted(eff.throughput.items()):
                if math.isfinite(value):
                    metrics.JOB_THROUGHPUT.labels(
                        namespace=namespace, job=name, gpu_type=t, source=eff.source[t]
                    ).set(value)


def _pool_defaults(pools: tuple[model.PoolSpec, ...]) -> dict[str, float]:
    """Per GPU type, the admin's default steps/s (``spec.defaultThroughput`` of its pools)."""
    out: dict[str, float] = {}
    for pool in pools:
        if pool.default_throughput is not None and pool.default_throughput > 0:
            out.setdefault(pool.gpu_type, pool.default_throughput)
    return out

"""Which active jobs finished since the last round, and how.

Called by :func:`walras.core.cycle.plan` at the start of every round, before the solve, so that a
finished job's GPUs go to others in the same round. A job is finished when:

- one of its pods failed (phase ``Failed``),
- every pod of its gang succeeded (not for a mirror of an adopted workload: its pods include
  those of an Indexed Job's completed indexes, which stay Succeeded while the gang runs the
  indexes left; the workload's own condition says when it is done, written on the mirror by
  ``walras.operator.adoption``), or
- its work reached ``spec.totalWork``: the steps its workload reported
  (``status.progress.stepsDone``, ``walras.core.progress``) when it reported any, else the
  history's accounted ``workDone = ∫ throughput(type running) dt`` (``walras.core.history``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from walras.core import conditions as cond
from walras.core import crd, history, model, snapshot


@dataclass(frozen=True, slots=True)
class Completion:
    """A job that finished: its terminal phase and the condition's reason and message."""

    phase: str
    reason: str
    message: str


def completions(
    snap: snapshot.Snapshot, hists: Mapping[model.JobKey, history.History]
) -> dict[model.JobKey, Completion]:
    """Active jobs of ``snap`` that finished (see the module docstring)."""
    out: dict[model.JobKey, Completion] = {}
    pods_by_job = snap.pods_by_job()
    for job in snap.active_jobs:
        all_pods = pods_by_job.get(job.key)
        if all_pods:
            pods = [p for p in all_pods if not p.terminating]
            failed = [p for p in pods if p.phase == crd.PHASE_FAILED]
            done = [p for p in pods if p.phase == crd.PHASE_SUCCEEDED]
        else:
            pods = failed = done = []  # most of a queue waits without pods: skip the scans
        hist = hists[job.key]
        if failed:
            out[job.key] = Completion(
                crd.PHASE_FAILED,
                cond.POD_FAILED,
                f"pod {failed[0].name} failed on {failed[0].node or 'no node'}",
            )
        elif not job.workload_uid and len(done) >= job.replicas and len(done) == len(pods):
            out[job.key] = Completion(
                crd.PHASE_SUCCEEDED, cond.COMPLETED, f"all {job.replicas} pods succeeded"
            )
        elif job.total_work is not None and _work(job, hist) >= job.total_work:
            out[job.key] = Completion(
                crd.PHASE_SUCCEEDED,
                cond.WORK_DONE,
                f"{_work_text(job, hist)} >= totalWork {cond.fmt(job.total_work)}",
            )
    return out


def _reported(job: model.JobSpec) -> float | None:
    """``status.progress.stepsDone`` (the shell puts its tracker's value there), if any."""
    raw = job.status.get("progress")
    if raw is None:
        return None  # the common case, without the costlier Mapping check
    done = raw.get("stepsDone") if isinstance(raw, Mapping) else None
    if isinstance(done, bool) or not isinstance(done, int | float):
        return None
    return float(done)


def _work(job: model.JobSpec, hist: history.History) -> float:
    reported = _reported(job)
    return reported if reported is not None else hist.work_done


def _work_text(job: model.JobSpec, hist: history.History) -> str:
    reported = _reported(job)
    if reported is not None:
        return f"steps done {cond.fmt(reported)} (reported)"
    return f"work done {cond.fmt(hist.work_done)}"

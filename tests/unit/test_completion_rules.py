"""When a job with ``spec.totalWork`` is finished (``walras.core.completion``), with the rules of
``docs/progress.md`` ("Completes") and ``docs/workloads.md`` (contract item 5) as the oracle:

- reported steps win: a job that reported ``stepsDone`` completes only when they reach
  ``totalWork``, whatever work was accounted for it;
- a job that reported nothing completes from its accounted work, ``∫ throughput dt`` at the rate
  of the type it ran on, declared or estimated; this is how a job that names one GPU type in
  ``spec.throughput`` but ran on a kwok node of another type (kwok runs no process, so nothing
  is reported) ends ``Succeeded`` with no steps shown, the message saying ``work done`` and not
  ``(reported)``;
- every pod of the gang exiting 0 finishes the job, work left or not.

Work accounted by hand: 300 s at 5 work/s on k80 = 1500 = ``totalWork``.
"""

from __future__ import annotations

from typing import Any

from tests.unit.snapshot_helpers import cluster, job

from walras.core import completion, crd, history

TOTAL = 1500.0
RATE, SECONDS = 5.0, 300.0  # RATE * SECONDS == TOTAL


def fjob(status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = job("only-v100", {"v100": 10.0})  # k80 left out: estimated
    obj["spec"]["totalWork"] = TOTAL
    if status is not None:
        obj["status"] = status
    return obj


def pod(phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "only-v100-0",
            "uid": "pod-0",
            "labels": {crd.LABEL_JOB: "only-v100", crd.LABEL_REPLICA: "0"},
        },
        "spec": {"nodeName": "k80-0"},
        "status": {"phase": phase},
    }


def finished(obj: dict[str, Any], phase: str = "Running") -> completion.Completion | None:
    store = cluster([obj])
    store.upsert("pod", pod(phase))
    snap = store.freeze(now=SECONDS)
    hist = history.History()
    hist.run_in("k80", RATE, 0.0)
    hist.accounted_at = 0.0
    hist.advance(SECONDS)
    assert hist.work_done == TOTAL
    (only,) = snap.jobs
    return completion.completions(snap, {only.key: hist}).get(only.key)


def test_a_job_that_reported_nothing_completes_from_its_accounted_work() -> None:
    done = finished(fjob())
    assert done is not None
    assert (done.phase, done.reason) == (crd.PHASE_SUCCEEDED, "TotalWorkDone")
    assert done.message.startswith("work done ") and "(reported)" not in done.message


def test_reported_steps_win_over_accounted_work() -> None:
    assert finished(fjob({"progress": {"stepsDone": 0}})) is None
    done = finished(fjob({"progress": {"stepsDone": TOTAL}}))
    assert done is not None and done.message.startswith("steps done ")
    assert "(reported)" in done.message


def test_every_pod_exiting_0_finishes_the_job_work_left_or_not() -> None:
    done = finished(fjob({"progress": {"stepsDone": 10}}), phase=crd.PHASE_SUCCEEDED)
    assert done is not None
    assert (done.phase, done.reason) == (crd.PHASE_SUCCEEDED, "Completed")

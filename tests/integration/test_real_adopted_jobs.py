"""Bring your own Job on a real node: two Indexed batch/v1 Jobs running the reference training
workload take turns on one 4-GPU node, resume from their checkpoints and complete.

One real node of the ``real_cluster`` fixture (the other is cordoned for the test), four fake
GPUs. ``ja`` and ``jb``: Indexed Jobs of 2 pods of 2 GPUs (``reference_jobs.train_batch_job``),
labelled ``walras.dev/managed``, created without ``suspend`` and without the chart's admission
policy, so Walras suspends them itself; each gang needs the whole node, so they time-share.
``plain``: the same Job without the label. The kube-controller-manager's Job controller makes and
deletes the Jobs' pods; the garbage collector deletes a deleted Job's mirror.

The oracles are the Job controller's conditions, the runtime's account of which containers ran
(``walras.testing.runtime_observer``) and what the workload logged in each container, and the
progress the workload itself reported through its pods (the mirror's ``stepsDone``).

Cost: one operator, rounds of 10 s; about two minutes on 2 shared cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_helpers import condition, list_jobs, start_operator, wait_for
from real_helpers import cordon, phase, steps_done

from walras.testing import devcluster, realnodes
from walras.testing.reference_jobs import train_batch_job
from walras.testing.runtime_observer import Observer

pytestmark = pytest.mark.slow

ROUND_S = 10.0
JOBS = "/apis/batch/v1"


def _jobs_path(ns: str, name: str = "") -> str:
    return f"{JOBS}/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def _batch_job(api: Any, ns: str, name: str) -> dict[str, Any]:
    job: dict[str, Any] = devcluster.request(api, "GET", _jobs_path(ns, name))
    return job


def _pods_of(api: Any, ns: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = devcluster.request(
        api, "GET", f"/api/v1/namespaces/{ns}/pods", query={"labelSelector": f"job-name={job}"}
    )["items"]
    return items


def test_two_adopted_jobs_time_share_one_real_node_resume_and_complete(
    api: Any,
    ns: str,
    observer: Observer,
    real_cluster: realnodes.RealCluster,
    tmp_path: Path,
) -> None:
    # 2,000 steps at 100 steps/s: 20 s of running per Job, two or more slices of 10 s each
    # (the first slice of each also pays the pods' start), so each gang is preempted at least
    # once by the other and must resume from its checkpoint.
    steps = 2000
    node = real_cluster.nodes[0].name
    others = [n.name for n in real_cluster.nodes[1:]]
    jobs = ["ja", "jb"]
    plain = train_batch_job("plain", tmp_path / "plain", steps)
    plain["metadata"]["labels"] = {}
    op = None
    try:
        cordon(api, others, True)
        for job in jobs:
            devcluster.request(
                api, "POST", _jobs_path(ns), body=train_batch_job(job, tmp_path / job, steps)
            )
        devcluster.request(api, "POST", _jobs_path(ns), body=plain)
        # Not suspended and no operator yet: the Job controller makes each Job's pods at once;
        # no scheduler binds them (only Walras binds pods here), so none runs.
        early = wait_for(
            lambda: [p["metadata"]["name"] for j in jobs for p in _pods_of(api, ns, j)],
            60,
            "the Job controller to make the pods",
        )
        op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)
        for job in jobs:
            wait_for(
                lambda job=job: condition(_batch_job(api, ns, job), "Complete"),
                420,
                f"Job {job} Complete",
                1.0,
            )
        for job in jobs:
            wait_for(lambda job=job: phase(api, ns, job) == "Succeeded", 60, f"mirror {job}")
            # backoffLimit 0, and no failure counted: a slice end's pods (deleted by the Job
            # controller on suspension) count neither as failures nor as successes.
            status = _batch_job(api, ns, job)["status"]
            assert not status.get("failed"), status
            assert status.get("succeeded") == 2, status

        # Deleting a Job deletes its mirror (garbage collector, through the ownerReference).
        devcluster.request(
            api, "DELETE", _jobs_path(ns, "ja"), query={"propagationPolicy": "Background"}
        )
        wait_for(
            lambda: "ja" not in {j["metadata"]["name"] for j in list_jobs(api, ns)},
            60,
            "the mirror of the deleted Job to go",
        )
        log = op.log_text()
    finally:
        if op is not None:
            op.terminate()
        cordon(api, others, False)
    assert not observer.errors, observer.errors
    assert observer.over_committed({n.name: n.gpus for n in real_cluster.nodes}) == []
    assert observer.duplicate_gangs() == []

    # No container ran but those of pods Walras placed: every container the runtime ran in the
    # namespace belongs to a pod of a started gang (its round on the template Walras patched),
    # on the one node; none of the pods made before the operator ran.
    ran = {c.pod for s in observer.samples for cs in s.containers.values() for c in cs}
    assert ran, "no container ran"
    for pod in ran:
        seen = observer.pods.get(pod)
        assert seen is not None and seen.round >= 0 and seen.node == node, (pod, seen)
    assert not ran & set(early), ran & set(early)

    for job in jobs:
        # The progress the workload reported, through the mirror: exactly its total work.
        if job != "ja":  # ja's mirror is gone with ja; jb's is read here
            assert steps_done(api, ns, job) == steps
        starts = observer.starts(job)
        assert len(starts) >= 2, f"{job} ran in {len(starts)} slice(s): not time-shared"
        logs = [observer.log(p.name) for p in starts]
        assert logs[0].start_step == 0, (starts[0].name, logs[0])
        assert logs[-1].done == steps, (starts[-1].name, logs[-1])
        for before, after, pod in zip(logs, logs[1:], starts[1:], strict=False):
            # Every slice end: SIGTERM, a checkpoint of the step reached; the next slice resumes
            # from exactly that step.
            assert before.stop_reason == "SIGTERM", (pod.name, before)
            assert before.stopped_at is not None and before.stopped_at in before.checkpoints
            assert after.start_step == before.stopped_at, (pod.name, before, after)
        # Replica 1 never writes a checkpoint (JOB_COMPLETION_INDEX is 1): only replica 0 does.
        for replica_1 in observer.starts(job, replica=1):
            assert observer.log(replica_1.name).checkpoints == [], replica_1.name

    # The unlabelled Job: never suspended, never written to, no mirror, its pods never bound.
    untouched = _batch_job(api, ns, "plain")
    assert untouched["spec"].get("suspend") is not True
    template_meta = untouched["spec"]["template"].get("metadata") or {}
    written = {**(template_meta.get("labels") or {}), **(template_meta.get("annotations") or {})}
    assert not [k for k in written if k.startswith("walras.dev/")], written
    assert "plain" not in {j["metadata"]["name"] for j in list_jobs(api, ns)}
    assert all(not p["spec"].get("nodeName") for p in _pods_of(api, ns, "plain"))
    assert "/plain" not in log

"""The reference training workload under the operator on real nodes: real processes are
time-shared, preempted with SIGTERM, checkpoint and resume.

Two real nodes with four fake GPUs each (the ``real_cluster`` fixture); jobs are
``examples/workloads/fungiblejob.yaml`` with a small model paced at 10 ms a step, gangs of two
pods of two GPUs. The oracles are the processes' and the runtimes' own accounts, never the
operator's: what ``walras.workload`` logged in each container (read through the kubelet while the
pod exists), and which containers each node's containerd runs with which devices
(``NVIDIA_VISIBLE_DEVICES`` in the container's spec, set by the kubelet's device manager),
sampled every second by :class:`walras.testing.runtime_observer.Observer`; the fixtures are
this directory's ``conftest.py``.

Cost: one operator per test, rounds of 15 s; the module takes a few minutes on 2 shared cores
(the slowest test waits out the node lifecycle controller's grace period).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from operator_helpers import REPO, create_job, get_job, start_operator, wait_for
from real_helpers import cordon, phase, steps_done

from walras.testing import devcluster, invariants, realnodes
from walras.testing.reference_jobs import train_job
from walras.testing.runtime_observer import Observer
from walras.workload import checkpoint

pytestmark = pytest.mark.slow

ROUND_S = 15.0
GPUS_PER_NODE = 4


def test_three_jobs_time_share_two_real_nodes_and_resume_where_they_stopped(
    api: Any,
    ns: str,
    observer: Observer,
    real_cluster: realnodes.RealCluster,
    tmp_path: Path,
) -> None:
    # Three gangs of 4 GPUs on 8 GPUs: two run at a time, the third waits, so the rotation
    # preempts. Each needs 5,000 steps at 100 steps/s, 50 s of running, about 3.3 rounds of
    # 15 s: 10 gang-rounds on 2 places, at least 5 rounds of work plus the restarts.
    steps = 5000
    jobs = ["ja", "jb", "jc"]
    for job in jobs:
        create_job(api, ns, train_job(job, tmp_path / job, steps))
    op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)
    try:
        first_round = op.rounds()
        for job in jobs:
            wait_for(lambda job=job: phase(api, ns, job) == "Succeeded", 600, f"{job} to finish")
        rounds = op.rounds() - first_round
    finally:
        op.terminate()
    time.sleep(2 * observer.interval)  # the last containers' exits are sampled

    assert not observer.errors, observer.errors
    gpus = {n.name: n.gpus for n in real_cluster.nodes}
    assert observer.over_committed(gpus) == []
    assert rounds >= 6, f"only {rounds} rounds"
    preempted_jobs = 0
    for job in jobs:
        assert steps_done(api, ns, job) == steps
        starts = observer.starts(job)
        assert starts, f"no pod of {job} seen"
        logs = [observer.log(p.name) for p in starts]
        # The first start found no checkpoint; the last one ran to the end. The job's steps are
        # the most any replica reported (a synchronous gang's replicas report the same counter;
        # the reference workload's replicas are not synchronised, so one may be a few steps
        # behind): a replica of the last start reached the total, and the job ended on that.
        assert logs[0].start_step == 0, (starts[0].name, logs[0])
        last = [p for p in observer.pods.values() if p.job == job and p.round == starts[-1].round]
        assert max(observer.log(p.name).done or 0 for p in last) == steps, [
            (p.name, observer.log(p.name)) for p in last
        ]
        for before, after, pod in zip(logs, logs[1:], starts[1:], strict=False):
            # Every preemption: SIGTERM, a checkpoint of the step reached, exit 0 ...
            assert before.stop_reason == "SIGTERM", (pod.name, before)
            assert before.stopped_at is not None and before.stopped_at in before.checkpoints
            # ... and the next start resumes from exactly that step: no step lost.
            assert after.start_step == before.stopped_at, (pod.name, before, after)
        # Replica 1 of each start resumes from a checkpoint replica 0 wrote: the one this start
        # resumed from, or one written since (replica 0 checkpoints ahead at once when the
        # advance notice of its stop is already there, and may do so before replica 1 reads).
        for replica_1 in observer.starts(job, replica=1):
            peer = observer.log(next(p.name for p in starts if p.round == replica_1.round))
            written = {peer.start_step, *peer.checkpoints}
            assert observer.log(replica_1.name).start_step in written, (replica_1.name, peer)
        preempted_jobs += len(starts) > 1
    assert preempted_jobs >= 2, "the jobs were not time-shared"


def test_operator_sigkilled_mid_round_never_leaves_two_copies_of_a_gang(
    api: Any,
    ns: str,
    observer: Observer,
    real_cluster: realnodes.RealCluster,
    tmp_path: Path,
) -> None:
    steps = 4000
    jobs = ["ka", "kb", "kc"]
    for job in jobs:
        create_job(api, ns, train_job(job, tmp_path / job, steps))
    op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)
    try:
        # Killed twice, each time while gangs run, half a round after a round began.
        for _ in range(2):
            wait_for(
                lambda: any(c for s in observer.samples[-1:] for c in s.containers.values()),
                300,
                "a gang running",
            )
            start = op.rounds()
            wait_for(lambda op=op, start=start: op.rounds() > start, 120, "the next round")
            time.sleep(ROUND_S / 2)
            op.kill()
            op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)
        for job in jobs:
            wait_for(lambda job=job: phase(api, ns, job) == "Succeeded", 600, f"{job} to finish")
    finally:
        op.terminate()
    assert not observer.errors, observer.errors
    assert observer.duplicate_gangs() == []
    assert observer.over_committed({n.name: n.gpus for n in real_cluster.nodes}) == []
    for job in jobs:
        assert steps_done(api, ns, job) == steps


def test_progress_reported_by_a_real_process_and_refused_for_another_pod(
    api: Any, ns: str, real_cluster: realnodes.RealCluster
) -> None:
    # The documented grant: the example's Role (patch on pods, set up in ``ns``) and the chart's
    # admission policy for the ServiceAccount ``trainer`` (test_workload_rbac.py checks it with
    # a token made by the test; here the workload's own client in a real container, with the
    # token the kubelet mounts and the in-cluster address).
    release = devcluster.unique_name("rw-rbac")
    docs = [
        d
        for d in render_chart(
            "--set",
            f"fullnameOverride={release}",
            "--set",
            f"progressReporter.namespaces={{{ns}}}",
            "--set",
            "progressReporter.serviceAccounts={trainer}",
        )
        if d["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]
    assert len(docs) == 2
    admission = "/apis/admissionregistration.k8s.io/v1"
    plural = {
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }
    for doc in docs:
        devcluster.request(api, "POST", f"{admission}/{plural[doc['kind']]}", body=doc)
    # A pod of the namespace that is not the reporter's (never scheduled: no scheduler runs).
    other = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other"},
        "spec": {"containers": [{"name": "c", "image": realnodes.WORKLOAD_IMAGE}]},
    }
    devcluster.request(api, "POST", f"/api/v1/namespaces/{ns}/pods", body=other)
    # The API server loads a new policy within seconds: the process retries until patching the
    # other pod is refused (an accepted try is undone by the test below), then reports its own.
    script = (
        "import time\n"
        "from walras.workload import ApiServer, ReportError, pod_identity, progress_patch\n"
        "ns, me = pod_identity()\n"
        "server = ApiServer.from_env()\n"
        "for _ in range(120):\n"
        "    try:\n"
        "        server.patch_pod(ns, 'other', progress_patch(7))\n"
        "    except ReportError as exc:\n"
        "        print('OTHER=' + str(exc).replace(chr(10), ' '), flush=True)\n"
        "        break\n"
        "    time.sleep(0.5)\n"
        "server.patch_pod(ns, me, progress_patch(123))\n"
        "print('OWN=ok', flush=True)\n"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reporter"},
        "spec": {
            "nodeName": real_cluster.nodes[0].name,
            "serviceAccountName": "trainer",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": realnodes.WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", script],
                }
            ],
        },
    }
    try:
        devcluster.request(api, "POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
        path = f"/api/v1/namespaces/{ns}/pods"

        def ended() -> dict[str, Any] | None:
            got: dict[str, Any] = devcluster.request(api, "GET", f"{path}/reporter")
            phase = (got.get("status") or {}).get("phase")
            return got if phase in ("Succeeded", "Failed") else None

        reporter = wait_for(ended, 180, "the reporting process to end")
        log = pod_log(api, ns, "reporter")
        assert reporter["status"]["phase"] == "Succeeded", log
        lines = log.splitlines()
        refusal = next((x for x in lines if x.startswith("OTHER=")), "")
        assert "HTTP 403" in refusal and "only its own pod" in refusal, log
        assert "OWN=ok" in lines
        # What the operator reads: the number the process sent, on its own pod.
        annotations = reporter["metadata"].get("annotations") or {}
        assert annotations.get("walras.dev/steps-done") == "123"
    finally:
        for doc in reversed(docs):
            name = doc["metadata"]["name"]
            devcluster.request(api, "DELETE", f"{admission}/{plural[doc['kind']]}/{name}")


def pod_log(api: Any, ns: str, name: str) -> str:
    """The container's output, through the API server and the node's kubelet."""
    verb, url, headers, body, _ = api.param_serialize(
        method="GET",
        resource_path=f"/api/v1/namespaces/{ns}/pods/{name}/log",
        header_params={"Accept": "*/*"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(verb, url, header_params=headers, body=body)
    text: str = response.read().decode()
    assert response.status == 200, text
    return text


def render_chart(*args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [devcluster.tool("helm"), "template", "walras", str(REPO / "charts" / "walras"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_kubelet_and_runtime_killed_under_a_gang_moves_it_whole_and_it_resumes(
    api: Any,
    ns: str,
    real_cluster: realnodes.RealCluster,
    tmp_path: Path,
) -> None:
    # A node of this test's own (the module's two stay up for the other tests), the only one
    # uncordoned when the gang is placed, so the gang runs there.
    cp = real_cluster.control_plane
    extra = realnodes.add_real_node(
        cp, "real-lost", gpu_type="fake-a100", gpus=4, images=[realnodes.workload_image_archive()]
    )
    others = [n.name for n in real_cluster.nodes]
    observer = Observer(cp, [*real_cluster.nodes, extra], ns)
    observer.start()
    steps = 6000  # 60 s at 100 steps/s: still running when the node is declared lost
    op = None
    try:
        cordon(api, others, True)
        create_job(api, ns, train_job("survivor", tmp_path / "ckpt", steps, checkpoint_every_s=3))
        op = start_operator(cp, tmp_path, round_seconds=ROUND_S)

        def checkpointed_on_extra() -> bool:
            starts = observer.starts("survivor")
            return bool(
                starts
                and starts[-1].node == extra.name
                and observer.log(starts[-1].name).checkpoints
            )

        wait_for(checkpointed_on_extra, 180, "the gang to run and checkpoint on real-lost")
        cordon(api, others, False)
        lost_pods = {p.name for p in observer.pods.values()}
        # The machine dies: kubelet, the containers' processes, then containerd, all SIGKILL.
        tasks = extra.running_tasks()
        os.kill(extra.kubelet_pid, signal.SIGKILL)
        for pid in tasks.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.kill(extra.containerd_pid, signal.SIGKILL)
        # The newest complete checkpoint on the volume, as the workload's own library finds it.
        found = checkpoint.latest(tmp_path / "ckpt")
        assert found is not None
        last_checkpoint = found[0]

        def not_ready() -> bool:
            node = devcluster.request(api, "GET", f"/api/v1/nodes/{extra.name}")
            ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
            return bool(ready["status"] != "True")

        # The node lifecycle controller's grace period (50 s unless
        # WALRAS_NODE_MONITOR_GRACE_PERIOD says otherwise) and its 5 s monitor period.
        grace = float(os.environ.get("WALRAS_NODE_MONITOR_GRACE_PERIOD", "50s").rstrip("s"))
        wait_for(not_ready, grace + 60, "the node to turn NotReady")

        def moved() -> list[Any]:
            fresh = [p for p in observer.starts("survivor") if p.name not in lost_pods]
            return fresh if fresh and fresh[-1].node in others else []

        wait_for(moved, 6 * ROUND_S, "the gang placed again on the other nodes")
        wait_for(lambda: phase(api, ns, "survivor") == "Succeeded", 300, "the job to finish")
    finally:
        if op is not None:
            op.terminate()
        observer.stop()
        cordon(api, others, False)
        with contextlib.suppress(realnodes.RealNodeError):
            realnodes.stop_real_node(cp, extra)
        devcluster.delete_nodes(api, [extra.name])
    # Following the lost pods' logs fails with their kubelet; nothing else may.
    assert [e for e in observer.errors if not any(p in e for p in lost_pods)] == []
    assert observer.unanswered.get(extra.name, 0) > 0  # the runtime was really gone
    # The chaos suite's invariants, from the runtimes: never two copies of the gang running,
    # no node over its devices; and no traceback in the operator's log.
    assert observer.duplicate_gangs() == []
    gpus = {n.name: n.gpus for n in [*real_cluster.nodes, extra]}
    assert observer.over_committed(gpus) == []
    assert op is not None and invariants.tracebacks(op.log_text()) == []
    fresh = [p for p in observer.pods.values() if p.name not in lost_pods]
    # Placed whole: every replica of the new start, on the nodes that stayed.
    rounds = {p.round for p in fresh}
    for round_no in rounds:
        members = [p for p in fresh if p.round == round_no]
        assert sorted(p.replica for p in members) == [0, 1], members
        assert all(p.node in others for p in members), members
    first = min(rounds)
    resumed = [observer.log(p.name).start_step for p in fresh if p.round == first]
    # From the last checkpoint the lost gang wrote: nothing after it survived the machine.
    assert resumed == [last_checkpoint, last_checkpoint]
    assert steps_done(api, ns, "survivor") == steps


def test_pods_that_never_start_are_named_within_two_rounds_and_hold_no_gpus(
    api: Any,
    ns: str,
    observer: Observer,
    real_cluster: realnodes.RealCluster,
    tmp_path: Path,
) -> None:
    # An image the nodes do not have (no registry; imagePullPolicy Never): the kubelet admits
    # the pods, hands them their devices, and reports ErrImageNeverPull; no container starts.
    # The job asks for all 8 GPUs, so while it holds them no other job runs.
    broken = train_job("no-image", tmp_path / "no-image", 100, gpus_per_pod=4)
    broken["spec"]["template"]["spec"]["containers"][0]["image"] = "localhost/missing:1"
    good = train_job("good", tmp_path / "good", 500, gpus_per_pod=4)
    create_job(api, ns, broken)
    op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)
    try:
        wait_for(lambda: observer.starts("no-image"), 120, "the broken job's pods")
        create_job(api, ns, good)

        def reported() -> bool:
            pods = client.CoreV1Api(api).list_namespaced_pod(ns).items
            return any(
                (cs.state.waiting.reason if cs.state and cs.state.waiting else "")
                == "ErrImageNeverPull"
                for p in pods
                if p.metadata.name.startswith("no-image")
                for cs in (p.status.container_statuses or [])
            )

        def named() -> bool:
            status = get_job(api, ns, "no-image").get("status") or {}
            return any(
                "ErrImageNeverPull" in f"{c.get('reason', '')} {c.get('message', '')}"
                for c in status.get("conditions") or []
            )

        # The kubelet's own latency is not the operator's: count from its report. A condition
        # names the kubelet's reason before a third full round ends after it (a report landing
        # while a round runs is read by the next one, the one after at the latest, and a round
        # counts once its log line is written, so the poll can see one more). Counted in
        # rounds, not seconds, so a loaded machine slows both sides alike; the wall limits
        # only end a hang.
        wait_for(reported, 300, "the kubelet to report ErrImageNeverPull")
        start = op.full_rounds()
        wait_for(lambda: named() or op.full_rounds() - start > 2, 300, "the condition")
        assert named(), f"no condition named ErrImageNeverPull in {op.full_rounds() - start} rounds"
        named_at = time.time()
        wait_for(lambda: phase(api, ns, "good") == "Succeeded", 300, "the good job to finish")
    finally:
        op.terminate()
    # Once named, the broken job never again holds devices: no pod of it bound after that.
    later = [p for p in observer.pods.values() if p.job == "no-image" and p.first_seen > named_at]
    assert later == []

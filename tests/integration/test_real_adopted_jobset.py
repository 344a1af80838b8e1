"""Bring your own JobSet on a real node: a JobSet of two replicated Jobs running the reference
training workload is adopted as one gang, runs whole on one real node and completes.

One real node of the ``real_cluster`` fixture (the other is cordoned for the test), four fake
GPUs, and JobSet's own controller (``sigs.k8s.io/jobset``, with its webhooks) on that control
plane. ``pair``: a JobSet labelled ``walras.dev/managed``, created suspended (what the chart's
admission policy does), of two replicated Jobs, ``leader`` and ``workers``, one Job of one pod of
2 GPUs each (``reference_jobs.train_batch_job``'s pod template): a gang of 2 pods that needs the
whole node. JobSet's controller makes the child Jobs, the kube-controller-manager's Job
controller their pods, Walras binds them, the node's kubelet runs them, and JobSet's controller
sets ``Completed`` when both Jobs complete.

The replica of a pod: both child Jobs are Indexed Jobs of one pod, so each pod's completion index
is 0; the template gives the workload ``$WALRAS_REPLICA`` from the pod's
``jobset.sigs.k8s.io/job-global-index`` label (0 for the leader, 1 for the worker) through the
downward API, so that only the leader writes checkpoints.

The oracles are JobSet's controller's condition, the runtime's account of which containers ran
(``walras.testing.runtime_observer``) and what the workload logged in each, and the progress the
workload reported through its pods (the mirror's ``stepsDone``).

Cost: one operator, the JobSet controller, rounds of 10 s; about a minute on 2 shared cores.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import condition, list_jobs, start_operator, wait_for
from real_helpers import cordon, phase, steps_done

from walras.testing import devcluster, realnodes
from walras.testing.reference_jobs import train_batch_job
from walras.testing.runtime_observer import Observer

pytestmark = pytest.mark.slow

ROUND_S = 10.0
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"


@pytest.fixture(scope="module")
def jobset_controller(real_cluster: realnodes.RealCluster) -> Iterator[None]:
    """JobSet's controller and webhooks on the real-node control plane, for this module."""
    if not devcluster.jobset_available():
        message = (
            "the JobSet controller is not built: run `make tools` (hack/control-plane.sh build)"
        )
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail(message + " [WALRAS_REQUIRE_APISERVER=1]", pytrace=False)
        pytest.skip(message)
    devcluster.start_jobset(real_cluster.control_plane)
    try:
        yield
    finally:
        devcluster.stop_jobset(real_cluster.control_plane)


def _jobset(name: str, checkpoints: Path, steps: int) -> dict[str, Any]:
    """A JobSet of a leader and a worker Job, each one pod of the reference workload (2 GPUs)."""
    job = train_batch_job(name, checkpoints, steps, pods=1)
    template = job["spec"]["template"]
    container = template["spec"]["containers"][0]
    container["env"].append(
        {
            "name": "WALRAS_REPLICA",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{GLOBAL_INDEX}']"}},
        }
    )
    replicated = [
        {"name": rjob, "replicas": 1, "template": {"spec": copy.deepcopy(job["spec"])}}
        for rjob in ("leader", "workers")
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": job["metadata"],
        # Suspended, as the chart's admission policy creates a labelled JobSet.
        "spec": {"suspend": True, "replicatedJobs": replicated},
    }


def test_a_jobset_runs_as_one_gang_on_a_real_node_and_completes(
    api: Any,
    ns: str,
    observer: Observer,
    real_cluster: realnodes.RealCluster,
    jobset_controller: None,
    tmp_path: Path,
) -> None:
    # 2,000 steps at 100 steps/s: about 20 s of running, in one or two slices of 10 s.
    steps = 2000
    node = real_cluster.nodes[0].name
    others = [n.name for n in real_cluster.nodes[1:]]
    sets = f"{JOBSETS}/namespaces/{ns}/jobsets"
    op = None
    try:
        cordon(api, others, True)

        # JobSet's webhook is called once the API server published the CRD's schema: until then
        # a create may be refused with 503 (ServiceUnavailable), and retried.
        def create() -> dict[str, Any] | None:
            try:
                made: dict[str, Any] = devcluster.request(
                    api, "POST", sets, body=_jobset("pair", tmp_path / "pair", steps)
                )
            except ApiException as exc:
                if exc.status != 503:
                    raise
                return None
            return made

        wait_for(create, 120, "the JobSet to be admitted", 1.0)
        op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)

        def mirrored() -> dict[str, Any] | None:
            found = [j for j in list_jobs(api, ns) if j["metadata"]["name"] == "pair"]
            return found[0] if found else None

        mirror = wait_for(mirrored, 60, "the JobSet's mirror FungibleJob")
        assert mirror["spec"]["workloadRef"]["kind"] == "JobSet"
        assert mirror["spec"]["replicas"] == 2  # leader + worker: one gang of every pod

        def completed() -> dict[str, Any] | None:
            return condition(devcluster.request(api, "GET", f"{sets}/pair"), "Completed")

        done = wait_for(completed, 420, "JobSet's controller to set Completed", 1.0)
        assert done["status"] == "True"
        wait_for(lambda: phase(api, ns, "pair") == "Succeeded", 60, "the mirror to follow")
        # The progress the workload reported, through the mirror: exactly its total work.
        assert steps_done(api, ns, "pair") == steps
    finally:
        if op is not None:
            op.terminate()
        cordon(api, others, False)
    assert not observer.errors, observer.errors
    assert observer.over_committed({n.name: n.gpus for n in real_cluster.nodes}) == []
    assert observer.duplicate_gangs() == []

    # Every pod of the JobSet ran on the one node, in a round Walras started.
    pods = {name: seen for name, seen in observer.pods.items() if seen.job == "pair"}
    children = {name.rsplit("-", 2)[0] for name in pods}
    assert children == {"pair-leader-0", "pair-workers-0"}, sorted(pods)
    for name, seen in pods.items():
        assert seen.round >= 0 and seen.node == node, (name, seen)

    # One gang: in every round, the leader's and the worker's containers ran at the same time
    # (a sample of the runtime shows both), and every round's pods are the two of them.
    rounds: dict[int, set[str]] = {}
    for name, seen in pods.items():
        rounds.setdefault(seen.round, set()).add(name.rsplit("-", 2)[0])
    any_ran: set[int] = set()  # rounds in which some container of the JobSet ran
    both_ran: set[int] = set()  # rounds in which one sample shows the leader's and the worker's
    for sample in observer.samples:
        running: dict[int, set[str]] = {}
        for cs in sample.containers.values():
            for c in cs:
                seen = observer.pods.get(c.pod)
                if c.namespace == ns and seen is not None and seen.job == "pair":
                    running.setdefault(seen.round, set()).add(c.pod.rsplit("-", 2)[0])
        any_ran |= set(running)
        both_ran |= {r for r, kids in running.items() if kids == children}
    assert any_ran, "no container of the JobSet ran"
    # Never some without the others: a round whose leader ran without its worker (or the
    # reverse) through a whole slice would be in any_ran only.
    assert any_ran == both_ran, (sorted(any_ran), sorted(both_ran))
    for r in both_ran:
        assert rounds[r] == children, (r, rounds)

    # The workload's own account: the leader (replica 0) started from step 0 and finished the
    # total work; the worker (replica 1 by its job-global-index) never wrote a checkpoint.
    leader = sorted(
        (s for n, s in pods.items() if n.startswith("pair-leader-0")), key=lambda s: s.round
    )
    worker = [s for n, s in pods.items() if n.startswith("pair-workers-0")]
    assert observer.log(leader[0].name).start_step == 0, leader[0].name
    last = observer.log(leader[-1].name)
    # The saving replica checkpoints at its total work: the worker would have too, had it been
    # a replica 0 (the completion index of its own Job), so its empty list below is meaningful.
    assert last.done == steps and steps in last.checkpoints, (leader[-1].name, last)
    for seen in worker:
        assert observer.log(seen.name).checkpoints == [], seen.name

"""The operator's adoption step (``walras.operator.adoption``) on a scripted Api: a round's pods of
a mirror become one start or one suspension of its Job, other jobs' pods pass to the binder, a
bad gang is refused with a condition and an Event and never started, a Job running that Walras
did not start is suspended, and the Job's own outcome reaches its mirror.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from functools import partial
from typing import Any

from operator_fakes import FakeApi

from walras.core import admission, crd, model, realise
from walras.core.adapters import base, batch_job, mirror
from walras.kube import writes
from walras.operator import adoption, cache, handlers
from walras.operator.round_report import RoundReport
from walras.operator.round_scratch import RoundScratch

GPU = "nvidia.com/gpu"
JOB = batch_job.BatchJob()


class AdoptionApi(FakeApi):
    """The scripted Api, with the generic writes adoption makes."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.event_kinds: list[str] = []
        self.replaced: list[tuple[str, dict[str, Any]]] = []

    async def create_object(self, path: str, body: Mapping[str, Any]) -> writes.Result:
        self.created.append(dict(body))
        return writes.Result(writes.Outcome.OK, 201)

    async def patch_object(self, path: str, patch: Mapping[str, Any]) -> writes.Result:
        self.patches.append((path, dict(patch)))
        return writes.Result(writes.Outcome.OK, 200)

    async def replace_spec(self, path: str, spec: Mapping[str, Any]) -> writes.Result:
        self.replaced.append((path, dict(spec)))
        return writes.Result(writes.Outcome.OK, 200)

    async def post_event(self, job: Any, *, reason: str, message: str, **kw: Any) -> writes.Result:
        self.event_kinds.append(str(kw.get("kind")))
        return await super().post_event(job, reason=reason, message=message)


def a_job(name: str, *, suspend: bool = True, completions: int = 2) -> dict[str, Any]:
    container = {"name": "t", "image": "x", "resources": {"limits": {GPU: "2"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"{name}-uid",
            "generation": 1,
            "labels": {base.LABEL_MANAGED: "true"},
            "annotations": {base.ANN_THROUGHPUT: "g=1"},
        },
        "spec": {
            "suspend": suspend,
            "completionMode": "Indexed",
            "parallelism": 2,
            "completions": completions,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def mirror_in_store(
    cluster: cache.ClusterCache, obj: dict[str, Any], *, own: bool = False
) -> model.JobSpec:
    """The mirror of ``obj`` as the watch stores it (``own``: a FungibleJob of its own)."""
    body = mirror.manifest(JOB, obj, mirror.spec_of(JOB.gang(obj), obj["metadata"]["annotations"]))
    if own:
        del body["spec"]["workloadRef"]
    body["metadata"]["uid"] = f"{obj['metadata']['name']}-mirror-uid"
    cluster.store.upsert("job", body)
    job = cluster.store.jobs[("ns", obj["metadata"]["name"])]
    assert isinstance(job, model.JobSpec)
    return job


def creates(job: model.JobSpec, nodes: list[str]) -> list[realise.PodCreate]:
    out = []
    for replica, node in enumerate(nodes):
        name = realise.pod_name(job.name, 3, replica)
        manifest = realise.pod_manifest(
            job,
            name=name,
            replica=replica,
            node=node,
            group="g",
            gpu_type="g",
            resource_name=GPU,
            gpus=2,
            round_no=3,
            fraction=1.0,
            price=1.0,
        )
        out.append(realise.PodCreate(job, name, replica, node, 2, "g", 3, partial(dict, manifest)))
    return out


def pod(job: model.JobSpec, replica: int) -> model.PodInfo:
    return model.PodInfo(
        namespace="ns",
        name=f"{job.name}-{replica}-x",
        uid=f"{job.name}-{replica}",
        job=job.name,
        replica=replica,
        node="n0",
        planned_node="n0",
        group="g",
        phase="Running",
        terminating=False,
        round=2,
        requests={GPU: 2.0},
    )


def scratch() -> RoundScratch:
    return RoundScratch(3, 0.0, False, False, RoundReport(round=3, incremental=False))


def at(now: float) -> RoundScratch:
    return RoundScratch(3, now, False, False, RoundReport(round=3, incremental=False))


def setup(*objs: dict[str, Any]) -> tuple[adoption.Adoption, AdoptionApi, cache.ClusterCache]:
    api = AdoptionApi()
    cluster = cache.ClusterCache()
    cluster.store.upsert(
        "pool", {"metadata": {"name": "g"}, "spec": {"gpuType": "g", "nodeSelector": {}}}
    )
    adopt = adoption.Adoption(api, cluster, admission.Admission(lambda: 0.0))  # type: ignore[arg-type]
    for obj in objs:
        assert adopt.seen(JOB, {"type": "ADDED", "object": obj})
    return adopt, api, cluster


def test_a_mirrors_pods_become_one_start_and_other_pods_pass_through() -> None:
    job_a = a_job("a")
    adopt, api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    own = mirror_in_store(cluster, a_job("own"), own=True)  # same shape, not a mirror
    plan = realise.Realisation(
        creates=(*creates(mirror_a, ["n0", "n1"]), *creates(own, ["n2", "n2"])),
        deletes=(),
        jobs={},
    )
    left = asyncio.run(adopt.act(plan, scratch()))
    assert [c.job.name for c in left.creates] == ["own", "own"]
    (path, patch), *_ = api.patches
    assert path == "/apis/batch/v1/namespaces/ns/jobs/a" and len(api.patches) == 1
    assert patch["spec"]["suspend"] is False
    meta = patch["spec"]["template"]["metadata"]
    assert meta["annotations"][base.ANN_NODES] == "n0,n1"
    assert meta["annotations"][crd.ANN_ROUND] == "3"
    assert meta["labels"] == {crd.LABEL_JOB: "a", base.LABEL_MIRROR_UID: "a-mirror-uid"}
    assert api.created == []  # the mirror existed already


def test_a_running_mirror_whose_pods_the_plan_deletes_is_suspended() -> None:
    job_a = a_job("a", suspend=False)
    job_a["spec"]["template"]["metadata"] = {"labels": {base.LABEL_MIRROR_UID: "a-mirror-uid"}}
    adopt, api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    plan = realise.Realisation(
        creates=(),
        deletes=tuple(realise.PodDelete(pod(mirror_a, r), "SliceEnded") for r in (0, 1)),
        jobs={},
    )
    for r in (0, 1):
        cluster.store.pods[pod(mirror_a, r).key] = pod(mirror_a, r)
    left = asyncio.run(adopt.act(plan, scratch()))
    assert left.deletes == ()  # the Job controller deletes its pods, not the binder
    assert api.patches == [("/apis/batch/v1/namespaces/ns/jobs/a", {"spec": {"suspend": True}})]
    # ... and the binder binds none of them meanwhile.
    assert adopt.going == {("ns", "a-0-x"), ("ns", "a-1-x")}


def test_a_mirror_moved_while_running_is_suspended_now_and_started_later() -> None:
    job_a = a_job("a", suspend=False)
    job_a["spec"]["template"]["metadata"] = {"labels": {base.LABEL_MIRROR_UID: "a-mirror-uid"}}
    adopt, api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    plan = realise.Realisation(
        creates=tuple(creates(mirror_a, ["n1", "n1"])),
        deletes=tuple(realise.PodDelete(pod(mirror_a, r), "Rescheduled") for r in (0, 1)),
        jobs={},
    )
    asyncio.run(adopt.act(plan, scratch()))
    assert [p for _, p in api.patches] == [{"spec": {"suspend": True}}]


def test_a_bad_gang_gets_a_failed_mirror_an_event_and_is_never_started() -> None:
    bad = a_job("bad", completions=3, suspend=False)
    adopt, api, _cluster = setup(bad)
    asyncio.run(adopt.act(realise.Realisation((), (), {}), scratch()))
    (created,) = api.created
    assert created["spec"]["workloadRef"]["uid"] == "bad-uid"
    status = api.statuses["bad"]
    assert status["phase"] == "Failed"
    (condition,) = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Admitted",
        "False",
        adoption.REJECTED,
    )
    assert condition["message"].startswith("spec.parallelism:")
    ((reason, message),) = api.events
    assert reason == "NotAGang" and "spec.parallelism" in message
    assert api.event_kinds == ["Job"]
    # Created without suspend: it is suspended (and never started).
    assert [p for _, p in api.patches] == [{"spec": {"suspend": True}}]
    # The next round writes the rejection no more.
    api.patches.clear()
    bad = {**bad, "spec": {**bad["spec"], "suspend": True}}
    adopt.seen(JOB, {"type": "MODIFIED", "object": bad})
    asyncio.run(adopt.act(realise.Realisation((), (), {}), scratch()))
    assert len(api.events) == 1 and api.patches == []


def test_a_gpu_type_no_pool_has_is_refused() -> None:
    odd = a_job("odd")
    odd["metadata"]["annotations"] = {base.ANN_THROUGHPUT: "h100=3"}
    adopt, api, _cluster = setup(odd)
    asyncio.run(adopt.act(realise.Realisation((), (), {}), scratch()))
    ((reason, message),) = api.events
    assert reason == "UnknownGPUType" and "h100" in message


def test_a_job_running_that_walras_did_not_start_is_suspended_and_mirrored() -> None:
    early = a_job("early", suspend=False)
    adopt, api, _cluster = setup(early)
    asyncio.run(adopt.act(realise.Realisation((), (), {}), scratch()))
    assert [c["metadata"]["name"] for c in api.created] == ["early"]
    assert api.patches == [("/apis/batch/v1/namespaces/ns/jobs/early", {"spec": {"suspend": True}})]


def test_the_jobs_outcome_reaches_its_mirror_once() -> None:
    done = a_job("done")
    adopt, api, cluster = setup(done)
    mirror_in_store(cluster, done)
    # A watch delivers a new object each time.
    done = {**done, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert adopt.seen(JOB, {"type": "MODIFIED", "object": done})
    round_scratch = scratch()
    asyncio.run(adopt.act(realise.Realisation((), (), {}), round_scratch))
    assert api.statuses["done"]["phase"] == "Succeeded"
    # The round's status writer leaves it alone (its plan, made before, has it running), this
    # round and every round until the watch brings the mirror's new phase.
    assert round_scratch.ended == {("ns", "done")}
    api.statuses.clear()
    round_scratch = scratch()
    asyncio.run(adopt.act(realise.Realisation((), (), {}), round_scratch))
    assert api.statuses == {} and round_scratch.ended == {("ns", "done")}


def test_unlabelled_and_deleted_workloads_are_forgotten() -> None:
    job_a = a_job("a")
    adopt, _api, _cluster = setup(job_a)
    unlabelled = a_job("u")
    del unlabelled["metadata"]["labels"]
    assert not adopt.seen(JOB, {"type": "ADDED", "object": unlabelled})
    assert not adopt.seen(JOB, {"type": "DELETED", "object": job_a})
    assert adopt.workloads == {}


class Rounds:
    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1

    def poke_binds(self) -> None:
        pass


def adopted_pod(*, mirror_uid: str | None, controller: str = "Job") -> dict[str, Any]:
    labels = {crd.LABEL_JOB: "a", batch_job.COMPLETION_INDEX: "1"}
    if mirror_uid is not None:
        labels[base.LABEL_MIRROR_UID] = mirror_uid
    return {
        "metadata": {
            "name": "a-1-xyz",
            "namespace": "ns",
            "uid": "p1",
            "labels": labels,
            "annotations": {
                crd.ANN_ROUND: "3",
                base.ANN_NODES: "n0,n1",
                base.ANN_WORKLOAD_KIND: "Job",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1" if controller == "Job" else "apps/v1",
                    "kind": controller,
                    "name": "a",
                    "uid": "a-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "t", "resources": {"limits": {GPU: "2"}}}]},
    }


def test_a_started_jobs_pod_belongs_to_the_mirror_its_template_names() -> None:
    # The mirror's uid on a pod its Job made: the mirror's pod. Without it, or made by another
    # kind of controller: nobody's (a label alone on a ReplicaSet's pod proves nothing).
    assert handlers.controller_uid(adopted_pod(mirror_uid="m-uid")) == "m-uid"
    assert handlers.controller_uid(adopted_pod(mirror_uid=None)) == ""
    assert handlers.controller_uid(adopted_pod(mirror_uid="m-uid", controller="ReplicaSet")) == ""


def test_an_unbound_pod_of_a_started_job_runs_a_round_soon() -> None:
    cluster = cache.ClusterCache()
    rounds = Rounds()
    watcher = handlers.Watcher(cluster, rounds)
    watcher.apply("pod", {"type": "ADDED", "object": adopted_pod(mirror_uid="m-uid")})
    assert rounds.pokes == 1
    pod = cluster.store.pods[("ns", "a-1-xyz")]
    assert (pod.job, pod.replica, pod.planned_node) == ("a", 1, "n1")
    assert cluster.facts.owner[("ns", "a-1-xyz")] == "m-uid"


def test_a_mirror_whose_workload_was_not_seen_yet_gets_no_pods_from_the_binder() -> None:
    # Just after a restart the mirror may be known before its Job: its pods are still the Job's.
    adopt, api, cluster = setup()
    mirror_a = mirror_in_store(cluster, a_job("a"))
    plan = realise.Realisation(creates=tuple(creates(mirror_a, ["n0", "n0"])), deletes=(), jobs={})
    left = asyncio.run(adopt.act(plan, scratch()))
    assert left.creates == () and api.patches == []


def test_a_start_lifts_an_earlier_hold_of_the_mirror() -> None:
    # A bind of its pods failed once (they were gone): the hold must not keep the next start's
    # pods from being bound, as a gang the binder creates afresh is not kept either.
    job_a = a_job("a")
    adopt, _api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    adopt.rules.hold(mirror_a, "BindFailed", "pod gone")
    plan = realise.Realisation(creates=tuple(creates(mirror_a, ["n0", "n0"])), deletes=(), jobs={})
    asyncio.run(adopt.act(plan, scratch()))
    assert mirror_a.uid not in adopt.rules.blocked
    assert adopt.going == frozenset()


def test_a_finished_mirror_leaves_its_pods_one_round_to_exit_then_suspends() -> None:
    # The workload reported its total work: its mirror finished, and the plan deletes its pods.
    # Suspending the Job now would have the Job controller delete the pods uncounted while they
    # exit 0, and the Job would never be Complete: the pods get this round to exit.
    job_a = a_job("a", suspend=False)
    job_a["spec"]["template"]["metadata"] = {"labels": {base.LABEL_MIRROR_UID: "a-mirror-uid"}}
    adopt, api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    for r in (0, 1):
        cluster.store.pods[pod(mirror_a, r).key] = pod(mirror_a, r)
    plan = realise.Realisation(
        creates=(),
        deletes=tuple(realise.PodDelete(pod(mirror_a, r), "JobFinished") for r in (0, 1)),
        jobs={},
    )
    job_a["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20
    mirror_in_store(cluster, job_a)  # the mirror's template says 20 s
    left = asyncio.run(adopt.act(plan, at(100.0)))
    assert left.deletes == () and api.patches == []  # neither deleted nor suspended
    # Rounds within the pods' grace period (a round may follow the last at once) leave them.
    asyncio.run(adopt.act(plan, at(100.5)))
    asyncio.run(adopt.act(plan, at(119.9)))
    assert api.patches == []
    # Still running past it (a workload that does not exit at its total work): suspended, as a
    # slice end would have stopped it by then.
    asyncio.run(adopt.act(plan, at(120.0)))
    assert api.patches == [("/apis/batch/v1/namespaces/ns/jobs/a", {"spec": {"suspend": True}})]


def test_a_finished_mirror_whose_job_completed_meanwhile_is_not_suspended() -> None:
    job_a = a_job("a", suspend=False)
    job_a["spec"]["template"]["metadata"] = {"labels": {base.LABEL_MIRROR_UID: "a-mirror-uid"}}
    adopt, api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    plan = realise.Realisation(
        creates=(),
        deletes=tuple(realise.PodDelete(pod(mirror_a, r), "JobFinished") for r in (0, 1)),
        jobs={},
    )
    asyncio.run(adopt.act(plan, scratch()))
    done = {**job_a, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    adopt.seen(JOB, {"type": "MODIFIED", "object": done})
    asyncio.run(adopt.act(plan, scratch()))
    assert [p for _, p in api.patches if p == {"spec": {"suspend": True}}] == []


def test_a_rejected_job_fixed_in_place_is_admitted_again_through_its_mirror() -> None:
    bad = a_job("fix", completions=3)
    adopt, api, cluster = setup(bad)
    asyncio.run(adopt.act(realise.Realisation((), (), {}), scratch()))
    # The watch brings back the rejected mirror as created and marked.
    (created,) = api.created
    created["metadata"]["uid"] = "fix-mirror-uid"
    created["status"] = api.statuses["fix"]
    cluster.store.upsert("job", created)
    assert api.replaced == []
    # Fixed in place: completions = parallelism, a new generation.
    fixed = copy.deepcopy(bad)
    fixed["spec"]["completions"] = 2
    fixed["metadata"]["generation"] = 2
    assert adopt.seen(JOB, {"type": "MODIFIED", "object": fixed})
    api.statuses.clear()
    accepted = asyncio.run(adopt._reconcile(scratch()))
    assert accepted == {("ns", "fix")}
    ((path, spec),) = api.replaced
    assert path == "/apis/walras.dev/v1alpha1/namespaces/ns/fungiblejobs/fix"
    assert spec["replicas"] == 2 and spec["workloadRef"]["uid"] == "fix-uid"
    status = api.statuses["fix"]
    assert status["phase"] == "Pending"
    ((ctype, cstatus, reason),) = [
        (c["type"], c["status"], c["reason"]) for c in status["conditions"]
    ]
    assert (ctype, cstatus, reason) == ("Admitted", "True", adoption.READMITTED)
    assert len(api.events) == 1  # the rejection's only


def test_a_job_whose_indexes_succeeded_shrinks_its_mirrors_gang() -> None:
    job_a = a_job("a")
    adopt, api, cluster = setup(job_a)
    mirror_a = mirror_in_store(cluster, job_a)
    assert mirror_a.replicas == 2
    asyncio.run(adopt._reconcile(scratch()))
    assert api.replaced == []  # nothing changed
    done_1 = {**job_a, "status": {"completedIndexes": "1"}}
    adopt.seen(JOB, {"type": "MODIFIED", "object": done_1})
    asyncio.run(adopt._reconcile(scratch()))
    ((_, spec),) = api.replaced
    assert spec["replicas"] == 1
    assert api.statuses == {}  # admitted all along: no status written


def test_a_fungiblejob_of_its_own_with_a_workloads_name_is_never_replaced() -> None:
    job_a = a_job("a")
    adopt, api, cluster = setup(job_a)
    mirror_in_store(cluster, {**job_a, "spec": {**job_a["spec"], "parallelism": 2}}, own=True)
    adopt.seen(JOB, {"type": "MODIFIED", "object": {**job_a, "status": {"completedIndexes": "0"}}})
    asyncio.run(adopt._reconcile(scratch()))
    assert api.replaced == []

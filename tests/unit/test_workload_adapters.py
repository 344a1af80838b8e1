"""Workload adapters on manifests: the gang read from a Job/JobSet, the patches that suspend and
start it, its outcome, each pod's replica and node, and the mirror FungibleJob's spec.

Oracles: the manifests are written by hand with the numbers in them, and each expectation is
what the adapter's module docstring states for that manifest.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from walras.core import adapters, crd, model, priorities
from walras.core.adapters import base, batch_job, jobset, mirror
from walras.core.schema import fungiblejob

GPU = "nvidia.com/gpu"


def job(
    *,
    parallelism: int = 2,
    completions: int | None = 2,
    mode: str | None = "Indexed",
    gpus: str | None = "2",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": "example/train:1"}
    if gpus is not None:
        container["resources"] = {"limits": {GPU: gpus}}
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {
            "metadata": {"labels": {"app": "train"}},
            "spec": {"restartPolicy": "Never", "containers": [container]},
        },
    }
    if completions is not None:
        spec["completions"] = completions
    if mode is not None:
        spec["completionMode"] = mode
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "uid": "job-uid",
            "labels": {base.LABEL_MANAGED: "true"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def a_jobset(jobs: list[tuple[int, int, str]]) -> dict[str, Any]:
    """A JobSet of replicated Jobs ``(replicas, pods per Job, GPUs per pod)``."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "team-a", "uid": "js-uid"},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": f"rj{i}",
                    "replicas": replicas,
                    "template": {"spec": job(parallelism=pods, completions=pods, gpus=g)["spec"]},
                }
                for i, (replicas, pods, g) in enumerate(jobs)
            ],
        },
    }


# ------------------------------------------------------------------ batch/v1 Job


def test_an_indexed_job_with_parallelism_equal_to_completions_is_a_gang() -> None:
    gang = batch_job.BatchJob().gang(job(parallelism=3, completions=3, gpus="2"))
    assert (gang.replicas, gang.gpus_per_pod, gang.resource_name) == (3, 2, GPU)
    assert gang.template["metadata"] == {"labels": {"app": "train"}}


@pytest.mark.parametrize(
    ("manifest", "field", "reason"),
    [
        (job(completions=3), "spec.parallelism", "NotAGang"),
        (job(completions=None), "spec.parallelism", "NotAGang"),
        (job(mode=None), "spec.completionMode", "NotIndexed"),
        (job(mode="NonIndexed"), "spec.completionMode", "NotIndexed"),
        (
            job(gpus=None),
            "spec.template.spec.containers[*].resources.limits[nvidia.com/gpu]",
            "NoGPURequest",
        ),
        (
            job(gpus="0"),
            "spec.template.spec.containers[*].resources.limits[nvidia.com/gpu]",
            "NoGPURequest",
        ),
        (
            job(gpus="1.5"),
            "spec.template.spec.containers[*].resources.limits[nvidia.com/gpu]",
            "NoGPURequest",
        ),
        (
            job(gpus="lots"),
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "InvalidGPURequest",
        ),
    ],
)
def test_a_job_that_is_not_a_gang_is_refused_naming_the_field(
    manifest: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(base.BadWorkloadError) as refused:
        batch_job.BatchJob().gang(manifest)
    assert (refused.value.field, refused.value.reason) == (field, reason)


def test_suspend_and_start_patches() -> None:
    adapter = batch_job.BatchJob()
    obj = job()
    obj["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"x": 1}}
    assert adapter.suspend_patch(obj) == {"spec": {"suspend": True}}
    start = base.Start(["n1", "n0"], {"walras.dev/job": "train"}, {crd.ANN_ROUND: "7"})
    patch = adapter.start_patch(obj, start)
    assert patch["spec"]["suspend"] is False
    template = patch["spec"]["template"]
    # The template's own labels stay; Walras's are added; replica i goes to nodes[i].
    assert template["metadata"]["labels"] == {"app": "train", "walras.dev/job": "train"}
    assert template["metadata"]["annotations"] == {
        crd.ANN_ROUND: "7",
        base.ANN_NODES: "n1,n0",
        batch_job.ANN_INDEXES: "0,1",  # no index succeeded: the gang runs both, in order
    }
    affinity = template["spec"]["affinity"]
    assert affinity["podAntiAffinity"] == {"x": 1}
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n0", "n1"]}
    ]
    # Only the fields Kubernetes lets change on a suspended Job's template are in the patch.
    assert set(template) == {"metadata", "spec"} and set(template["spec"]) == {"affinity"}


def test_outcome_comes_from_the_jobs_own_conditions() -> None:
    adapter = batch_job.BatchJob()
    obj = job()
    assert adapter.outcome(obj) is None
    obj["status"] = {"conditions": [{"type": "Complete", "status": "False"}]}
    assert adapter.outcome(obj) is None
    obj["status"] = {"conditions": [{"type": "Complete", "status": "True", "reason": "Done"}]}
    assert adapter.outcome(obj) == base.Outcome(
        "Succeeded", "Done", "the Job's Complete condition is True"
    )
    obj["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "backoff"}]}
    outcome = adapter.outcome(obj)
    assert outcome is not None and (outcome.phase, outcome.message) == ("Failed", "backoff")


def test_a_started_jobs_pod_parses_as_the_mirrors_replica_on_its_node() -> None:
    pod = {
        "metadata": {
            "name": "train-1-abcde",
            "namespace": "team-a",
            "labels": {crd.LABEL_JOB: "train", batch_job.COMPLETION_INDEX: "1"},
            "annotations": {
                crd.ANN_ROUND: "7",
                base.ANN_NODES: "n1,n0",
                base.ANN_WORKLOAD_KIND: "Job",
            },
        },
        "spec": {"containers": []},
    }
    info = model.parse_pod(pod)
    assert (info.job, info.replica, info.planned_node, info.round) == ("train", 1, "n0", 7)
    # A pod Walras created itself keeps its own labels and annotations.
    own = copy.deepcopy(pod)
    own["metadata"]["labels"][crd.LABEL_REPLICA] = "0"
    own["metadata"]["annotations"][crd.ANN_NODE] = "n9"
    info = model.parse_pod(own)
    assert (info.replica, info.planned_node) == (0, "n9")


def test_once_some_indexes_succeeded_the_gang_is_the_indexes_left() -> None:
    # Four indexes; 0 and 2 exited 0 in an earlier slice (the Job controller's status says so):
    # it makes pods for 1 and 3 only, so the gang is those two pods.
    adapter = batch_job.BatchJob()
    obj = job(parallelism=4, completions=4)
    obj["status"] = {"completedIndexes": "0,2"}
    assert adapter.gang(obj).replicas == 2
    patch = adapter.start_patch(obj, base.Start(["n5", "n6"]))
    annotations = patch["spec"]["template"]["metadata"]["annotations"]
    assert annotations[batch_job.ANN_INDEXES] == "1,3"
    # Index 3's pod is replica 1 of the gang, on the second node; index 1's is replica 0.
    pods = {}
    for index in ("1", "3"):
        pod = {
            "metadata": {
                "name": f"train-{index}-x",
                "namespace": "team-a",
                "labels": {crd.LABEL_JOB: "train", batch_job.COMPLETION_INDEX: index},
                "annotations": {**annotations, base.ANN_WORKLOAD_KIND: "Job"},
            },
            "spec": {"containers": []},
        }
        info = model.parse_pod(pod)
        pods[index] = (info.replica, info.planned_node)
    assert pods == {"1": (0, "n5"), "3": (1, "n6")}
    # A pod of an index the start did not list is no replica of that gang.
    assert adapter.replica({batch_job.COMPLETION_INDEX: "2"}, annotations) is None
    # Ranges, and indexes past completions ignored: 1-3 of 4 done leaves index 0.
    obj["status"] = {"completedIndexes": "1-3,7"}
    assert adapter.gang(obj).replicas == 1 and batch_job.indexes_left(obj) == [0]
    # The mirror follows: its spec.replicas is the gang left.
    assert mirror.spec_of(adapter.gang(obj), {})["replicas"] == 1


def test_a_malformed_completed_indexes_names_the_field() -> None:
    obj = job()
    obj["status"] = {"completedIndexes": "0,x"}
    with pytest.raises(base.BadWorkloadError) as err:
        batch_job.BatchJob().gang(obj)
    assert err.value.field == "status.completedIndexes"


# ------------------------------------------------------------------ JobSet


def test_a_jobsets_replicated_jobs_together_are_one_gang() -> None:
    gang = jobset.JobSet().gang(a_jobset([(2, 2, "1"), (1, 2, "1")]))
    assert (gang.replicas, gang.gpus_per_pod) == (2 * 2 + 1 * 2, 1)


def test_a_jobset_of_unlike_pods_or_a_bad_job_is_refused_naming_the_field() -> None:
    with pytest.raises(base.BadWorkloadError) as refused:
        jobset.JobSet().gang(a_jobset([(1, 2, "1"), (1, 2, "2")]))
    assert refused.value.field == "spec.replicatedJobs[1].template.spec"
    broken = a_jobset([(1, 2, "1")])
    broken["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = 3
    with pytest.raises(base.BadWorkloadError) as refused:
        jobset.JobSet().gang(broken)
    assert refused.value.field == "spec.replicatedJobs[0].template.spec.parallelism"
    with pytest.raises(base.BadWorkloadError) as refused:
        jobset.JobSet().gang({"spec": {"replicatedJobs": []}})
    assert refused.value.field == "spec.replicatedJobs"


def test_a_jobset_start_patches_every_template_and_pods_know_their_replica() -> None:
    adapter = jobset.JobSet()
    obj = a_jobset([(2, 2, "1")])
    nodes = ["n0", "n0", "n1", "n1"]
    patch = adapter.start_patch(obj, base.Start(nodes, {"walras.dev/job": "js"}, {}))
    assert patch["spec"]["suspend"] is False
    (rjob,) = patch["spec"]["replicatedJobs"]
    assert rjob["name"] == "rj0" and rjob["replicas"] == 2  # the rest of the list is kept
    meta = rjob["template"]["spec"]["template"]["metadata"]
    assert meta["annotations"][base.ANN_NODES] == "n0,n0,n1,n1"
    assert meta["annotations"][jobset.ANN_PODS_PER_JOB] == "2"
    assert "nodeSelector" not in rjob["template"]["spec"]["template"]["spec"]  # two nodes
    assert obj["spec"]["suspend"] is True  # the object itself is not changed
    one_node = adapter.start_patch(obj, base.Start(["n0"] * 4, {}, {}))
    pod_spec = one_node["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"kubernetes.io/hostname": "n0"}
    assert "affinity" not in pod_spec
    # Pod 1 of the second Job (global index 1) is replica 1 * 2 + 1 = 3, on nodes[3].
    labels = {jobset.GLOBAL_INDEX: "1", batch_job.COMPLETION_INDEX: "1"}
    annotations = {**meta["annotations"], base.ANN_WORKLOAD_KIND: "JobSet"}
    assert adapters.replica_of(labels, annotations) == 3
    assert base.node_of(annotations, 3) == "n1"
    obj["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
    outcome = adapter.outcome(obj)
    assert outcome is not None and outcome.phase == "Succeeded"


def test_adapters_are_registered_by_kind() -> None:
    assert isinstance(adapters.by_kind("batch/v1", "Job"), batch_job.BatchJob)
    assert isinstance(adapters.by_kind("jobset.x-k8s.io/v1alpha2", "JobSet"), jobset.JobSet)
    assert adapters.by_kind("v1", "Pod") is None
    # A pod without the workload kind Walras writes is no adopted replica.
    assert adapters.replica_of({batch_job.COMPLETION_INDEX: "0"}, {}) is None


# ------------------------------------------------------------------ the mirror


def test_the_mirror_is_a_valid_fungiblejob_owned_by_its_workload() -> None:
    obj = job(
        annotations={
            base.ANN_THROUGHPUT: "a100=2.5, v100=1",
            base.ANN_TOTAL_WORK: "1000",
            base.ANN_UTILITY: "linear",
            base.ANN_WEIGHT: "2",
        }
    )
    adapter = batch_job.BatchJob()
    spec = mirror.spec_of(adapter.gang(obj), obj["metadata"]["annotations"])
    body = mirror.manifest(adapter, obj, spec)
    assert body["metadata"]["name"] == "train" and body["metadata"]["namespace"] == "team-a"
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Job", "job-uid")
    assert body["spec"]["workloadRef"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": "job-uid",
    }
    assert body["spec"]["throughput"] == {"a100": 2.5, "v100": 1.0}
    assert body["spec"]["totalWork"] == 1000.0
    assert body["spec"]["utility"] == {"kind": "linear", "weight": 2.0}
    assert "backoffLimit" not in body["spec"]  # the Job says none: the FungibleJob default
    obj["spec"]["backoffLimit"] = 5
    assert mirror.spec_of(adapter.gang(obj), {})["backoffLimit"] == 5
    # It passes the CRD's own schema, and parses as a job that mirrors that uid.
    fungiblejob.FungibleJob.model_validate({**body, "metadata": {**body["metadata"]}})
    parsed = model.parse_job({**body, "metadata": {**body["metadata"], "uid": "m-uid"}})
    assert isinstance(parsed, model.JobSpec)
    assert (parsed.replicas, parsed.workload_uid) == (2, "job-uid")
    assert parsed.gpus_per_pod(GPU) == 2


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({base.ANN_THROUGHPUT: "a100"}, base.ANN_THROUGHPUT),
        ({base.ANN_THROUGHPUT: "a100=fast"}, base.ANN_THROUGHPUT),
        ({base.ANN_THROUGHPUT: "a100=-1"}, base.ANN_THROUGHPUT),
        ({base.ANN_TOTAL_WORK: "0"}, base.ANN_TOTAL_WORK),
        ({base.ANN_UTILITY: "alphaFair"}, base.ANN_UTILITY),
        ({base.ANN_WEIGHT: "nan"}, base.ANN_WEIGHT),
    ],
)
def test_bad_annotations_are_refused_naming_them(annotations: dict[str, str], field: str) -> None:
    gang = batch_job.BatchJob().gang(job())
    with pytest.raises(base.BadWorkloadError) as refused:
        mirror.spec_of(gang, annotations)
    assert refused.value.field == f"metadata.annotations[{field}]"


def test_a_gpu_type_no_pool_has_is_bad_input() -> None:
    gang = batch_job.BatchJob().gang(job())
    spec = mirror.spec_of(gang, {base.ANN_THROUGHPUT: "a100=1,h100=2"})
    assert mirror.unknown_types(spec, {"a100", "h100"}) is None
    bad = mirror.unknown_types(spec, {"a100"})
    assert bad is not None and bad.reason == "UnknownGPUType" and "'h100'" in bad.message
    selected = job()
    selected["spec"]["template"]["spec"]["nodeSelector"] = {crd.GPU_TYPE_LABEL: "k80"}
    spec = mirror.spec_of(batch_job.BatchJob().gang(selected), {})
    bad = mirror.unknown_types(spec, {"a100"})
    assert bad is not None and bad.field == f"spec.template.spec.nodeSelector[{crd.GPU_TYPE_LABEL}]"


def test_a_rounds_pods_become_one_start() -> None:
    pods = [
        (
            1,
            "n1",
            {
                "metadata": {
                    "labels": {crd.LABEL_JOB: "train"},
                    "annotations": {crd.ANN_ROUND: "4", crd.ANN_NODE: "n1"},
                }
            },
        ),
        (
            0,
            "n0",
            {
                "metadata": {
                    "labels": {crd.LABEL_JOB: "train"},
                    "annotations": {crd.ANN_ROUND: "4", crd.ANN_NODE: "n0"},
                }
            },
        ),
    ]
    start = mirror.start_of(batch_job.BatchJob(), "m-uid", pods)
    assert list(start.nodes) == ["n0", "n1"]
    assert start.labels == {crd.LABEL_JOB: "train", base.LABEL_MIRROR_UID: "m-uid"}
    # The per-pod node is not a template annotation: the replicas' nodes are in ANN_NODES.
    assert start.annotations == {crd.ANN_ROUND: "4", base.ANN_WORKLOAD_KIND: "Job"}


def test_an_adopted_workloads_priority_class_is_its_mirrors() -> None:
    """The pod template's priorityClassName travels into the mirror (``walras.core.priorities``
    reads it there), for a batch Job and for a JobSet."""
    obj = job(annotations={base.ANN_THROUGHPUT: "v100=1"})
    obj["spec"]["template"]["spec"]["priorityClassName"] = "research-high"
    sets = a_jobset([(2, 1, "1")])
    for rj in sets["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["priorityClassName"] = "research-high"
    sets["metadata"]["annotations"] = {base.ANN_THROUGHPUT: "v100=1"}
    for adapter, workload in ((batch_job.BatchJob(), obj), (jobset.JobSet(), sets)):
        spec = mirror.spec_of(adapter.gang(workload), workload["metadata"]["annotations"])
        body = mirror.manifest(adapter, workload, spec)
        parsed = model.parse_job({**body, "metadata": {**body["metadata"], "uid": "m-uid"}})
        assert isinstance(parsed, model.JobSpec), parsed
        assert priorities.class_name(parsed) == "research-high"

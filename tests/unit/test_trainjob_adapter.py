"""The Kubeflow Trainer TrainJob adapter (``walras.core.adapters.trainjob``): gang, suspend,
start and outcome, on TrainJobs written as the v1alpha1 API documents them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from walras.core import adapters, model
from walras.core.adapters import base, batch_job, mirror, trainjob
from walras.core.schema import fungiblejob

GPU = "nvidia.com/gpu"


def train_job(**trainer: Any) -> dict[str, Any]:
    """A TrainJob of 2 nodes of 4 GPUs on the torch-distributed runtime."""
    spec_trainer: dict[str, Any] = {
        "image": "registry.example/train:1",
        "numNodes": 2,
        "resourcesPerNode": {"limits": {GPU: "4"}},
        **trainer,
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "llm",
            "namespace": "team-a",
            "uid": "tj-uid",
            "labels": {base.LABEL_MANAGED: "true"},
        },
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {k: v for k, v in spec_trainer.items() if v is not None},
        },
    }


def test_a_trainjob_is_a_gang_of_its_nodes() -> None:
    gang = trainjob.TrainJob().gang(train_job())
    assert (gang.replicas, gang.gpus_per_pod, gang.resource_name) == (2, 4, GPU)
    (container,) = gang.template["spec"]["containers"]
    assert container["image"] == "registry.example/train:1"
    assert container["resources"] == {"limits": {GPU: "4"}}
    # GPUs in requests only count too (a limit defaults to the request for extended resources).
    requested = train_job(resourcesPerNode={"requests": {GPU: 1}})
    assert trainjob.TrainJob().gang(requested).gpus_per_pod == 1


@pytest.mark.parametrize(
    ("trainer", "field"),
    [
        ({"numNodes": None}, "spec.trainer.numNodes"),
        ({"numNodes": 0}, "spec.trainer.numNodes"),
        ({"numNodes": True}, "spec.trainer.numNodes"),
        ({"resourcesPerNode": None}, f"spec.trainer.resourcesPerNode.limits[{GPU}]"),
        (
            {"resourcesPerNode": {"limits": {GPU: "0.5"}}},
            f"spec.trainer.resourcesPerNode.limits[{GPU}]",
        ),
        (
            {"resourcesPerNode": {"limits": {"cpu": "4"}}},
            f"spec.trainer.resourcesPerNode.limits[{GPU}]",
        ),
    ],
)
def test_a_trainjob_that_leaves_its_gang_to_the_runtime_is_refused_naming_the_field(
    trainer: dict[str, Any], field: str
) -> None:
    with pytest.raises(base.BadWorkloadError) as bad:
        trainjob.TrainJob().gang(train_job(**trainer))
    assert bad.value.field == field


def test_suspend_and_start_on_one_node_pin_the_training_job() -> None:
    adapter = trainjob.TrainJob()
    obj = train_job()
    obj["spec"]["labels"] = {"team": "a"}
    obj["spec"]["podSpecOverrides"] = [
        {"targetJobs": [{"name": "node"}], "tolerations": [{"key": "gpu", "operator": "Exists"}]}
    ]
    assert not adapter.suspended(obj)
    assert adapter.suspend_patch(obj) == {"spec": {"suspend": True}}
    obj["spec"]["suspend"] = True
    assert adapter.suspended(obj)
    start = base.Start(["g-0", "g-0"], {base.LABEL_MIRROR_UID: "m"}, {"walras.dev/round": "3"})
    patch = adapter.start_patch(copy.deepcopy(obj), start)["spec"]
    assert patch["suspend"] is False
    assert patch["labels"] == {"team": "a", base.LABEL_MIRROR_UID: "m"}
    assert patch["annotations"] == {"walras.dev/round": "3", base.ANN_NODES: "g-0,g-0"}
    # The team's own override stays; one pin of the training Job to the node is added.
    own, pin = patch["podSpecOverrides"]
    assert own == obj["spec"]["podSpecOverrides"][0]
    assert pin == {
        "targetJobs": [{"name": "node"}],
        "nodeSelector": {"kubernetes.io/hostname": "g-0"},
    }
    # Started again elsewhere (after a suspension): the old pin is replaced, not kept.
    obj["spec"]["podSpecOverrides"].append(pin)
    again = adapter.start_patch(obj, base.Start(["g-1", "g-1"]))["spec"]["podSpecOverrides"]
    assert [o.get("nodeSelector") for o in again] == [None, {"kubernetes.io/hostname": "g-1"}]


def test_a_start_over_several_nodes_names_them_but_pins_nothing() -> None:
    patch = trainjob.TrainJob().start_patch(train_job(), base.Start(["g-0", "g-1"]))["spec"]
    assert patch["annotations"][base.ANN_NODES] == "g-0,g-1"
    assert "podSpecOverrides" not in patch


def test_a_start_of_a_trainjob_that_is_not_a_gang_writes_nothing() -> None:
    with pytest.raises(base.BadWorkloadError):
        trainjob.TrainJob().start_patch(train_job(numNodes=None), base.Start(["g-0"]))


def test_outcome_comes_from_the_trainjobs_own_conditions() -> None:
    adapter = trainjob.TrainJob()
    obj = train_job()
    assert adapter.outcome(obj) is None
    obj["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    assert adapter.outcome(obj) is None
    obj["status"]["conditions"].append(
        {"type": "Complete", "status": "True", "reason": "JobsCompleted", "message": "done"}
    )
    assert adapter.outcome(obj) == base.Outcome("Succeeded", "JobsCompleted", "done")
    obj["status"]["conditions"] = [{"type": "Failed", "status": "True"}]
    outcome = adapter.outcome(obj)
    assert outcome is not None and (outcome.phase, outcome.reason) == ("Failed", "TrainJobFailed")
    obj["status"]["conditions"] = [{"type": "Complete", "status": "False"}]
    assert adapter.outcome(obj) is None


def test_a_pod_of_the_training_job_is_the_replica_of_its_completion_index() -> None:
    adapter = trainjob.TrainJob()
    assert adapter.replica({batch_job.COMPLETION_INDEX: "1"}, {}) == 1
    assert adapter.replica({}, {}) is None


def test_registered_and_its_mirror_is_a_valid_fungiblejob() -> None:
    adapter = adapters.by_kind("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert isinstance(adapter, trainjob.TrainJob)
    obj = train_job()
    spec = mirror.spec_of(adapter.gang(obj), {})
    body = mirror.manifest(adapter, obj, spec)
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", "tj-uid")
    assert body["spec"]["workloadRef"]["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    fungiblejob.FungibleJob.model_validate(body)
    parsed = model.parse_job({**body, "metadata": {**body["metadata"], "uid": "m-uid"}})
    assert isinstance(parsed, model.JobSpec)
    assert (parsed.replicas, parsed.gpus_per_pod(GPU)) == (2, 4)

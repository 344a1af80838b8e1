"""Kubeflow Trainer TrainJob (``trainer.kubeflow.org/v1alpha1``): its training nodes are one gang.

Gang: ``spec.trainer.numNodes`` pods of ``spec.trainer.resourcesPerNode`` GPUs each. Both must be
on the TrainJob: its runtime (a TrainingRuntime or ClusterTrainingRuntime) may default them, but
an adapter reads one object, so a TrainJob that leaves them to its runtime is refused naming the
field. The mirror's pod template is the training container (``node``, the Trainer's name for its
training Job) with those resources.

Suspend and start: ``spec.suspend`` (the Trainer suspends the JobSet it made, and JobSet its Jobs).
A start writes Walras's labels and annotations into ``spec.labels`` / ``spec.annotations``, which
the Trainer copies onto the JobSet and its Jobs, and, for a gang on one node, a
``podSpecOverrides`` entry for the ``node`` Job pinning it by hostname (the overrides are an atomic
list: the patch carries the TrainJob's own entries too). The v1alpha1 API has no per-pod labels or
affinity, so a gang spread over several nodes is started without a node choice for each pod.
Finished: the TrainJob's ``Complete`` or ``Failed`` condition. Replica of a pod: its completion
index in the Indexed ``node`` Job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from walras.core import crd
from walras.core.adapters import base, batch_job

# The Trainer's name for the training Job of a runtime (its replicated Job "node").
TRAINER_JOB = "node"


class TrainJob:
    """The :class:`walras.core.adapters.base.Adapter` of Kubeflow Trainer's TrainJob."""

    kind = base.Kind("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")

    def __init__(self, resource_name: str = crd.DEFAULT_RESOURCE_NAME) -> None:
        self.resource_name = resource_name
        self._job = batch_job.BatchJob(resource_name)

    def _trainer(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return base.mapping(base.mapping(obj.get("spec")).get("trainer"))

    def gang(self, obj: Mapping[str, Any]) -> base.Gang:
        trainer = self._trainer(obj)
        nodes = trainer.get("numNodes")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise base.BadWorkloadError(
                "spec.trainer.numNodes",
                "NotAGang",
                f"numNodes must be an integer >= 1 on the TrainJob, got {nodes!r} (Walras does not "
                "read the runtime's default)",
            )
        resources = base.mapping(trainer.get("resourcesPerNode"))
        template: dict[str, Any] = {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": TRAINER_JOB,
                        "image": str(trainer.get("image") or ""),
                        "resources": json.loads(json.dumps(resources)),
                    }
                ],
            }
        }
        try:
            gpus = base.gpus_of(template, self.resource_name, "trainer")
        except base.BadWorkloadError as bad:
            raise base.BadWorkloadError(
                f"spec.trainer.resourcesPerNode.limits[{self.resource_name}]",
                bad.reason,
                f"{bad.message} (spec.trainer.resourcesPerNode, on the TrainJob)",
            ) from None
        return base.Gang(nodes, gpus, self.resource_name, template)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(base.mapping(obj.get("spec")).get("suspend"))

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {"spec": {"suspend": True}}

    def start_patch(self, obj: Mapping[str, Any], start: base.Start) -> dict[str, Any]:
        self.gang(obj)  # refuses what is not a gang before anything is written
        spec = base.mapping(obj.get("spec"))
        labels = {**base.mapping(spec.get("labels")), **start.labels}
        annotations = {
            **base.mapping(spec.get("annotations")),
            **start.annotations,
            base.ANN_NODES: ",".join(start.nodes),
        }
        patch: dict[str, Any] = {
            "suspend": False,
            "labels": labels,
            "annotations": annotations,
        }
        if len(set(start.nodes)) == 1:
            own = [
                o
                for o in spec.get("podSpecOverrides") or []
                if not _walras_override(base.mapping(o))
            ]
            pin = {
                "targetJobs": [{"name": TRAINER_JOB}],
                "nodeSelector": {"kubernetes.io/hostname": start.nodes[0]},
            }
            patch["podSpecOverrides"] = [*json.loads(json.dumps(own)), pin]
        return {"spec": patch}

    def outcome(self, obj: Mapping[str, Any]) -> base.Outcome | None:
        for phase, kind in (("Failed", "Failed"), ("Succeeded", "Complete")):
            c = base.condition(obj, kind)
            if c is not None:
                reason = str(c.get("reason") or f"TrainJob{kind}")
                message = str(c.get("message") or f"the TrainJob's {kind} condition is True")
                return base.Outcome(phase, reason, message)
        return None

    def replica(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
        return self._job.replica(labels, annotations)


def _walras_override(override: Mapping[str, Any]) -> bool:
    """An override a previous start wrote (pins the ``node`` Job by hostname, nothing else), so
    that a restart on another node replaces it instead of adding a second pin."""
    targets = [base.mapping(t).get("name") for t in override.get("targetJobs") or []]
    selector = base.mapping(override.get("nodeSelector"))
    rest = set(override) - {"targetJobs", "nodeSelector"}
    return targets == [TRAINER_JOB] and set(selector) == {"kubernetes.io/hostname"} and not rest

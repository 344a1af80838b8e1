"""JobSet (``jobset.x-k8s.io/v1alpha2``): its replicated Jobs together are one gang.

Gang: every Job of every ``spec.replicatedJobs[i]`` (``replicas`` Jobs of that template), each an
Indexed Job with ``parallelism == completions``; the gang is the sum of their pods. Walras
places pods that are alike (a FungibleJob has one template), so every replicated Job asks for
the same GPUs per pod and runs the same number of pods. Pod ``k`` of Job ``j`` (its global index
among the JobSet's Jobs, ``jobset.sigs.k8s.io/job-global-index``) is replica
``j * parallelism + k``.

Suspend and start: ``spec.suspend``, as for a Job (the JobSet controller suspends its Jobs); a
start sets the labels and annotations on every replicated Job's pod template, and its
``nodeSelector`` when the gang is on one node (JobSet's webhook keeps a suspended JobSet's
template affinity immutable); a merge patch replaces the ``replicatedJobs`` list whole, so the
patch carries all of it.
Finished: the JobSet's ``Completed`` or ``Failed`` condition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from walras.core import crd
from walras.core.adapters import base, batch_job

GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
# Written by Walras on each template: pods per Job, so a pod's replica needs no other lookup.
ANN_PODS_PER_JOB = "walras.dev/pods-per-job"


class JobSet:
    """The :class:`walras.core.adapters.base.Adapter` of ``jobset.x-k8s.io`` JobSet."""

    kind = base.Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

    def __init__(self, resource_name: str = crd.DEFAULT_RESOURCE_NAME) -> None:
        self.resource_name = resource_name
        self._job = batch_job.BatchJob(resource_name)

    def _replicated(self, obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        jobs = base.mapping(obj.get("spec")).get("replicatedJobs")
        if not isinstance(jobs, list) or not jobs:
            raise base.BadWorkloadError(
                "spec.replicatedJobs", "NotAGang", "a JobSet needs at least one replicated Job"
            )
        return [base.mapping(j) for j in jobs]

    def gang(self, obj: Mapping[str, Any]) -> base.Gang:
        first: base.Gang | None = None
        pods = 0
        for i, rjob in enumerate(self._replicated(obj)):
            where = f"spec.replicatedJobs[{i}].template"
            job = {"spec": base.mapping(base.mapping(rjob.get("template")).get("spec"))}
            try:
                gang = self._job.gang(job)
            except base.BadWorkloadError as bad:
                raise base.BadWorkloadError(
                    f"{where}.{bad.field}", bad.reason, bad.message
                ) from None
            replicas = rjob.get("replicas", 1)
            if not isinstance(replicas, int) or replicas < 1:
                raise base.BadWorkloadError(
                    f"spec.replicatedJobs[{i}].replicas",
                    "NotAGang",
                    f"replicas must be >= 1, got {replicas!r}",
                )
            if first is None:
                first = gang
            elif (gang.replicas, gang.gpus_per_pod) != (first.replicas, first.gpus_per_pod):
                raise base.BadWorkloadError(
                    f"{where}.spec",
                    "UnlikePods",
                    f"{gang.replicas} pods of {gang.gpus_per_pod} GPUs per Job, but the first "
                    f"replicated Job has {first.replicas} of {first.gpus_per_pod}: Walras places "
                    "gangs of alike pods",
                )
            pods += replicas * gang.replicas
        assert first is not None  # _replicated: at least one
        return base.Gang(pods, first.gpus_per_pod, self.resource_name, first.template)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(base.mapping(obj.get("spec")).get("suspend"))

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {"spec": {"suspend": True}}

    def start_patch(self, obj: Mapping[str, Any], start: base.Start) -> dict[str, Any]:
        gang = self.gang(obj)
        jobs = json.loads(json.dumps(self._replicated(obj)))  # a deep copy of plain data
        per_job = 0
        for rjob in jobs:
            spec = rjob.setdefault("template", {}).setdefault("spec", {})
            per_job = int(spec.get("parallelism", 1))
            template = spec.setdefault("template", {})
            patch = base.template_patch(
                template,
                base.Start(
                    start.nodes,
                    start.labels,
                    {**start.annotations, ANN_PODS_PER_JOB: str(per_job)},
                ),
            )
            template["metadata"] = patch["metadata"]
            if len(set(start.nodes)) == 1:
                # JobSet's webhook lets a suspended JobSet change its templates' labels,
                # annotations, nodeSelector and tolerations, not their affinity: a gang on one
                # node is pinned by hostname; Walras binds the pods of a wider one itself.
                selector = template.setdefault("spec", {}).setdefault("nodeSelector", {})
                selector["kubernetes.io/hostname"] = start.nodes[0]
        assert per_job * len(jobs) <= gang.replicas
        return {"spec": {"suspend": False, "replicatedJobs": jobs}}

    def outcome(self, obj: Mapping[str, Any]) -> base.Outcome | None:
        for phase, kind in (("Failed", "Failed"), ("Succeeded", "Completed")):
            c = base.condition(obj, kind)
            if c is not None:
                reason = str(c.get("reason") or f"JobSet{kind}")
                message = str(c.get("message") or f"the JobSet's {kind} condition is True")
                return base.Outcome(phase, reason, message)
        return None

    def replica(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
        index = self._job.replica(labels, annotations)
        job = labels.get(GLOBAL_INDEX) or annotations.get(GLOBAL_INDEX)
        try:
            per_job = int(annotations[ANN_PODS_PER_JOB])
            return int(str(job)) * per_job + index if index is not None else None
        except (KeyError, ValueError):
            return None

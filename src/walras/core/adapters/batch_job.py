"""batch/v1 Job: an Indexed Job with ``parallelism == completions`` is a gang of that many pods.

Gang: ``spec.parallelism`` pods of ``spec.template``, each asking for whole GPUs; the Job must be
``completionMode: Indexed`` (each pod has its index, so Walras can give each one its node) and
``parallelism == completions`` (all pods at once: a gang, not a work queue).

Suspend: ``spec.suspend: true``; the Job controller deletes the running pods with their grace
period. Start: the template's node affinity, labels and annotations and ``spec.suspend: false``
in one patch; Kubernetes accepts template changes to those fields while the Job is suspended and
not started (the Job controller clears ``status.startTime`` when it suspends a Job).

Finished: the Job's own ``Complete`` or ``Failed`` condition. Replica of a pod: its
``batch.kubernetes.io/job-completion-index`` label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from walras.core import crd
from walras.core.adapters import base

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


class BatchJob:
    """The :class:`walras.core.adapters.base.Adapter` of ``batch/v1`` Job."""

    kind = base.Kind("batch", "v1", "jobs", "Job")

    def __init__(self, resource_name: str = crd.DEFAULT_RESOURCE_NAME) -> None:
        self.resource_name = resource_name

    def gang(self, obj: Mapping[str, Any]) -> base.Gang:
        spec = base.mapping(obj.get("spec"))
        if spec.get("completionMode") != "Indexed":
            raise base.BadWorkloadError(
                "spec.completionMode",
                "NotIndexed",
                f"completionMode is {spec.get('completionMode') or 'NonIndexed'!r}; a gang "
                "needs Indexed, so that each pod has its index",
            )
        parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
        if not isinstance(parallelism, int) or parallelism < 1:
            raise base.BadWorkloadError(
                "spec.parallelism", "NotAGang", f"parallelism must be >= 1, got {parallelism!r}"
            )
        if completions != parallelism:
            raise base.BadWorkloadError(
                "spec.parallelism",
                "NotAGang",
                f"parallelism ({parallelism}) must equal completions ({completions}): Walras "
                "runs all pods of a gang at once",
            )
        template = base.mapping(spec.get("template"))
        gpus = base.gpus_of(template, self.resource_name, "spec.template")
        limit = spec.get("backoffLimit")
        backoff = limit if isinstance(limit, int) and limit >= 0 else None
        return base.Gang(parallelism, gpus, self.resource_name, template, backoff)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(base.mapping(obj.get("spec")).get("suspend"))

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {"spec": {"suspend": True}}

    def start_patch(self, obj: Mapping[str, Any], start: base.Start) -> dict[str, Any]:
        template = base.mapping(base.mapping(obj.get("spec")).get("template"))
        return {"spec": {"suspend": False, "template": base.template_patch(template, start)}}

    def outcome(self, obj: Mapping[str, Any]) -> base.Outcome | None:
        for phase, kind in (("Failed", "Failed"), ("Succeeded", "Complete")):
            c = base.condition(obj, kind)
            if c is not None:
                reason = str(c.get("reason") or f"Job{kind}")
                message = str(c.get("message") or f"the Job's {kind} condition is True")
                return base.Outcome(phase, reason, message)
        return None

    def replica(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
        try:
            return int(labels[COMPLETION_INDEX])
        except (KeyError, ValueError):
            return None

"""batch/v1 Job: an Indexed Job with ``parallelism == completions`` is a gang of that many pods.

Gang: ``spec.parallelism`` pods of ``spec.template``, each asking for whole GPUs; the Job must be
``completionMode: Indexed`` (each pod has its index, so Walras can give each one its node) and
``parallelism == completions`` (all pods at once: a gang, not a work queue).

Suspend: ``spec.suspend: true``; the Job controller deletes the running pods with their grace
period. Start: the template's node affinity, labels and annotations and ``spec.suspend: false``
in one patch; Kubernetes accepts template changes to those fields while the Job is suspended and
not started (the Job controller clears ``status.startTime`` when it suspends a Job).

Indexes that succeeded: once a pod exits 0 its index is done (``status.completedIndexes``,
e.g. ``"0,2-3"``) and the Job controller makes pods for the other indexes only. So the gang is the
indexes left: ``completions - |completedIndexes|`` pods (the replicas of a gang may end in
different slices, one at its total work while another still runs when the slice ends). A start
writes the indexes left, in order, in ``walras.dev/indexes`` on the template; replica ``r`` of
the gang is the pod of the ``r``-th of them, and goes to the ``r``-th node of ``walras.dev/nodes``.

Finished: the Job's own ``Complete`` or ``Failed`` condition. Replica of a pod: the position of
its ``batch.kubernetes.io/job-completion-index`` label among ``walras.dev/indexes`` (the index
itself on a template started before any index succeeded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from walras.core import crd
from walras.core.adapters import base

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Written by Walras on a started template: the indexes the gang runs, in replica order.
ANN_INDEXES = "walras.dev/indexes"


def completed_indexes(obj: Mapping[str, Any], completions: int) -> set[int]:
    """``status.completedIndexes`` (``"1,3-5"``) as a set, indexes below ``completions`` only;
    :class:`base.BadWorkloadError` when it is not that format."""
    text = str(base.mapping(obj.get("status")).get("completedIndexes") or "")
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        try:
            lo, hi = int(first), int(last or first)
        except ValueError:
            raise base.BadWorkloadError(
                "status.completedIndexes",
                "InvalidStatus",
                f"{text!r} is not a list of indexes and ranges",
            ) from None
        out.update(i for i in range(lo, hi + 1) if 0 <= i < completions)
    return out


def indexes_left(obj: Mapping[str, Any]) -> list[int]:
    """The indexes of the Job that have not succeeded, in order."""
    spec = base.mapping(obj.get("spec"))
    completions = spec.get("completions")
    if not isinstance(completions, int) or completions < 1:
        return []
    done = completed_indexes(obj, completions)
    return [i for i in range(completions) if i not in done]


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
        # Every index succeeded: the Job is Complete (its outcome), the gang is moot.
        replicas = len(indexes_left(obj)) or parallelism
        return base.Gang(replicas, gpus, self.resource_name, template, backoff)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(base.mapping(obj.get("spec")).get("suspend"))

    def suspend_patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {"spec": {"suspend": True}}

    def start_patch(self, obj: Mapping[str, Any], start: base.Start) -> dict[str, Any]:
        template = base.mapping(base.mapping(obj.get("spec")).get("template"))
        patch = base.template_patch(template, start)
        patch["metadata"]["annotations"][ANN_INDEXES] = ",".join(map(str, indexes_left(obj)))
        return {"spec": {"suspend": False, "template": patch}}

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
            index = int(labels[COMPLETION_INDEX])
        except (KeyError, ValueError):
            return None
        order = [i for i in annotations.get(ANN_INDEXES, "").split(",") if i]
        if not order:
            return index
        # A pod of an index the start did not list (not the gang Walras placed): no replica.
        return order.index(str(index)) if str(index) in order else None

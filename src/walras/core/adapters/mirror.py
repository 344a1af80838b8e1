"""The mirror FungibleJob of an adopted workload, and the start of its gang.

For each adopted workload Walras keeps one FungibleJob (Kueue keeps a ``Workload``): same
namespace and name, owned by the workload (deleting the workload deletes it, through the garbage
collector), ``spec.workloadRef`` naming it. Its spec is the workload's gang
(:class:`walras.core.adapters.base.Gang`) and what the workload's annotations say:

- ``walras.dev/throughput: "a100=2.5,v100=1.2"``: ``spec.throughput`` (work/s of the gang);
- ``walras.dev/total-work: "1000"``: ``spec.totalWork``;
- ``walras.dev/utility: log|linear`` and ``walras.dev/weight: "2"``: ``spec.utility``.

Every policy, ``kubectl get fjob``, ``walras explain``, the simulator and the metrics so see one
kind of object. A round's pods of a mirror become one start of its workload (:func:`start_of`):
the node of each replica and the labels and annotations Walras puts on its own pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from walras.core import crd
from walras.core.adapters import base
from walras.core.schema import limits


def _number(annotations: Mapping[str, str], key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise base.BadWorkloadError(
            f"metadata.annotations[{key}]", "InvalidAnnotation", f"{text!r} is not a number"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise base.BadWorkloadError(
            f"metadata.annotations[{key}]", "InvalidAnnotation", f"{text!r} must be >= 0"
        )
    return value


def throughput(annotations: Mapping[str, str]) -> dict[str, float]:
    """``walras.dev/throughput``: ``type=work/s`` pairs, comma-separated ({} when absent)."""
    text = annotations.get(base.ANN_THROUGHPUT, "").strip()
    out: dict[str, float] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        gpu_type, sep, value = item.partition("=")
        if not sep or not gpu_type.strip():
            raise base.BadWorkloadError(
                f"metadata.annotations[{base.ANN_THROUGHPUT}]",
                "InvalidAnnotation",
                f"{item!r} is not TYPE=WORK_PER_SECOND",
            )
        out[gpu_type.strip()] = _number(annotations, base.ANN_THROUGHPUT, value.strip())
    return out


def spec_of(gang: base.Gang, annotations: Mapping[str, str]) -> dict[str, Any]:
    """The mirror's ``spec`` (without ``workloadRef``) from the gang and the annotations."""
    spec: dict[str, Any] = {
        "replicas": gang.replicas,
        "template": dict(gang.template),
        "throughput": throughput(annotations),
    }
    if gang.backoff_limit is not None:
        # The mirror fails when its workload would: after as many pod failures.
        spec["backoffLimit"] = min(gang.backoff_limit, limits.MAX_BACKOFF)
    if base.ANN_TOTAL_WORK in annotations:
        total = _number(annotations, base.ANN_TOTAL_WORK, annotations[base.ANN_TOTAL_WORK])
        if total <= 0:
            raise base.BadWorkloadError(
                f"metadata.annotations[{base.ANN_TOTAL_WORK}]",
                "InvalidAnnotation",
                "total work must be > 0",
            )
        spec["totalWork"] = total
    kind = annotations.get(base.ANN_UTILITY, "log")
    if kind not in ("log", "linear"):
        raise base.BadWorkloadError(
            f"metadata.annotations[{base.ANN_UTILITY}]",
            "InvalidAnnotation",
            f"utility {kind!r}: log or linear",
        )
    weight = 1.0
    if base.ANN_WEIGHT in annotations:
        weight = _number(annotations, base.ANN_WEIGHT, annotations[base.ANN_WEIGHT])
        if weight <= 0:
            raise base.BadWorkloadError(
                f"metadata.annotations[{base.ANN_WEIGHT}]",
                "InvalidAnnotation",
                "weight must be > 0",
            )
    spec["utility"] = {"kind": kind, "weight": weight}
    return spec


def unknown_types(spec: Mapping[str, Any], pool_types: set[str]) -> base.BadWorkloadError | None:
    """A GPU type the workload names that no pool has (declared throughput, or the template's
    ``walras.dev/gpu-type`` node selector), as bad input; None when every type exists."""
    for gpu_type in sorted(spec.get("throughput") or {}):
        if gpu_type not in pool_types:
            return base.BadWorkloadError(
                f"metadata.annotations[{base.ANN_THROUGHPUT}]",
                "UnknownGPUType",
                f"GPU type {gpu_type!r}: no ResourcePool has it (pools: "
                f"{', '.join(sorted(pool_types)) or 'none'})",
            )
    selector = base.mapping(base.mapping(spec.get("template")).get("spec")).get("nodeSelector")
    wanted = base.mapping(selector).get(crd.GPU_TYPE_LABEL)
    if wanted is not None and wanted not in pool_types:
        return base.BadWorkloadError(
            f"spec.template.spec.nodeSelector[{crd.GPU_TYPE_LABEL}]",
            "UnknownGPUType",
            f"GPU type {wanted!r}: no ResourcePool has it",
        )
    return None


def manifest(
    adapter: base.Adapter, obj: Mapping[str, Any], spec: Mapping[str, Any]
) -> dict[str, Any]:
    """The mirror FungibleJob of ``obj`` with ``spec``: owned by it, ``spec.workloadRef``
    naming it."""
    meta = base.mapping(obj.get("metadata"))
    ref = {
        "apiVersion": adapter.kind.api_version,
        "kind": adapter.kind.kind,
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
    }
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.JOB_KIND,
        "metadata": {
            "name": ref["name"],
            "namespace": str(meta.get("namespace", "")),
            "labels": {base.LABEL_MANAGED: "true"},
            # Not the controller: the workload's own controller keeps that role for its pods;
            # the garbage collector deletes dependents of any owner.
            "ownerReferences": [{**ref, "blockOwnerDeletion": False}],
        },
        "spec": {**spec, "workloadRef": ref},
    }


def start_of(
    adapter: base.Adapter,
    mirror_uid: str,
    pods: Sequence[tuple[int, str, Mapping[str, Any]]],
) -> base.Start:
    """One start of a workload from the round's pods of its mirror, ``(replica, node,
    manifest)`` each: the node of each replica, Walras's labels (the job, the mirror's uid) and
    the annotations Walras puts on its pods."""
    ordered = sorted(pods, key=lambda p: p[0])
    first = base.mapping(base.mapping(ordered[0][2]).get("metadata")) if ordered else {}
    labels = base.mapping(first.get("labels"))
    annotations = base.mapping(first.get("annotations"))
    return base.Start(
        nodes=[node for _, node, _ in ordered],
        labels={
            crd.LABEL_JOB: str(labels.get(crd.LABEL_JOB, "")),
            base.LABEL_MIRROR_UID: mirror_uid,
        },
        annotations={
            **{k: str(annotations[k]) for k in base.TEMPLATE_ANNOTATIONS if k in annotations},
            base.ANN_WORKLOAD_KIND: adapter.kind.kind,
        },
    )

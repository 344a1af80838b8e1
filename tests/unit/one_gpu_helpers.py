"""A two-job, one-GPU cluster whose plans are applied as the kubelet would apply them, shared by
the minimum-run-time, advance-notice and restart-cost tests."""

from __future__ import annotations

from typing import Any

from walras.core import cycle, snapshot

ROUND = 360.0


def store_one_gpu_two_jobs() -> snapshot.Store:
    store = snapshot.Store()
    store.upsert(
        "pool", {"metadata": {"name": "v100", "generation": 1}, "spec": {"gpuType": "v100"}}
    )
    store.upsert(
        "node",
        {
            "metadata": {"name": "n0", "labels": {"walras.dev/gpu-type": "v100"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    for name in ("a", "b"):
        store.upsert(
            "job",
            {
                "metadata": {
                    "namespace": "ns",
                    "name": name,
                    "uid": f"uid-{name}",
                    "generation": 1,
                },
                "spec": {
                    "replicas": 1,
                    "throughput": {"v100": 1.0},
                    "template": {"spec": {"containers": [{"name": "c"}]}},
                },
            },
        )
    return store


def apply_plan(store: snapshot.Store, plan: cycle.CyclePlan) -> None:
    """What the kubelet makes of the plan: deleted pods go, created pods run where bound."""
    for d in plan.realisation.deletes:
        store.delete("pod", d.pod.namespace, d.pod.name)
    for c in plan.realisation.creates:
        pod: dict[str, Any] = {**c.manifest, "status": {"phase": "Running"}}
        pod["spec"] = {**pod["spec"], "nodeName": c.node}
        store.upsert("pod", pod)

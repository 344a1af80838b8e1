"""Cluster objects as API dicts and one planned round (walras.core.cycle.plan), for the unit
tests of the filters, the realiser and the status."""

from __future__ import annotations

from typing import Any

from walras.core import cycle, policies, snapshot


def node_obj(
    name: str, gpu_type: str, *, gpus: int = 4, cpu: str = "32", taints: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"walras.dev/gpu-type": gpu_type, "zone": name}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {
                "nvidia.com/gpu": str(gpus),
                "cpu": cpu,
                "memory": "64Gi",
                "ephemeral-storage": "100Gi",
                "hugepages-2Mi": "1Gi",
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def job_obj(name: str, throughput: dict[str, float], **pod: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "i"}
    if "cpu" in pod:
        container["resources"] = {"requests": {"cpu": pod.pop("cpu")}}
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "generation": 1},
        "spec": {
            "replicas": 1,
            "throughput": throughput,
            "template": {"spec": {"containers": [container], **pod}},
        },
    }


def daemon_pod(node_name: str) -> dict[str, Any]:
    res = {"ephemeral-storage": "1Gi", "hugepages-2Mi": "512Mi", "cpu": "1"}
    return {
        "metadata": {"namespace": "kube-system", "name": f"ds-{node_name}", "uid": node_name},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "d", "resources": {"requests": res}}],
        },
        "status": {"phase": "Running"},
    }


def plan(objs: list[tuple[str, dict[str, Any]]], policy_name: str = "price-discovery") -> Any:
    store = snapshot.Store()
    for kind, obj in objs:
        store.upsert(kind, obj)
    policy = policies.build(
        policies.PolicyConfig(policy_name, {"price-discovery": {"backend": "numpy"}})
    )
    return cycle.plan(cycle.CycleState(), policy, store.freeze(0.0), now=0.0, round_no=1)


def pools(*types: str) -> list[tuple[str, dict[str, Any]]]:
    return [("pool", {"metadata": {"name": t}, "spec": {"gpuType": t}}) for t in types]

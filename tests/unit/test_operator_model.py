"""Parsing of FungibleJob/ResourcePool/Node/Pod dicts (walras.core.model), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from walras.core import model


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8.0),
        ("500m", 0.5),
        ("2Gi", 2.0 * 2**30),
        ("256Mi", 256.0 * 2**20),
        ("1.5k", 1500.0),
        ("1e3", 1000.0),
        (4, 4.0),
        (None, 0.0),
    ],
    ids=["plain", "milli", "gibi", "mebi", "kilo", "exponent", "int", "absent"],
)
def test_quantity(text: object, value: float) -> None:
    assert model.quantity(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "1Zi", True])
def test_quantity_rejects_garbage(bad: object) -> None:
    with pytest.raises(ValueError):
        model.quantity(bad)


def test_time_round_trip_keeps_microseconds() -> None:
    stamp = 1_790_000_000.123456
    assert model.parse_time(model.format_time(stamp)) == pytest.approx(stamp, abs=1e-6)
    assert model.parse_time("2026-11-22T07:45:56Z") is not None
    assert model.parse_time("") is None


def job(spec: dict[str, Any], name: str = "j") -> dict[str, Any]:
    base: dict[str, Any] = {
        "replicas": 2,
        "throughput": {"v100": 3.0, "k80": 1.0},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "resources": {
                            "limits": {"nvidia.com/gpu": "2", "cpu": "4"},
                            "requests": {"cpu": "1500m", "memory": "8Gi"},
                        },
                    }
                ],
                "nodeSelector": {"zone": "a"},
            }
        },
    }
    base.update(spec)
    meta = {"namespace": "ns", "name": name, "uid": "u1", "generation": 3}
    return {"metadata": meta, "spec": base}


def test_parse_job_reads_every_field() -> None:
    parsed = model.parse_job(
        job({"tenant": "team", "utility": {"kind": "alphaFair", "alpha": 3, "weight": 2}})
    )
    assert isinstance(parsed, model.JobSpec)
    assert parsed.key == ("ns", "j")
    assert parsed.tenant == "team"
    assert parsed.gpus_per_pod("nvidia.com/gpu") == 2
    assert parsed.gpus_per_pod("amd.com/gpu") == 1  # default
    assert (parsed.cpu, parsed.memory) == (1.5, 8.0 * 2**30)
    assert parsed.utility == model.Utility(kind="alpha", weight=2.0, target=0.0, alpha=3.0)
    assert parsed.node_selector == {"zone": "a"}
    assert parsed.generation == 3


def test_tenant_defaults_to_namespace() -> None:
    parsed = model.parse_job(job({}))
    assert isinstance(parsed, model.JobSpec)
    assert parsed.tenant == "ns"
    assert parsed.utility.kind == "log"


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({"throughput": {"v100": 0.0}}, "spec.throughput", "ZeroThroughput"),
        ({"throughput": {"v100": float("nan")}}, "spec.throughput.v100", "InvalidThroughput"),
        ({"utility": {"kind": "targetPriority"}}, "spec.utility.target", "InvalidUtility"),
        ({"utility": {"kind": "alphaFair", "alpha": 1}}, "spec.utility.alpha", "InvalidUtility"),
        ({"utility": {"kind": "cubic"}}, "spec.utility.kind", "InvalidUtility"),
        (
            {"template": {"spec": {"containers": []}}},
            "spec.template.spec.containers",
            "InvalidTemplate",
        ),
        (
            {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "0"}}}
                        ]
                    }
                }
            },
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "InvalidGPULimit",
        ),
    ],
    ids=[
        "zero-throughput",
        "nan",
        "target-missing",
        "alpha-one",
        "unknown-kind",
        "no-containers",
        "zero-gpus",
    ],
)
def test_semantic_defects_name_the_field(spec: dict[str, Any], field: str, reason: str) -> None:
    parsed = model.parse_job(job(spec))
    assert isinstance(parsed, model.JobDefect)
    assert (parsed.field, parsed.reason) == (field, reason)
    assert parsed.key == ("ns", "j") and parsed.generation == 3


def test_pool_selects_by_selector_or_gpu_type_label() -> None:
    pool = model.parse_pool({"metadata": {"name": "p"}, "spec": {"gpuType": "v100"}})
    assert pool.resource_name == "nvidia.com/gpu"
    assert pool.selects({"walras.dev/gpu-type": "v100"})
    assert not pool.selects({"walras.dev/gpu-type": "k80"})
    custom = model.parse_pool(
        {"metadata": {"name": "p"}, "spec": {"gpuType": "v100", "nodeSelector": {"a": "b"}}}
    )
    assert custom.selects({"a": "b", "walras.dev/gpu-type": "k80"})
    assert not custom.selects({"walras.dev/gpu-type": "v100"})


def test_node_ready_and_cordon() -> None:
    node = model.parse_node(
        {
            "metadata": {"name": "n", "labels": {"x": "y"}},
            "spec": {"unschedulable": True},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "1Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert node.ready and not node.schedulable
    assert node.resource("nvidia.com/gpu") == 8.0
    assert model.parse_node({"metadata": {"name": "m"}}).ready is False


def test_pod_walras_labels_and_requests() -> None:
    pod = model.parse_pod(
        {
            "metadata": {
                "namespace": "ns",
                "name": "j-r4-1",
                "labels": {"walras.dev/job": "j", "walras.dev/replica": "1"},
                "annotations": {"walras.dev/round": "4", "walras.dev/node": "n1"},
                "deletionTimestamp": "2026-11-22T07:45:56Z",
            },
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1"}}},
                ]
            },
            "status": {"phase": "Running"},
        }
    )
    assert (pod.job_key, pod.replica, pod.round) == (("ns", "j"), 1, 4)
    assert pod.where == "n1" and pod.terminating
    assert pod.requests == {"nvidia.com/gpu": 2.0, "cpu": 1.0}

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


# ------------------------------------------------------------------ accounting


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}] * 3},
            {"nvidia.com/gpu": 3.0},
            id="sum-over-containers",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}] * 2,
                "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            },
            {"nvidia.com/gpu": 4.0},
            id="largest-init-container-wins",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "3"}}}],
                "initContainers": [
                    {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                    {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
                ],
            },
            {"nvidia.com/gpu": 3.0},
            id="init-containers-run-one-at-a-time",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [
                    {"restartPolicy": "Always", "resources": {"requests": {"cpu": "2"}}},
                    {"resources": {"requests": {"cpu": "2500m"}}},
                ],
            },
            # Sidecar (restartable init) runs beside everything: max(1 + 2, 2.5 + 2) = 4.5.
            {"cpu": 4.5},
            id="sidecar-adds",
        ),
        pytest.param(
            {
                "containers": [{"resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}}],
                "overhead": {"cpu": "250m"},
            },
            {"cpu": 1.25},
            id="request-over-limit-plus-overhead",
        ),
        pytest.param(
            {"containers": [{"resources": {"limits": {"memory": "1Gi"}}}]},
            {"memory": 2.0**30},
            id="limit-is-the-request-when-absent",
        ),
    ],
)
def test_pod_requests_count_like_kubernetes(
    spec: dict[str, Any], expected: dict[str, float]
) -> None:
    assert model.pod_requests(spec) == expected


def _template_job(pod_spec: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": pod_spec}
    if meta is not None:
        template["metadata"] = meta
    return job({"template": template})


def test_gpus_per_pod_sum_over_containers_and_inits() -> None:
    parsed = model.parse_job(
        _template_job(
            {
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                ],
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            }
        )
    )
    assert isinstance(parsed, model.JobSpec)
    assert parsed.gpus_per_pod("nvidia.com/gpu") == 4
    # On a pool of another resource the pod asks 1 of it, and keeps its own requests.
    assert parsed.pod_requests("amd.com/gpu") == {"nvidia.com/gpu": 4.0, "amd.com/gpu": 1.0}


C = {"name": "c", "image": "i"}
T = "spec.template"


@pytest.mark.parametrize(
    ("pod_spec", "meta", "field", "reason"),
    [
        pytest.param(
            {"containers": [{**C, "resources": {"limits": "4"}}]},
            None,
            f"{T}.spec.containers[0].resources.limits",
            "InvalidTemplate",
            id="limits-string",
        ),
        pytest.param(
            {"containers": [{**C, "resources": "4"}]},
            None,
            f"{T}.spec.containers[0].resources",
            "InvalidTemplate",
            id="resources-string",
        ),
        pytest.param(
            {"containers": [C]},
            {"labels": "x"},
            f"{T}.metadata.labels",
            "InvalidTemplate",
            id="labels-string",
        ),
        pytest.param(
            {"containers": [C]},
            {"annotations": ["a"]},
            f"{T}.metadata.annotations",
            "InvalidTemplate",
            id="annotations-list",
        ),
        pytest.param(
            {"containers": [C]},
            {"labels": {"a": "x" * 64}},
            f"{T}.metadata.labels[a]",
            "InvalidTemplate",
            id="label-value-64",
        ),
        pytest.param(
            {"containers": [{**C, "resources": {"limits": {"nvidia.com/gpu": "1e400"}}}]},
            None,
            f"{T}.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "InvalidQuantity",
            id="gpu-1e400",
        ),
        pytest.param(
            {"containers": [{**C, "resources": {"limits": {"cpu": "-1"}}}]},
            None,
            f"{T}.spec.containers[0].resources.limits[cpu]",
            "InvalidQuantity",
            id="negative-cpu",
        ),
        pytest.param(
            {"containers": [{**C, "name": "Train_1"}]},
            None,
            f"{T}.spec.containers[0].name",
            "InvalidTemplate",
            id="container-name",
        ),
        pytest.param(
            {"containers": [C, C]},
            None,
            f"{T}.spec.containers[1].name",
            "InvalidTemplate",
            id="duplicate-container",
        ),
        pytest.param(
            {"containers": [C], "tolerations": [{"operator": "Equal", "value": "x"}]},
            None,
            f"{T}.spec.tolerations[0].operator",
            "InvalidTemplate",
            id="toleration-empty-key-equal",
        ),
        pytest.param(
            {
                "containers": [C],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "a", "operator": "Gt"}]}
                            ]
                        }
                    }
                },
            },
            None,
            f"{T}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values",
            "InvalidTemplate",
            id="gt-without-value",
        ),
        pytest.param(
            {"containers": [{**C, "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]},
            None,
            f"{T}.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "InvalidQuantity",
            id="fractional-gpu",
        ),
        pytest.param(
            {"containers": [{**C, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": 1}}}]},
            None,
            f"{T}.spec.containers[0].resources.requests[cpu]",
            "InvalidTemplate",
            id="request-over-limit",
        ),
        pytest.param(
            {"containers": [C], "nodeSelector": {"zone": 3}},
            None,
            f"{T}.spec.nodeSelector[zone]",
            "InvalidTemplate",
            id="selector-number",
        ),
        pytest.param(
            {"containers": [{**C, "env": [{"value": "x"}]}]},
            None,
            f"{T}.spec.containers[0].env[0].name",
            "InvalidTemplate",
            id="env-without-name",
        ),
    ],
)
def test_bad_templates_become_defects_naming_the_field(
    pod_spec: dict[str, Any], meta: dict[str, Any] | None, field: str, reason: str
) -> None:
    parsed = model.parse_job(_template_job(pod_spec, meta))
    assert isinstance(parsed, model.JobDefect), parsed
    assert (parsed.field, parsed.reason) == (field, reason), parsed.message


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({"utility": {"weight": 1e308}}, "spec.utility.weight", id="weight-1e308"),
        pytest.param({"utility": {"weight": "abc"}}, "spec.utility.weight", id="weight-string"),
        pytest.param(
            {"utility": {"kind": "targetPriority", "target": 1e308}},
            "spec.utility.target",
            id="target-1e308",
        ),
        pytest.param(
            {"utility": {"kind": "alphaFair", "alpha": 1e9}}, "spec.utility.alpha", id="alpha"
        ),
        pytest.param({"throughput": {"v100": 1e300}}, "spec.throughput.v100", id="throughput"),
        pytest.param({"totalWork": -1}, "spec.totalWork", id="total-work-negative"),
        pytest.param({"replicas": 10**400}, "spec.replicas", id="replicas-huge-int"),
        pytest.param({"replicas": "2"}, "spec.replicas", id="replicas-string"),
        pytest.param({"throughput": ["v100"]}, "spec.throughput", id="throughput-list"),
        pytest.param({"utility": "log"}, "spec.utility", id="utility-string"),
        pytest.param({"tenant": 7}, "spec.tenant", id="tenant-number"),
        pytest.param({"template": "pod"}, "spec.template", id="template-string"),
    ],
)
def test_absurd_numbers_and_shapes_never_raise(spec: dict[str, Any], field: str) -> None:
    parsed = model.parse_job(job(spec))
    assert isinstance(parsed, model.JobDefect), parsed
    assert parsed.field == field, parsed.message


def test_long_job_name_is_a_defect() -> None:
    parsed = model.parse_job(job({}, name="x" * 64))
    assert isinstance(parsed, model.JobDefect)
    assert parsed.field == "metadata.name"


def test_tolerations_and_affinity_are_parsed() -> None:
    pod_spec = {
        "containers": [C],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    }
    parsed = model.parse_job(_template_job(pod_spec))
    assert isinstance(parsed, model.JobSpec)
    assert parsed.tolerations == (model.Toleration("gpu", "Exists", "", "NoSchedule"),)
    assert parsed.affinity == ((model.Requirement("zone", "In", ("a",)),),)


def test_node_taints_are_parsed() -> None:
    node = model.parse_node(
        {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    )
    assert node.taints == (model.Taint("k", "", "NoSchedule"),)


def test_quantity_out_of_float_range_is_rejected() -> None:
    with pytest.raises(ValueError):
        model.quantity("1e400")

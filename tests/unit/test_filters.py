"""kube-scheduler's core filters (walras.core.filters), one table per filter.

Expected outcomes are Kubernetes' documented semantics (taints and tolerations, node affinity
operators, NodeResourcesFit), written out per case; the aggregated message follows
kube-scheduler's FitError format.
"""

from __future__ import annotations

from typing import Any

import pytest
from filter_helpers import daemon_pod, job_obj, node_obj, plan, pools

from walras.core import filters, model


def node(
    *,
    labels: dict[str, str] | None = None,
    taints: tuple[tuple[str, str, str], ...] = (),
    schedulable: bool = True,
    allocatable: dict[str, float] | None = None,
    name: str = "n1",
) -> model.NodeInfo:
    return model.NodeInfo(
        name=name,
        labels=labels or {},
        allocatable=allocatable or {},
        ready=True,
        schedulable=schedulable,
        taints=tuple(model.Taint(k, v, e) for k, v, e in taints),
    )


def tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> Any:
    return model.Toleration(key, operator, value, effect)


@pytest.mark.parametrize(
    ("taints", "tolerations", "ok"),
    [
        pytest.param((), (), True, id="no-taints"),
        pytest.param((("gpu", "a100", "NoSchedule"),), (), False, id="noschedule-untolerated"),
        pytest.param((("gpu", "a100", "NoExecute"),), (), False, id="noexecute-untolerated"),
        pytest.param((("gpu", "a100", "PreferNoSchedule"),), (), True, id="prefer-only-scores"),
        pytest.param(
            (("gpu", "a100", "NoSchedule"),), (tol("gpu", "Equal", "a100"),), True, id="equal"
        ),
        pytest.param(
            (("gpu", "a100", "NoSchedule"),),
            (tol("gpu", "Equal", "v100"),),
            False,
            id="equal-other-value",
        ),
        pytest.param(
            (("gpu", "a100", "NoSchedule"),), (tol("gpu", "Exists"),), True, id="exists-key"
        ),
        pytest.param((("gpu", "a100", "NoSchedule"),), (tol("", "Exists"),), True, id="wildcard"),
        pytest.param(
            (("gpu", "a100", "NoSchedule"),),
            (tol("gpu", "Exists", effect="NoExecute"),),
            False,
            id="other-effect",
        ),
        pytest.param(
            (("gpu", "a100", "NoSchedule"), ("zone", "x", "NoExecute")),
            (tol("gpu", "Exists"),),
            False,
            id="second-taint-untolerated",
        ),
        pytest.param(
            (("gpu", "", "NoSchedule"),), (tol("gpu", ""),), True, id="empty-operator-is-equal"
        ),
    ],
)
def test_taints(
    taints: tuple[tuple[str, str, str], ...], tolerations: tuple[Any, ...], ok: bool
) -> None:
    verdict = filters.taints(node(taints=taints), tolerations)
    assert verdict.ok is ok
    if not ok:
        assert verdict.filter == filters.TAINTS
        assert verdict.reasons[0].startswith("node(s) had untolerated taint {")


@pytest.mark.parametrize(
    ("schedulable", "tolerations", "ok"),
    [
        pytest.param(True, (), True, id="schedulable"),
        pytest.param(False, (), False, id="cordoned"),
        pytest.param(
            False,
            (tol("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule"),),
            True,
            id="cordon-tolerated",
        ),
    ],
)
def test_unschedulable(schedulable: bool, tolerations: tuple[Any, ...], ok: bool) -> None:
    verdict = filters.unschedulable(node(schedulable=schedulable), tolerations)
    assert verdict.ok is ok
    assert ok or verdict.reasons == ("node(s) were unschedulable",)


@pytest.mark.parametrize(
    ("labels", "selector", "ok"),
    [
        pytest.param({"zone": "a"}, {}, True, id="empty-selector"),
        pytest.param({"zone": "a"}, {"zone": "a"}, True, id="match"),
        pytest.param({"zone": "a"}, {"zone": "b"}, False, id="other-value"),
        pytest.param({}, {"zone": "a"}, False, id="missing-label"),
        pytest.param({"zone": "a", "x": "1"}, {"zone": "a", "x": "2"}, False, id="all-must-match"),
    ],
)
def test_node_selector(labels: dict[str, str], selector: dict[str, str], ok: bool) -> None:
    verdict = filters.node_selector(node(labels=labels), selector)
    assert verdict.ok is ok
    assert ok or verdict.filter == filters.AFFINITY


def req(key: str, op: str, *values: str, field: bool = False) -> model.Requirement:
    return model.Requirement(key, op, tuple(values), field)


LABELS = {"zone": "a", "gpus": "8", "arch": "x86"}


@pytest.mark.parametrize(
    ("terms", "ok"),
    [
        pytest.param((), True, id="no-terms"),
        pytest.param(((req("zone", "In", "a", "b"),),), True, id="in"),
        pytest.param(((req("zone", "In", "b"),),), False, id="in-miss"),
        pytest.param(((req("zone", "NotIn", "b"),),), True, id="notin"),
        pytest.param(((req("zone", "NotIn", "a"),),), False, id="notin-miss"),
        pytest.param(((req("rack", "NotIn", "a"),),), True, id="notin-absent-label"),
        pytest.param(((req("zone", "Exists"),),), True, id="exists"),
        pytest.param(((req("rack", "Exists"),),), False, id="exists-miss"),
        pytest.param(((req("rack", "DoesNotExist"),),), True, id="doesnotexist"),
        pytest.param(((req("zone", "DoesNotExist"),),), False, id="doesnotexist-miss"),
        pytest.param(((req("gpus", "Gt", "4"),),), True, id="gt"),
        pytest.param(((req("gpus", "Gt", "8"),),), False, id="gt-equal"),
        pytest.param(((req("gpus", "Lt", "9"),),), True, id="lt"),
        pytest.param(((req("arch", "Gt", "1"),),), False, id="gt-not-integer"),
        pytest.param(((req("rack", "Lt", "1"),),), False, id="lt-absent"),
        pytest.param(
            ((req("zone", "In", "a"), req("arch", "In", "arm")),), False, id="term-is-and"
        ),
        pytest.param(
            ((req("zone", "In", "b"),), (req("arch", "In", "x86"),)), True, id="terms-are-or"
        ),
        pytest.param(((),), False, id="empty-term-matches-nothing"),
        pytest.param(((req("metadata.name", "In", "n1", field=True),),), True, id="field-in"),
        pytest.param(((req("metadata.name", "NotIn", "n1", field=True),),), False, id="field-out"),
    ],
)
def test_node_affinity(terms: tuple[model.NodeSelectorTerm, ...], ok: bool) -> None:
    verdict = filters.node_affinity(node(labels=LABELS), terms)
    assert verdict.ok is ok
    assert ok or verdict.reasons == ("node(s) didn't match Pod's node affinity/selector",)


ALLOC = {"cpu": 32.0, "memory": 64.0 * 2**30, "nvidia.com/gpu": 8.0, "pods": 110.0}


@pytest.mark.parametrize(
    ("requests", "used", "pods", "reasons"),
    [
        pytest.param({"cpu": 4.0}, {}, 1, (), id="fits"),
        pytest.param({"cpu": 4.0}, {"cpu": 28.0}, 1, (), id="exactly-full"),
        pytest.param({"cpu": 4.0}, {"cpu": 30.0}, 1, ("Insufficient cpu",), id="cpu-full"),
        pytest.param({"cpu": 1000.0}, {}, 1, ("Insufficient cpu",), id="1000-cpu"),
        pytest.param({"memory": 10.0 * 2**40}, {}, 1, ("Insufficient memory",), id="10Ti-memory"),
        pytest.param(
            {"nvidia.com/gpu": 2.0},
            {"nvidia.com/gpu": 7.0},
            1,
            ("Insufficient nvidia.com/gpu",),
            id="gpu",
        ),
        pytest.param({"nvidia.com/gpu": 2.0}, {}, 4, (), id="gang-of-4-fits"),
        pytest.param(
            {"nvidia.com/gpu": 2.0}, {}, 5, ("Insufficient nvidia.com/gpu",), id="gang-of-5"
        ),
        pytest.param(
            {"hugepages-2Mi": 2.0**21}, {}, 1, ("Insufficient hugepages-2Mi",), id="absent-resource"
        ),
        pytest.param({}, {"pods": 110.0}, 1, ("Too many pods",), id="pod-count"),
        pytest.param(
            {"cpu": 40.0, "nvidia.com/gpu": 9.0},
            {},
            1,
            ("Insufficient cpu", "Insufficient nvidia.com/gpu"),
            id="every-short-resource-named",
        ),
        pytest.param({"cpu": 0.1}, {"cpu": 31.9}, 1, (), id="float-rounding"),
    ],
)
def test_resource_fit(
    requests: dict[str, float], used: dict[str, float], pods: int, reasons: tuple[str, ...]
) -> None:
    verdict = filters.resource_fit(requests, ALLOC, used, pods)
    assert verdict.ok is (not reasons)
    assert verdict.reasons == reasons


@pytest.mark.parametrize(
    ("requests", "used", "count"),
    [
        pytest.param({"nvidia.com/gpu": 2.0}, {}, 4, id="gpus-bound"),
        pytest.param({"nvidia.com/gpu": 1.0, "cpu": 10.0}, {}, 3, id="cpu-bound"),
        pytest.param({"nvidia.com/gpu": 1.0}, {"pods": 108.0}, 2, id="pod-count-bound"),
        pytest.param({"cpu": 64.0}, {}, 0, id="none"),
    ],
)
def test_max_pods_agrees_with_resource_fit(
    requests: dict[str, float], used: dict[str, float], count: int
) -> None:
    assert filters.max_pods(requests, ALLOC, used) == count
    # Independent check: exactly `count` pods pass the fit filter, one more does not.
    if count:
        assert filters.resource_fit(requests, ALLOC, used, count).ok
    assert not filters.resource_fit(requests, ALLOC, used, count + 1).ok


def test_add_usage_counts_pods() -> None:
    used: dict[str, float] = {}
    filters.add_usage(used, {"cpu": 2.0}, 3)
    assert used == {"cpu": 6.0, "pods": 3.0}


def test_placement_reports_the_first_failing_filter_in_scheduler_order() -> None:
    cordoned_tainted = node(schedulable=False, taints=(("gpu", "x", "NoSchedule"),))
    assert filters.placement(cordoned_tainted).filter == filters.UNSCHEDULABLE
    tainted = node(taints=(("gpu", "x", "NoSchedule"),), labels={"zone": "a"})
    assert filters.placement(tainted, selector={"zone": "b"}).filter == filters.TAINTS
    assert filters.placement(tainted, tolerations=(tol("gpu", "Exists"),)).ok


def test_diagnosis_message_is_kube_schedulers() -> None:
    diag = filters.Diagnosis()
    taint = filters.taints(node(taints=(("gpu", "a100", "NoSchedule"),)), ())
    cpu = filters.resource_fit({"cpu": 64.0}, ALLOC, {})
    diag.extend([taint] * 150 + [cpu] * 50)
    assert diag.message() == (
        "0/200 nodes are available: 50 Insufficient cpu, "
        "150 node(s) had untolerated taint {gpu: a100}."
    )
    assert diag.main_filter() == filters.TAINTS
    diag.add(filters.PASS)
    assert diag.message().startswith("1/201 nodes are available")


# ------------------------------------------------------------------ the filters in a round


def test_foreign_non_gpu_requests_leave_gpu_capacity_alone() -> None:
    nodes = [("node", node_obj(f"v{i}", "v100")) for i in range(2)]
    base = plan([*pools("v100"), *nodes, ("job", job_obj("j", {"v100": 1.0}))])
    daemons = [("pod", daemon_pod(f"v{i}")) for i in range(2)]
    loaded = plan([*pools("v100"), *nodes, *daemons, ("job", job_obj("j", {"v100": 1.0}))])
    assert loaded.view.type_capacity.tolist() == base.view.type_capacity.tolist() == [8.0]
    assert loaded.view.node_foreign.tolist() == [0, 0]
    assert loaded.view.node_foreign_use[0] == {
        "ephemeral-storage": 2.0**30,
        "hugepages-2Mi": 512.0 * 2**20,
        "cpu": 1.0,
        "pods": 1.0,
    }
    assert [c.node for c in loaded.realisation.creates] == [
        c.node for c in base.realisation.creates
    ]


def test_tainted_node_gets_no_pod_unless_tolerated() -> None:
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    objs = [
        *pools("v100"),
        ("node", node_obj("v0", "v100", taints=taint)),
        ("node", node_obj("v1", "v100", gpus=1)),
    ]
    jobs = [("job", job_obj(f"j{i}", {"v100": 1.0})) for i in range(3)]
    tolerant = job_obj("t", {"v100": 1.0}, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    planned = plan([*objs, *jobs, ("job", tolerant)])
    placed = {c.job.name: c.node for c in planned.realisation.creates}
    assert all(node != "v0" for name, node in placed.items() if name != "t"), placed
    assert placed.get("t") in ("v0", "v1")
    # Only one untolerating job fits (v1 has 1 GPU); the others wait with the filter named.
    waiting = [j for j in planned.realisation.jobs.values() if not j.group and j.why]
    assert any("untolerated taint {dedicated: infer}" in j.why for j in waiting), waiting


def test_job_tolerating_nothing_on_tainted_pool_gets_the_filter_condition() -> None:
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]
    objs = [
        *pools("v100"),
        *[("node", node_obj(f"v{i}", "v100", taints=taint)) for i in range(3)],
    ]
    planned = plan([*objs, ("job", job_obj("j", {"v100": 1.0}))])
    (issue,) = planned.solution.issues
    assert issue.reason == "UntoleratedTaint"
    assert "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: infer}" in (
        issue.message
    )


def test_cpu_full_node_gets_no_pod_needing_cpu() -> None:
    objs = [
        *pools("v100"),
        ("node", node_obj("v0", "v100", cpu="4")),
        ("node", node_obj("v1", "v100")),
    ]
    planned = plan([*objs, ("job", job_obj("j", {"v100": 1.0}, cpu="8"))])
    assert [c.node for c in planned.realisation.creates] == ["v1"]
    only_small = plan([*objs[:2], ("job", job_obj("j", {"v100": 1.0}, cpu="8"))])
    (issue,) = only_small.solution.issues
    assert issue.reason == "InsufficientResources"
    assert "1 Insufficient cpu" in issue.message


def test_affinity_and_selector_only_land_on_matching_nodes() -> None:
    objs = [*pools("v100"), *[("node", node_obj(f"v{i}", "v100")) for i in range(3)]]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["v2"]}]}
                ]
            }
        }
    }
    planned = plan(
        [
            *objs,
            ("job", job_obj("a", {"v100": 1.0}, affinity=affinity)),
            ("job", job_obj("s", {"v100": 1.0}, nodeSelector={"zone": "v1"})),
        ]
    )
    assert {c.job.name: c.node for c in planned.realisation.creates} == {"a": "v2", "s": "v1"}


def test_empty_pool_is_left_out_and_its_jobs_conditioned() -> None:
    objs = [
        *pools("v100", "p100", "k80"),
        ("node", node_obj("v0", "v100")),
        ("node", node_obj("k0", "k80")),
        ("job", job_obj("p", {"p100": 1.0})),
        ("job", job_obj("v", {"v100": 1.0, "p100": 2.0})),
        ("job", job_obj("k", {"k80": 1.0})),
    ]
    planned = plan(objs)
    assert planned.view.gpu_types == ("k80", "v100")
    assert "p100" in planned.view.empty_types
    assert planned.view.pools["p100"].capacity == 0
    assert {c.job.name for c in planned.realisation.creates} == {"v", "k"}
    (issue,) = planned.solution.issues
    assert (issue.key, issue.reason) == (("ns", "p"), "NoCapacity")


def test_type_whose_every_node_is_cordoned_is_left_out() -> None:
    cordoned = node_obj("p0", "p100")
    cordoned["spec"]["unschedulable"] = True
    objs = [
        *pools("v100", "p100"),
        ("node", node_obj("v0", "v100")),
        ("node", cordoned),
        ("job", job_obj("p", {"p100": 1.0})),
        ("job", job_obj("v", {"v100": 1.0})),
    ]
    planned = plan(objs)
    assert planned.view.gpu_types == ("v100",)
    state = planned.view.pools["p100"]
    assert (state.matching, state.cordoned, state.capacity) == (1, 1, 0)
    assert "1 cordoned" in planned.view.empty_types["p100"]
    assert [c.job.name for c in planned.realisation.creates] == ["v"]
    (issue,) = planned.solution.issues
    assert issue.reason == "NoCapacity" and "1 cordoned" in issue.message


def test_every_pool_empty_plans_nothing_and_raises_nothing() -> None:
    planned = plan([*pools("v100", "p100"), ("job", job_obj("v", {"v100": 1.0}))])
    assert planned.view.gpu_types == ()
    assert planned.realisation.creates == ()
    assert [i.reason for i in planned.solution.issues] == ["NoCapacity"]


def test_filter_inputs_change_with_taints_and_foreign_cpu() -> None:
    base = [*pools("v100"), ("node", node_obj("v0", "v100"))]
    key = plan(base).view.filter_inputs()
    tainted = node_obj("v0", "v100", taints=[{"key": "k", "effect": "NoSchedule"}])
    assert plan([*pools("v100"), ("node", tainted)]).view.filter_inputs() != key
    assert plan([*base, ("pod", daemon_pod("v0"))]).view.filter_inputs() != key
    assert plan(base).view.filter_inputs() == key


def test_gpus_a_filter_frees_go_to_a_job_that_passes() -> None:
    """Two 1-GPU nodes, one tainted; two untolerating jobs and one tolerating: whatever the GPU
    plan picks, both GPUs end up used, and the tainted one only by the tolerating job."""
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    objs = [
        *pools("v100"),
        ("node", node_obj("v0", "v100", gpus=1, taints=taint)),
        ("node", node_obj("v1", "v100", gpus=1)),
        ("job", job_obj("a", {"v100": 1.0})),
        ("job", job_obj("b", {"v100": 1.0})),
        ("job", job_obj("t", {"v100": 1.0}, tolerations=[{"operator": "Exists"}])),
    ]
    placed = {c.job.name: c.node for c in plan(objs).realisation.creates}
    assert sorted(placed.values()) == ["v0", "v1"], placed
    assert placed.get("t") == "v0", placed


def test_psdsf_never_realises_on_a_tainted_node() -> None:
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    objs = [
        *pools("v100"),
        ("node", node_obj("v0", "v100", gpus=4, taints=taint)),
        ("node", node_obj("v1", "v100", gpus=1)),
        ("job", job_obj("a", {"v100": 1.0})),
    ]
    planned = plan(objs, "psdsf")
    assert [c.node for c in planned.realisation.creates] == ["v1"]

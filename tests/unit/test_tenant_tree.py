"""The tenant hierarchy: validation (``walras.core.tenant_tree``), hierarchical weights and
quotas through the policies.

Oracles: the admin's numbers (a child's guarantee within its parent's; each team's share of its
organisation's share), the fields the rules name, and the holdings the policy's targets imply.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from snapshot_helpers import eight_v100

from walras.allocator import quotas
from walras.core import governance, policies, snapshot, tenant_tree

GPU = "nvidia.com/gpu"


def tenant(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 1}, "spec": spec}


def parsed(*objs: dict[str, Any]) -> dict[str, governance.TenantSpec]:
    return {t.name: t for t in (governance.parse_tenant(o) for o in objs)}


def test_a_missing_parent_and_a_cycle_fall_back_to_flat_tenants_naming_spec_parent() -> None:
    ts = parsed(
        tenant("org", quotas={"v100": {"guaranteed": 4}}),
        tenant("lost", parent="nowhere", weight=3, quotas={"v100": {"guaranteed": 1}}),
        tenant("a", parent="b"),
        tenant("b", parent="a"),
        tenant("team", parent="org", quotas={"v100": {"guaranteed": 2}}),
    )
    out, problems = tenant_tree.validate(ts, {"v100": 8.0})
    assert problems["lost"].field == "spec.parent"
    assert problems["lost"].reason == tenant_tree.PARENT_NOT_FOUND
    assert {problems[n].reason for n in ("a", "b")} == {tenant_tree.PARENT_CYCLE}
    # Flat, without quotas, everything else kept.
    assert out["lost"].parent is None and not out["lost"].quotas and out["lost"].weight == 3
    assert out["a"].parent is None and out["b"].parent is None
    # The others are untouched.
    assert "team" not in problems and out["team"] == ts["team"]
    assert "org" not in problems


def test_guarantees_beyond_the_parent_or_the_pools_name_the_quota_field() -> None:
    ts = parsed(
        tenant("org", quotas={"v100": {"guaranteed": 4}}),
        tenant("t1", parent="org", quotas={"v100": {"guaranteed": 3}}),
        # 3 + 2 > 4: t2 does not fit what t1 left; t3 (1) still does.
        tenant("t2", parent="org", quotas={"v100": {"guaranteed": 2}}),
        tenant("t3", parent="org", quotas={"v100": {"guaranteed": 1}}),
        # The parent has no k80 guarantee to give.
        tenant("t4", parent="org", quotas={"k80": {"guaranteed": 1}}),
        # Roots: 4 (org) + 5 > 8 v100 in the pools.
        tenant("zeta", quotas={"v100": {"guaranteed": 5}}),
    )
    out, problems = tenant_tree.validate(ts, {"v100": 8.0, "k80": 8.0})
    assert problems["t2"].field == "spec.quotas.v100.guaranteed"
    assert problems["t2"].reason == tenant_tree.EXCEEDS_PARENT
    assert problems["t4"].field == "spec.quotas.k80.guaranteed"
    assert problems["zeta"].reason == tenant_tree.EXCEEDS_CAPACITY
    assert "zeta" in problems["zeta"].message or "v100" in problems["zeta"].message
    assert set(problems) == {"t2", "t4", "zeta"}
    assert out["t2"].parent is None and not out["t2"].quotas
    assert out["t3"].parent == "org"


def test_the_snapshot_carries_effective_tenants_and_their_problems() -> None:
    store = snapshot.Store()
    store.upsert("tenant", tenant("a", parent="missing", quotas={"v100": {"maximum": 1}}))
    snap = store.freeze(0.0)
    assert snap.tenant_problems["a"].field == "spec.parent"
    assert not snap.tenants["a"].quotas


def test_hierarchical_weights_share_the_parents_share_among_active_children() -> None:
    ts = parsed(
        tenant("org", weight=1),
        tenant("t1", parent="org", weight=3),
        tenant("t2", parent="org", weight=1),
        tenant("idle", parent="org", weight=100),  # no jobs: its share flows to its siblings
        tenant("other", weight=1),
    )
    w = governance.hierarchical_weights(["t1", "t2", "other"], ts)
    # org and other split 1:1; inside org, t1:t2 = 3:1.
    assert w["t1"] / w["other"] == pytest.approx(0.75)
    assert w["t2"] / w["other"] == pytest.approx(0.25)
    # The organisation with no active team: its share flows up (other alone).
    assert governance.hierarchical_weights(["other"], ts) == {"other": 1.0}


# ---------------------------------------------------------------- quotas through the tree


def _job(name: str, ns: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}", "generation": 1},
        "spec": {
            "replicas": replicas,
            "throughput": {"v100": 1.0},
            "utility": {"kind": "log"},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def _held(snap: Any, name: str = "price-discovery") -> dict[str, float]:
    args = {"eps": 1e-4, "backend": "numpy", "max_iter": 5000} if name == "price-discovery" else {}
    sol = policies.create(name, args).solve(snap, snapshot.cluster_view(snap))
    out: dict[str, float] = {}
    for r, job in enumerate(sol.jobs):
        gpus = float(sol.targets[r].sum()) * job.replicas * int(sol.gpus_per_pod[r])
        out[job.namespace] = out.get(job.namespace, 0.0) + gpus
    return out


ORG = [
    # An organisation guaranteed 6 of 8 v100, at most 6; its two teams guaranteed 3 and 2.
    tenant("org", quotas={"v100": {"guaranteed": 6, "maximum": 6}}),
    tenant("vision", parent="org", namespaces=["vision"], quotas={"v100": {"guaranteed": 3}}),
    tenant("nlp", parent="org", namespaces=["nlp"], quotas={"v100": {"guaranteed": 2}}),
]


@pytest.mark.parametrize("policy", ["price-discovery", "max-min-fairness"])
def test_teams_hold_their_guarantees_and_the_organisation_its_maximum(policy: str) -> None:
    jobs = [
        _job("v", "vision", replicas=3),
        _job("n", "nlp", replicas=2),
        *(_job(f"o{i}", "outside", replicas=2) for i in range(6)),
    ]
    h = _held(eight_v100(ORG, jobs), policy)
    assert h["vision"] >= 3 - quotas.LEND_SLACK
    assert h["nlp"] >= 2 - quotas.LEND_SLACK
    assert h["vision"] + h["nlp"] <= 6 + 1e-9


def test_an_idle_teams_guarantee_goes_to_its_sibling_first() -> None:
    # nlp has no jobs. vision wants 8 GPUs; outside wants 8 too. vision may take nlp's 2 from
    # the organisation's guarantee before anyone outside: it holds the whole 6 the organisation
    # may hold, outside the other 2.
    jobs = [
        *(_job(f"v{i}", "vision") for i in range(8)),
        *(_job(f"o{i}", "outside") for i in range(8)),
    ]
    h = _held(eight_v100(ORG, jobs))
    assert h["vision"] == pytest.approx(6.0, abs=quotas.LEND_SLACK)
    assert h["outside"] == pytest.approx(2.0, abs=quotas.LEND_SLACK)


def test_allocator_hierarchy_nested_columns() -> None:
    # Direct check of the layer: root 0 guaranteed 4 with children 1 (guaranteed 3) and 2 (none).
    q = quotas.Quotas(
        owner=np.array([1, 2, 3], dtype=np.int64),
        guaranteed=np.array([[4.0], [3.0], [0.0], [0.0]]),
        maximum=np.full((4, 1), np.inf),
        parent=np.array([-1, 0, 0, -1], dtype=np.int64),
    )
    A, D, R = np.ones((3, 1)), np.full((3, 1), 1.0), np.array([8.0])
    c = quotas.carve_outs(q, A, D, R)
    # Each carve-out is capped by its subtree's demand: child 1 asks 1 GPU, the root's subtree 2.
    np.testing.assert_allclose(c[:, 0], [2.0, 1.0, 0.0, 0.0])
    own = quotas.own_part(q, c)
    np.testing.assert_allclose(own[:, 0], [1.0, 1.0, 0.0, 0.0])
    cols = quotas.columns(q, R, own, np.zeros((4, 1), dtype=bool))
    # Job 0 (child 1) may use its own, its parent's and the shared column; job 1 (child 2) its
    # parent's and the shared one; job 2 (another root) only the shared one.
    by = {int(t): k for k, t in enumerate(cols.tenant)}
    assert cols.allowed[0, by[1]] and cols.allowed[0, by[0]] and cols.allowed[0, by[-1]]
    assert not cols.allowed[1, by[1]] and cols.allowed[1, by[0]]
    assert not cols.allowed[2, by[0]] and not cols.allowed[2, by[1]] and cols.allowed[2, by[-1]]


EXAMPLE = [
    tenant("research", quotas={"v100": {"guaranteed": 6, "maximum": 7}}),
    tenant("vision", parent="research", namespaces=["vision"], quotas={"v100": {"guaranteed": 4}}),
    tenant("nlp", parent="research", namespaces=["nlp"], quotas={"v100": {"guaranteed": 2}}),
]


def _jobs(**counts: int) -> list[dict[str, Any]]:
    return [_job(f"{ns}{i}", ns) for ns, k in counts.items() for i in range(k)]


@pytest.mark.parametrize(
    ("policy", "jobs", "expected"),
    [
        ("price-discovery", {"vision": 8, "ads": 8}, {"vision": 6, "ads": 2}),
        ("max-min-fairness", {"vision": 8, "ads": 8}, {"vision": 6.4, "ads": 1.6}),
        ("price-discovery", {"vision": 8, "nlp": 3, "ads": 8}, {"vision": 4, "nlp": 2, "ads": 2}),
        (
            "max-min-fairness",
            {"vision": 8, "nlp": 3, "ads": 8},
            {"vision": 4.5, "nlp": 2, "ads": 1.5},
        ),
        ("price-discovery", {"ads": 8}, {"ads": 8}),
        ("max-min-fairness", {"ads": 8}, {"ads": 8}),
        # research's maximum stops vision alone at 7 of the 8.
        ("price-discovery", {"vision": 8}, {"vision": 7}),
    ],
)
def test_the_worked_example_of_docs_governance(
    policy: str, jobs: dict[str, int], expected: dict[str, float]
) -> None:
    # The table of docs/governance.md's worked example: this test keeps the page and the code
    # in agreement (its numbers, to the two decimals it shows).
    h = _held(eight_v100(EXAMPLE, _jobs(**jobs)), policy)
    assert {k: round(v, 2) for k, v in h.items()} == expected

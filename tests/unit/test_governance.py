"""Tenant governance (``walras.core.governance``): who a job belongs to and what its weight counts.

Oracles: the admin's input itself (a tenant's jobs together hold ``W_t / Σ W`` of the total weight,
whatever its users write), clamping compared with the same job written with the bound as its
weight, and the solver's output (price discovery): a tenant that raises its job's weight or splits
it into ten identical smaller jobs buys the same GPUs as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.core import governance, model, policies, snapshot
from walras.core import tenants as tenants_module

GPU = "nvidia.com/gpu"


def job_obj(
    name: str,
    ns: str,
    throughput: dict[str, float],
    *,
    replicas: int = 1,
    weight: float = 1.0,
    tenant: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "throughput": throughput,
        "utility": {"kind": "log", "weight": weight},
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
    }
    if tenant is not None:
        spec["tenant"] = tenant
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}", "generation": 1},
        "spec": spec,
    }


def parse(obj: dict[str, Any]) -> model.JobSpec:
    job = model.parse_job(obj)
    assert isinstance(job, model.JobSpec), job
    return job


def tenant_obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 1}, "spec": spec}


def tenants(*objs: dict[str, Any]) -> dict[str, governance.TenantSpec]:
    parsed = [governance.parse_tenant(o) for o in objs]
    return {t.name: t for t in parsed}


# ---------------------------------------------------------------- tenant of a job


def test_tenant_is_the_namespace_unless_a_tenant_lists_it() -> None:
    ts = tenants(
        tenant_obj("research", namespaces=["vision", "nlp"], weight=3),
        tenant_obj("zeta", namespaces=["nlp"]),  # also lists nlp: the first by name wins
    )
    assert governance.tenant_of("vision", ts) == "research"
    assert governance.tenant_of("nlp", ts) == "research"
    assert governance.tenant_of("ops", ts) == "ops"
    # A job naming another tenant in spec.tenant stays in its namespace's tenant.
    job = parse(job_obj("j", "ops", {"v100": 1.0}, tenant="research"))
    (resolved,) = governance.resolve([job], ts)
    assert resolved.tenant == "ops"
    assert governance.tenant_weight("research", ts) == 3.0
    assert governance.tenant_weight("ops", ts) == 1.0


def test_parse_tenant_reads_every_field() -> None:
    t = governance.parse_tenant(
        tenant_obj(
            "a",
            weight=2.5,
            namespaces=["y", "x"],
            jobWeight={"min": 0.5, "max": 4},
            quotas={"v100": {"guaranteed": 8, "maximum": 16}, "k80": {"maximum": 4}},
        )
    )
    assert (t.name, t.weight, t.namespaces) == ("a", 2.5, ("x", "y"))
    assert (t.min_job_weight, t.max_job_weight) == (0.5, 4.0)
    assert t.quotas["v100"] == governance.Quota(8, 16)
    assert t.quotas["k80"] == governance.Quota(None, 4)


# ---------------------------------------------------------------- weights


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(1e-3, 1e6)), min_size=1, max_size=12
    ),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.floats(0.1, 100.0)),
)
def test_each_tenant_holds_its_admin_share_of_the_total_weight(
    jobs: list[tuple[str, float]], admin: dict[str, float]
) -> None:
    ts = tenants(*(tenant_obj(name, weight=w) for name, w in admin.items()))
    specs = [parse(job_obj(f"j{i}", ns, {"v100": 1.0}, weight=w)) for i, (ns, w) in enumerate(jobs)]
    w = governance.normalised_weights(specs, ts)
    present = sorted({ns for ns, _ in jobs})
    total_admin = sum(admin.get(t, 1.0) for t in present)
    for t in present:
        held = sum(wj for wj, (ns, _) in zip(w.tolist(), jobs, strict=True) if ns == t)
        assert held / w.sum() == pytest.approx(admin.get(t, 1.0) / total_admin, rel=1e-9)
    # The scale: mean weight 1 over the jobs solved.
    assert w.mean() == pytest.approx(1.0, rel=1e-9)


def test_weights_outside_the_tenant_range_count_as_the_bound() -> None:
    ts = tenants(tenant_obj("a", jobWeight={"min": 0.5, "max": 4}))
    greedy = [
        parse(job_obj("x", "a", {"v100": 1}, weight=1e6)),
        parse(job_obj("y", "a", {"v100": 1})),
    ]
    at_max = [
        parse(job_obj("x", "a", {"v100": 1}, weight=4)),
        parse(job_obj("y", "a", {"v100": 1})),
    ]
    tiny = [
        parse(job_obj("x", "a", {"v100": 1}, weight=1e-9)),
        parse(job_obj("y", "a", {"v100": 1})),
    ]
    at_min = [
        parse(job_obj("x", "a", {"v100": 1}, weight=0.5)),
        parse(job_obj("y", "a", {"v100": 1})),
    ]
    np.testing.assert_array_equal(
        governance.normalised_weights(greedy, ts), governance.normalised_weights(at_max, ts)
    )
    np.testing.assert_array_equal(
        governance.normalised_weights(tiny, ts), governance.normalised_weights(at_min, ts)
    )
    # Default range without a Tenant object: [0.1, 10].
    default = [
        parse(job_obj("x", "b", {"v100": 1}, weight=1e6)),
        parse(job_obj("y", "b", {"v100": 1})),
    ]
    w = governance.normalised_weights(default, {})
    assert w[0] / w[1] == pytest.approx(10.0)


def test_one_namespace_of_weight_one_jobs_is_left_as_it_was() -> None:
    specs = [parse(job_obj(f"j{i}", "ns", {"v100": 1.0})) for i in range(5)]
    np.testing.assert_array_equal(governance.normalised_weights(specs, {}), np.ones(5))


# ---------------------------------------------------------------- solver output


def _store(job_objs: list[dict[str, Any]]) -> snapshot.Store:
    store = snapshot.Store()
    # Tenant b weighs 2: tenant a's budget is a third, too little for its gang to run all the
    # time, so its share is set by the market and not by its own size.
    store.upsert("tenant", tenant_obj("b", weight=2))
    for gpu_type in ("v100", "k80"):
        store.upsert(
            "pool", {"metadata": {"name": gpu_type, "generation": 1}, "spec": {"gpuType": gpu_type}}
        )
    # 24 v100 and 24 k80 GPUs.
    for i, (gpu_type, gpus) in enumerate([("v100", 8)] * 3 + [("k80", 8)] * 3):
        store.upsert(
            "node",
            {
                "metadata": {"name": f"n{i}", "labels": {"walras.dev/gpu-type": gpu_type}},
                "status": {
                    "allocatable": {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
    for obj in job_objs:
        store.upsert("job", obj)
    return store


def _tenant_outcome(job_objs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per namespace (= tenant): (work per second its jobs get, what it spends at the prices)."""
    snap = _store(job_objs).freeze(0.0)
    view = snapshot.cluster_view(snap)
    policy = policies.create("price-discovery", {"eps": 1e-3, "backend": "numpy", "max_iter": 5000})
    sol = policy.solve(snap, view)
    assert not sol.issues, sol.issues
    assert sol.converged, (sol.gap, sol.iterations)
    prices = np.array([sol.prices[t] for t in sol.groups])
    out: dict[str, tuple[float, float]] = {}
    for r, job in enumerate(sol.jobs):
        gpus = sol.targets[r] * job.replicas * sol.gpus_per_pod[r]
        work, spend = out.get(job.namespace, (0.0, 0.0))
        out[job.namespace] = (
            work + float(sol.expected_throughput[r]),
            spend + float(prices @ gpus),
        )
    return out


def _others() -> list[dict[str, Any]]:
    # Tenant b: two jobs that want every GPU too, so capacity is short and shares are contested.
    return [
        job_obj("b1", "b", {"v100": 15.0, "k80": 5.0}, replicas=20),
        job_obj("b2", "b", {"v100": 7.5, "k80": 6.0}, replicas=20),
    ]


def test_raising_the_weight_or_splitting_the_job_buys_nothing() -> None:
    gang = {"v100": 10.0, "k80": 7.5}  # work/s of the 20-pod gang
    base = [job_obj("big", "a", gang, replicas=20), *_others()]
    raised = [job_obj("big", "a", gang, replicas=20, weight=1e6), *_others()]
    # Ten jobs of two pods each, each a tenth of the gang's throughput: the same work, split.
    part = {t: v / 10 for t, v in gang.items()}
    split = [*(job_obj(f"part{i}", "a", part, replicas=2) for i in range(10)), *_others()]
    before = _tenant_outcome(base)
    # Both tenants get work done, and a's gang runs only part of the time (capacity is short:
    # 60 pods want 48 GPUs), so the market and not the gang's own size sets a's share.
    assert before["a"][0] > 0 and before["b"][0] > 0
    assert before["a"][0] < 0.99 * gang["v100"]
    for variant in (raised, split):
        after = _tenant_outcome(variant)
        # A Fisher market with log utilities (Eisenberg-Gale) has unique equilibrium prices and
        # utilities, and buyers with the same utility vector and budgets summing to B demand what
        # one buyer with budget B demands; the per-type GPUs of an indifferent buyer are not
        # unique, so compare the tenant's work rate and spending. The solver stops at a relative
        # duality gap of 1e-3 (the operator's default); a relative 1e-2 on each is ten times that.
        # Prices scale with the weights' common factor (governance's c), so spending is compared
        # as each tenant's fraction of the total.
        spent_before = before["a"][1] + before["b"][1]
        spent_after = after["a"][1] + after["b"][1]
        for tenant in ("a", "b"):
            assert after[tenant][0] == pytest.approx(before[tenant][0], rel=1e-2)
            assert after[tenant][1] / spent_after == pytest.approx(
                before[tenant][1] / spent_before, rel=1e-2
            )


def test_psdsf_tenant_weight_is_the_admins_whatever_the_jobs_ask() -> None:
    store = _store(
        [
            job_obj("greedy", "a", {"v100": 1.0}, weight=1e6, tenant="b"),
            *(job_obj(f"part{i}", "a", {"v100": 1.0}) for i in range(10)),
            job_obj("b1", "b", {"v100": 1.0}),
        ]
    )
    snap = store.freeze(0.0)
    tm = tenants_module.tenant_model(snap.jobs, snap.nodes, snap.pools, snap.tenants)
    # spec.tenant "b" does not move the greedy job out of namespace a's tenant.
    assert tm.tenants == ("a", "b")
    assert tm.tenant_jobs["a"] == tuple(sorted(j.key for j in snap.jobs if j.namespace == "a"))
    # φ_n: 1 for a (no Tenant object), 2 for b (its Tenant): the jobs' weights play no part.
    np.testing.assert_array_equal(tm.weight, [1.0, 2.0])

"""The scheduling core's policy layer: registry, Gavel's baselines, POP shards, Hadar, weighting,
the solution memo and restart accounting.

Oracles: feasibility (Σ_j d_j x_{j,t} ≤ free GPUs of type t, rows ≤ 1; no node over its GPUs;
whole gangs), hand-derived arithmetic (weighting's worked example, restart accounting), the
stability of POP's shard assignment under unrelated arrivals, and the registry's own contract
(every CLI/chart name resolves; unknown names list the choices).
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.snapshot_helpers import (
    assert_type_feasible,
    cluster,
    job,
    solve,
    with_work,
    workload,
)

from walras.core import cycle, history, policies, snapshot, weighting
from walras.core.policies import registry


def test_registry_names_aliases_and_errors() -> None:
    names = policies.names()
    for name in ("price-discovery", "psdsf", "psdsf-distributed", "hadar", "hadare"):
        assert name in names
    gavel = {
        "max_min_fairness_perf": "max-min-fairness",
        "max_min_fairness": "max-min-fairness-agnostic",
        "min_total_duration_perf": "min-total-duration",
        "min_total_duration": "min-total-duration-agnostic",
        "finish_time_fairness_perf": "finish-time-fairness",
        "finish_time_fairness": "finish-time-fairness-agnostic",
        "fifo_perf": "fifo-aware",
        "fifo": "fifo-agnostic",
    }
    for alias, name in gavel.items():
        assert policies.canonical(alias) == name
        assert registry.summary(alias)
    with pytest.raises(policies.UnknownPolicyError, match=r"choose one of .*price-discovery"):
        policies.create("nope")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("psdsf", summary="dup")(lambda options: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    "name",
    [
        "max-min-fairness",
        "max-min-fairness-agnostic",
        "fifo-aware",
        "fifo-agnostic",
        "min-total-duration",
        "finish-time-fairness",
    ],
)
def test_gavel_baselines_give_feasible_targets(name: str) -> None:
    store = cluster(with_work(workload()))
    sol = solve(name, store)
    assert len(sol.jobs) == 12 and not sol.issues
    if name != "fifo-agnostic":
        # Gavel's agnostic FIFO can overbook a type (walras.allocator.gavel.fifo documents the
        # quirk); the realiser then runs only what fits, which the pipeline tests check.
        assert_type_feasible(sol, store)
    assert sol.targets.sum() > 0
    # Time is only ever given where the job makes progress.
    for r, j in enumerate(sol.jobs):
        for g, t in enumerate(sol.groups):
            if j.throughput.get(t, 0.0) == 0.0:
                assert sol.targets[r, g] == 0.0


def test_remaining_work_policies_need_total_work() -> None:
    sol = solve("min-total-duration", cluster(workload()[:3]))
    assert {i.reason for i in sol.issues} == {"TotalWorkRequired"}
    assert all(i.field == "spec.totalWork" for i in sol.issues)


@pytest.mark.parametrize("name", ["price-discovery", "max-min-fairness"])
@pytest.mark.parametrize("k", [2, 3])
def test_pop_shards_are_feasible_and_cover_every_job(name: str, k: int) -> None:
    store = cluster(with_work(workload()))
    sol = solve(name, store, pop_shards=k)
    assert [j.key for j in sol.jobs] == sorted(j.key for j in sol.jobs)
    assert len(sol.jobs) == 12
    assert_type_feasible(sol, store)
    assert sol.timings["shards"] == k


def test_pop_shard_of_a_job_is_stable_when_others_come_and_go() -> None:
    from walras.allocator import pop

    base = [f"uid-j{i:02d}" for i in range(12)]
    more = [*base, *(f"uid-new{i}" for i in range(30))]
    a = dict(zip(base, pop.assign_shards(base, 4).tolist(), strict=True))
    b = dict(zip(more, pop.assign_shards(more, 4).tolist(), strict=True))
    assert all(a[u] == b[u] for u in base)


def test_pop_refuses_node_group_policies() -> None:
    with pytest.raises(policies.PolicyUnavailableError, match="groups are nodes"):
        solve("psdsf", cluster(workload()), pop_shards=2)


@pytest.mark.parametrize("name", ["hadar", "hadare"])
def test_hadar_places_whole_gangs_within_node_capacity(name: str) -> None:
    store = cluster(with_work(workload()))
    snap = store.freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    sol = policies.create(name).solve(snap, view)
    assert sol.placements is not None and sol.placements
    gpus = {n.name: int(g) for n, g in zip(view.nodes, view.node_gpus, strict=True)}
    used: dict[str, int] = {}
    by_key = {j.key: j for j in sol.jobs}
    for key, where in sol.placements.items():
        pods = sum(n for _, n in where)
        # One gang, or (HadarE) several whole gangs of the job.
        assert pods % by_key[key].replicas == 0 and pods >= by_key[key].replicas
        for node_name, n in where:
            used[node_name] = used.get(node_name, 0) + n
        assert sol.rates[key] > 0
    assert all(used[n] <= gpus[n] for n in used), (used, gpus)


def test_hadar_needs_total_work() -> None:
    sol = policies.create("hadar").solve(
        cluster(workload()[:2]).freeze(now=0.0),
        snapshot.cluster_view(cluster(workload()[:2]).freeze(now=0.0)),
    )
    assert {i.reason for i in sol.issues} == {"TotalWorkRequired"}


def test_weighting_worked_example() -> None:
    # Docstring example: 100 s and 400 s left, β = -0.5: T^β = 0.1, 0.05; mean 0.075;
    # factors 4/3 and 2/3.
    short, long_ = job("short", {"v100": 1.0}), job("long", {"v100": 1.0})
    short["spec"]["totalWork"], long_["spec"]["totalWork"] = 100.0, 400.0
    store = cluster([short, long_])
    snap = store.freeze(now=0.0)
    jobs = list(snap.active_jobs)
    f = weighting.factors(jobs, snap, weighting="remaining", exponent=-0.5)
    by_name = {j.name: v for j, v in zip(jobs, f, strict=True)}
    assert by_name["short"] == pytest.approx(4 / 3)
    assert by_name["long"] == pytest.approx(2 / 3)
    assert np.all(weighting.factors(jobs, snap) == 1.0)


def test_memo_reuses_a_solution_only_for_identical_inputs() -> None:
    store = cluster(workload())
    policy = policies.create("price-discovery", {"backend": "numpy"})
    snap = store.freeze(now=0.0)
    view = snapshot.cluster_view(snap)
    first = policy.solve(snap, view)
    again = policy.solve(store.freeze(now=360.0), view)
    assert again.timings == {"reused": 1.0} and np.array_equal(again.targets, first.targets)
    assert again.iterations == first.iterations
    store.upsert("job", job("j99", {"v100": 3.0}))
    snap3 = store.freeze(now=720.0)
    third = policy.solve(snap3, snapshot.cluster_view(snap3))
    assert len(third.jobs) == 13 and "reused" not in third.timings


def test_history_leaves_restart_time_out_of_work() -> None:
    # Rate 2 work/s, restart 10 s, started at t = 0: by t = 100 it worked 90 s → 180 units; the
    # 100 s still count as received and elapsed.
    h = history.History()
    h.advance(0.0)
    h.run_in("v100", 2.0, 0.0, restarted=True, restart_s=10.0)
    h.advance(5.0)
    assert h.work_done == 0.0
    h.advance(100.0)
    assert h.work_done == pytest.approx(180.0)
    assert h.received["v100"] == pytest.approx(100.0) and h.elapsed == pytest.approx(100.0)
    # Kept on its nodes next round: no new restart.
    h.run_in("v100", 2.0, 100.0, restarted=False, restart_s=10.0)
    h.advance(200.0)
    assert h.work_done == pytest.approx(380.0)


def test_cycle_counts_restarts_for_gangs_placed_afresh() -> None:
    store = cluster(with_work(workload()[:3], total=1e6))
    state = cycle.CycleState()
    policy = policies.create("price-discovery", {"backend": "numpy"})
    plan = cycle.plan(state, policy, store.freeze(now=0.0), now=0.0, round_no=1, restart_s=10.0)
    placed = [k for k, jr in plan.realisation.jobs.items() if jr.group]
    assert placed
    hist = plan.histories[placed[0]]
    assert hist.productive_from == pytest.approx(10.0)


def test_hadare_copies_forkable_jobs_with_the_fork_environment() -> None:
    # A forkable job and a plain one on an idle cluster (2 v100 nodes, 3 k80 nodes): HadarE runs
    # copies of the forkable job on several nodes, of both types, each pod told its copy; the
    # plain job runs exactly its one gang.
    fork = job("fork", {"v100": 4.0, "k80": 1.0}, replicas=1)
    fork["spec"].update(forkable=True, totalWork=1e7)
    plain = job("plain", {"v100": 4.0, "k80": 1.0}, replicas=1)
    plain["spec"]["totalWork"] = 1e7
    store = cluster([fork, plain])
    plan = cycle.plan(
        cycle.CycleState(), policies.create("hadare"), store.freeze(now=0.0), now=0.0, round_no=1
    )
    creates = [c for c in plan.realisation.creates if c.job.name == "fork"]
    assert len({c.node for c in creates}) >= 2
    assert len({c.node.split("-")[0] for c in creates}) == 2  # copies on v100 and on k80
    envs = [
        {e["name"]: e.get("value") for e in c.manifest["spec"]["containers"][0]["env"]}
        for c in creates
    ]
    count = {int(e["WALRAS_FORK_COUNT"]) for e in envs}
    assert count == {len(creates)}  # one-pod gangs: as many copies as pods
    assert sorted(int(e["WALRAS_FORK_INDEX"]) for e in envs) == list(range(len(creates)))
    assert all(e["WALRAS_JOB_NAME"] == "fork" for e in envs)
    assert sum(float(e["WALRAS_FORK_STEPS"]) for e in envs) > 0
    plain_pods = [c for c in plan.realisation.creates if c.job.name == "plain"]
    assert len(plain_pods) == 1
    plain_env = {e["name"] for e in plain_pods[0].manifest["spec"]["containers"][0]["env"]}
    assert not {n for n in plain_env if n.startswith("WALRAS_FORK_")}  # only its pod identity


def test_history_half_life_weighs_recent_service() -> None:
    # Half-life h. A job that runs the whole time keeps received == elapsed (the decayed integrals
    # of the same indicator). A job that ran during [0, h] and waited during [h, 2h]:
    #   received(2h) = ½ · h(1 − ½)/ln 2 = 0.25 h/ln 2,
    #   elapsed(2h) = ½ · 0.5 h/ln 2 + 0.5 h/ln 2 = 0.75 h/ln 2  →  share 1/3
    # (without decay it would be 1/2: the older half of its history weighs less).
    h = 360.0
    always = history.History()
    always.advance(0.0, h)
    always.run_in("v100", 1.0, 0.0)
    for t in (10.0, 360.0, 400.0, 1000.0):
        always.advance(t, h)
        assert always.received["v100"] == pytest.approx(always.elapsed)
    early = history.History()
    early.advance(0.0, h)
    early.run_in("v100", 1.0, 0.0)
    early.advance(h, h)
    early.run_in("", 0.0, h)
    early.advance(2 * h, h)
    assert early.received["v100"] / early.elapsed == pytest.approx(1 / 3)
    assert early.work_done == pytest.approx(h)  # work never decays

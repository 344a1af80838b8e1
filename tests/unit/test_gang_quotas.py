"""Quotas over whole gangs (``walras.allocator.gang_quotas``) and under Hadar/HadarE.

Oracles: the admin's numbers themselves. Every maximum holds; the carve-out
``c_tg = min(G_tg, f_tg)`` is recomputed here from its definition (``f_tg``: GPUs asked by the
tenant's jobs that can use ``g`` and whose gang fits in ``G_tg``); with one-GPU gangs and flat
tenants a tenant holds ``c_tg`` of a type unless every job of it that can use the type runs
(the module's exactness argument); with larger gangs a tenant short of ``c_tg`` has no waiting
job that fits in the free GPUs (nothing it could take without preempting).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from snapshot_helpers import eight_v100

from walras.allocator import gang_quotas, quotas


def _instance(seed: int, *, one_gpu: bool) -> dict[str, Any]:
    """2-8 jobs of 2-3 flat tenants on 1-2 types of 3-10 GPUs; Σ_t G_tg ≤ R_g (validation),
    M ≥ G (the schema); the policy's gangs are random whole gangs that fit the capacity (a
    policy that knows nothing of quotas)."""
    rng = np.random.default_rng(seed)
    m, T, n = int(rng.integers(1, 3)), int(rng.integers(2, 4)), int(rng.integers(2, 9))
    R = rng.integers(3, 11, size=m)
    usable = rng.random((n, m)) < 0.7
    usable[np.arange(n), rng.integers(0, m, n)] = True
    replicas = np.ones(n, dtype=np.int64) if one_gpu else rng.integers(1, 4, n).astype(np.int64)
    G = np.zeros((T, m))
    M = np.full((T, m), np.inf)
    for t in range(T):
        for g in range(m):
            if rng.random() < 0.7:
                G[t, g] = int(rng.integers(0, int(R[g]) // T + 1))
            if rng.random() < 0.5:
                M[t, g] = int(rng.integers(max(int(G[t, g]), 1), int(R[g]) + 1))
    owner = rng.integers(0, T, n).astype(np.int64)
    free = R.astype(np.int64).copy()
    gangs = []
    for i in rng.permutation(n).tolist():
        types = [g for g in range(m) if usable[i, g] and free[g] >= replicas[i]]
        if types and rng.random() < 0.9:
            g = int(rng.choice(types))
            counts = np.zeros(m, dtype=np.int64)
            counts[g] = replicas[i]
            free[g] -= replicas[i]
            gangs.append(gang_quotas.GangUse(int(i), counts, kept=bool(rng.random() < 0.5)))
    q = quotas.Quotas(owner=owner, guaranteed=G, maximum=M)
    return {"q": q, "gangs": gangs, "replicas": replicas, "usable": usable, "R": R}


def _carve(inst: dict[str, Any]) -> np.ndarray[Any, Any]:
    q, usable, replicas = inst["q"], inst["usable"], inst["replicas"]
    T, m = q.guaranteed.shape
    c = np.zeros((T, m))
    for t in range(T):
        for g in range(m):
            f = sum(
                int(replicas[i])
                for i in range(len(q.owner))
                if q.owner[i] == t and usable[i, g] and replicas[i] <= q.guaranteed[t, g]
            )
            c[t, g] = min(q.guaranteed[t, g], f)
    return c


def _result(inst: dict[str, Any], fixed: gang_quotas.Repaired) -> tuple[Any, Any, set[int]]:
    """GPUs held per (tenant, type) and free per type, counted from the gangs; running jobs."""
    q = inst["q"]
    T, m = q.guaranteed.shape
    held = np.zeros((T, m))
    free = inst["R"].astype(float).copy()
    running: set[int] = set()
    for gang, keep in zip(inst["gangs"], fixed.kept, strict=True):
        if keep:
            held[q.owner[gang.job]] += gang.counts
            free -= gang.counts
            running.add(gang.job)
    for i, g in fixed.added:
        assert i not in running, "a job runs one gang"
        assert inst["usable"][i, g]
        held[q.owner[i], g] += inst["replicas"][i]
        free[g] -= inst["replicas"][i]
        running.add(i)
    return held, free, running


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), backfill=st.booleans())
def test_one_gpu_gangs_meet_every_guarantee_and_maximum(seed: int, backfill: bool) -> None:
    inst = _instance(seed, one_gpu=True)
    fixed = gang_quotas.repair(
        inst["q"], inst["gangs"], inst["replicas"], inst["usable"], inst["R"], backfill=backfill
    )
    held, free, running = _result(inst, fixed)
    q = inst["q"]
    assert (free >= 0).all()
    assert (held <= q.maximum).all()
    np.testing.assert_allclose(fixed.held, held)
    c = _carve(inst)
    np.testing.assert_allclose(fixed.carve, c)
    for t, g in zip(*np.nonzero(held < c), strict=True):
        # Short: every job of t that can use g runs (somewhere), or t's maximum stops it.
        for i in np.flatnonzero((q.owner == t) & inst["usable"][:, g]):
            assert i in running or held[t, g] + 1 > q.maximum[t, g]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), backfill=st.booleans())
def test_gangs_keep_every_maximum_and_no_short_tenant_leaves_room_unused(
    seed: int, backfill: bool
) -> None:
    inst = _instance(seed, one_gpu=False)
    fixed = gang_quotas.repair(
        inst["q"], inst["gangs"], inst["replicas"], inst["usable"], inst["R"], backfill=backfill
    )
    held, free, running = _result(inst, fixed)
    q = inst["q"]
    assert (free >= 0).all()
    assert (held <= q.maximum).all()
    c = _carve(inst)
    # The guarantee up to gang granularity: a tenant short on g has no waiting job that fits
    # in what it is still owed and in the free GPUs of g (it would have been placed there).
    for t, g in zip(*np.nonzero(held < c), strict=True):
        for i in np.flatnonzero((q.owner == t) & inst["usable"][:, g]):
            r = int(inst["replicas"][i])
            if i in running or held[t, g] + r > min(c[t, g], q.maximum[t, g]):
                continue
            assert r > free[g]
    # A gang preempted for a guarantee left its tenant with at least its carve-out, or with
    # what it held before if that was less (nobody loses a guarantee it holds).
    before = np.zeros_like(held)
    for k, gang in enumerate(inst["gangs"]):
        if fixed.kept[k] or k in fixed.preempted:
            before[q.owner[gang.job]] += gang.counts
    for k in fixed.preempted:
        u = q.owner[inst["gangs"][k].job]
        assert (held[u] >= np.minimum(c[u], before[u]) - 1e-9).all()


def test_a_borrowed_gpu_goes_back_to_its_owner_and_the_borrower_keeps_its_own() -> None:
    # 4 GPUs of one type; tenant 0 guaranteed 2, tenant 1 guaranteed 1. Tenant 1 runs four
    # one-GPU gangs (it borrowed 3); tenant 0's two jobs arrive: two of tenant 1's gangs are
    # preempted, tenant 1 keeps 2 (≥ its guarantee of 1; nothing more is needed).
    q = quotas.Quotas(
        owner=np.array([1, 1, 1, 1, 0, 0]),
        guaranteed=np.array([[2.0], [1.0]]),
        maximum=np.full((2, 1), np.inf),
    )
    gangs = [gang_quotas.GangUse(i, np.array([1]), kept=True) for i in range(4)]
    fixed = gang_quotas.repair(
        q, gangs, np.ones(6, dtype=np.int64), np.ones((6, 1), dtype=bool), np.array([4])
    )
    assert sorted(fixed.added) == [(4, 0), (5, 0)]
    assert sum(fixed.kept) == 2
    np.testing.assert_allclose(fixed.held, [[2.0], [2.0]])


def test_a_gang_bigger_than_the_borrowers_excess_is_not_preempted() -> None:
    # 4 GPUs; tenant 1 (guaranteed 1, a waiting 1-GPU job makes c = 1) runs one 3-GPU gang
    # (bigger than its guarantee: it borrowed 2 of its 3). Tenant 0 (guaranteed 3) waits with a
    # 3-GPU job: 1 GPU is free, and preempting the 3-GPU gang would take tenant 1 below its own
    # c = 1 (it holds 3 ≥ 1 now): the whole-gang bound, tenant 0 stays short.
    q = quotas.Quotas(
        owner=np.array([1, 1, 0]),
        guaranteed=np.array([[3.0], [1.0]]),
        maximum=np.full((2, 1), np.inf),
    )
    fixed = gang_quotas.repair(
        q,
        [gang_quotas.GangUse(0, np.array([3]), kept=True)],
        np.array([3, 1, 3]),
        np.ones((3, 1), dtype=bool),
        np.array([4]),
    )
    assert fixed.kept == (True,) and fixed.added == ()
    np.testing.assert_allclose(fixed.carve, [[3.0], [1.0]])


def test_one_gang_that_frees_enough_is_preempted_rather_than_several() -> None:
    # 4 GPUs; tenant 1 (no guarantee) runs a 1-GPU and a 3-GPU gang; tenant 0 (guaranteed 3)
    # waits with a 3-GPU job: the 3-GPU gang is preempted alone, the 1-GPU gang keeps running.
    q = quotas.Quotas(
        owner=np.array([1, 1, 0]),
        guaranteed=np.array([[3.0], [0.0]]),
        maximum=np.full((2, 1), np.inf),
    )
    gangs = [
        gang_quotas.GangUse(0, np.array([1]), kept=True),
        gang_quotas.GangUse(1, np.array([3]), kept=True),
    ]
    fixed = gang_quotas.repair(
        q, gangs, np.array([1, 3, 3]), np.ones((3, 1), dtype=bool), np.array([4])
    )
    assert fixed.kept == (True, False) and fixed.added == ((2, 0),)


# ---------------------------------------------------------------- through Hadar and HadarE

GPU = "nvidia.com/gpu"


def _job(name: str, ns: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}", "generation": 1},
        "spec": {
            "replicas": replicas,
            "throughput": {"v100": 1.0},
            "totalWork": 1e6,
            "utility": {"kind": "log"},
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "i", "resources": {"limits": {GPU: "1"}}}]
                }
            },
        },
    }


@pytest.mark.parametrize("name", ["hadar", "hadare"])
def test_hadar_keeps_a_maximum_and_gives_a_guarantee(name: str) -> None:
    # Tenant "a" is guaranteed 4 v100 and runs two 2-GPU jobs; tenant "b" may hold at most 2 and
    # runs four 2-GPU jobs; tenant "c" (no quota) four more: 24 GPUs asked of 8.
    from walras.core import policies, snapshot

    snap = eight_v100(
        [
            {"metadata": {"name": "a"}, "spec": {"quotas": {"v100": {"guaranteed": 4}}}},
            {"metadata": {"name": "b"}, "spec": {"quotas": {"v100": {"maximum": 2}}}},
        ],
        [
            *(_job(f"a{i}", "a", 2) for i in range(2)),
            *(_job(f"b{i}", "b", 2) for i in range(4)),
            *(_job(f"c{i}", "c", 2) for i in range(4)),
        ],
        0.0,
    )
    sol = policies.create(name, {}).solve(snap, snapshot.cluster_view(snap))
    assert sol.placements is not None
    held: dict[str, int] = {}
    for job in sol.jobs:
        pods = sum(n for _, n in sol.placements.get(job.key, ()))
        held[job.namespace] = held.get(job.namespace, 0) + pods
    assert held.get("a", 0) >= 4
    assert held.get("b", 0) <= 2
    assert sum(held.values()) <= 8

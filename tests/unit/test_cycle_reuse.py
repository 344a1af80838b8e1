"""The cycle's reuse across rounds is exact: the slow path (everything rebuilt every round) is
the oracle.

What is reused: ``Store.freeze``'s sorted parts whose indexes did not change, the last cluster
view of the same node/pool/foreign-pod tuples (``snapshot.cluster_view``), the view's solve key
and node index (``ClusterView.inputs_key``, ``node_index``), one ``Capacity`` per view
(``Capacity.of``), price discovery's problem rows per kind of job (``_RowMemo``), a round's
pods grouped by job, the jobs' part of ``inputs_key`` and the realiser's throughput per group
(one-entry memos on their inputs' identity), the realiser's node usage added when read
(``_NodeUse.take``), the simulator's pods derived from the first parsed
one of their job (``_created``), and Hadar's forward pass evaluating FIND_ALLOC with
``best_one``. Each is switched off here (rebuilt every
time, ``best_many`` in the forward pass), and a simulated run must make the same plan in every
round and finish every job at the same time.
"""

from __future__ import annotations

import pathlib
import types
from typing import Any

import numpy as np
import pytest
from tests.unit import snapshot_helpers as helpers

from walras.allocator.hadar import admission
from walras.allocator.hadar.find_alloc import States, best_many
from walras.core import crd, cycle, filters, model, realise, snapshot
from walras.core.policies import base as policy_base
from walras.core.policies import eligibility, price_discovery
from walras.sim import walras_mechanics
from walras.sim.config import SimConfig
from walras.sim.scenario import load_scenario
from walras.sim.tally import Tally

TRACE = pathlib.Path(__file__).parents[1] / "data" / "gavel" / "static_multi_seed0_n100.trace"


class _Forgetful(list[Any]):
    """A memo list that stays empty (``memo[:] = [entry]`` stores nothing)."""

    def __setitem__(self, index: Any, value: Any) -> None:
        pass


def _slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rebuild everything every round (the code before the reuse)."""
    monkeypatch.setattr(snapshot.Store, "_reuse", lambda self, part, *idx: ((), None))
    monkeypatch.setattr(snapshot, "cluster_view", snapshot._build_view)
    monkeypatch.setattr(eligibility.Capacity, "of", classmethod(lambda cls, view: cls(view)))
    monkeypatch.setattr(price_discovery._RowMemo, "row", lambda self, job: self._build(job))

    def take_now(use: Any, job: Any, nodes: Any) -> None:
        for k, n in nodes:
            requests = job.pod_requests(use.view.node_pool[k].resource_name)
            filters.add_usage(use.usage(k), requests, n)

    monkeypatch.setattr(realise._NodeUse, "take", take_now)
    # One-entry memos keyed on the identity of their inputs: never hold anything.
    for module, name in (
        (snapshot, "_LAST_BY_JOB"),
        (policy_base, "_LAST_JOBS_KEY"),
        (realise, "_LAST_RATES"),
    ):
        monkeypatch.setattr(module, name, _Forgetful())
    monkeypatch.setattr(
        walras_mechanics,
        "_created",
        lambda sim, create: model.parse_pod(
            walras_mechanics.created_pod(create.manifest, create.node)
        ),
    )
    view_key = snapshot.ClusterView.inputs_key

    def fresh_key(view: snapshot.ClusterView) -> tuple[object, ...]:
        object.__setattr__(view, "_inputs", None)
        return view_key(view)

    monkeypatch.setattr(snapshot.ClusterView, "inputs_key", fresh_key)
    monkeypatch.setattr(
        snapshot.ClusterView,
        "node_index",
        property(lambda view: {n.name: k for k, n in enumerate(view.nodes)}),
    )

    def best_one(
        speed: Any, gang: int, free: Any, prices: Any, utils: Any
    ) -> tuple[float, Any, float, float, float]:
        b = best_many(
            States(free[None, :], prices[None, :]),
            speed[None, :],
            np.array([gang]),
            utils[None, :],
            counts=True,
        )
        return (
            float(b.payoff[0, 0]),
            b.counts[0, 0],
            float(b.rate[0, 0]),
            float(b.utility[0, 0]),
            float(b.cost[0, 0]),
        )

    monkeypatch.setattr(admission, "best_one", best_one)


def _run(
    policy: str, jobs: int, tmp: pathlib.Path, per_node: str = "4:4:4"
) -> tuple[list[tuple[object, ...]], list[float]]:
    """Every round's plan (time, kind, pods created where, pods deleted why) and each job's
    completion time, on the trace's first ``jobs`` jobs at 8:8:8 with ``per_node`` GPUs per
    node."""
    path = tmp / "head.trace"
    path.write_text("\n".join(TRACE.read_text().splitlines()[:jobs]) + "\n")
    sc = load_scenario(path, cluster="8:8:8", gpus_per_node=per_node)
    tally = Tally(sc.workload, sc.cluster.n_gpus)
    rounds: list[tuple[object, ...]] = []

    def seen(planned: cycle.CyclePlan) -> None:
        real = planned.realisation
        rounds.append(
            (
                planned.now,
                planned.incremental,
                tuple(sorted((c.name, c.node) for c in real.creates)),
                tuple(sorted((d.pod.name, d.reason) for d in real.deletes)),
            )
        )

    config = SimConfig(round_s=360.0, restart_s=10.0, seed=0, semantics="walras")
    walras_mechanics.run(
        sc.workload, sc.cluster, types.SimpleNamespace(name=policy), config, tally, observer=seen
    )
    return rounds, list(tally.completion_s)


@pytest.mark.parametrize("policy", ["max-min-fairness", "hadar", "price-discovery"])
def test_reuse_makes_the_same_rounds_as_rebuilding(
    policy: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    fast = _run(policy, 30, tmp_path)
    with monkeypatch.context() as m:
        _slow(m)
        slow = _run(policy, 30, tmp_path)
    assert len(fast[0]) > 20  # enough rounds to reuse something
    assert fast == slow


def test_psdsf_reusing_its_last_solution_makes_the_same_rounds_as_solving_every_round(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # PS-DSF reads no progress, so its solution is reused while its inputs are unchanged
    # (``SolutionMemo``), and each kind of job's one-node row is computed once per view
    # (``Capacity.gang_nodes``). The oracle solves every round and builds every row. 8-GPU nodes:
    # the trace's 8-GPU gangs fit one node, as PS-DSF needs.
    fast = _run("psdsf", 30, tmp_path, per_node="8:8:8")
    gang_nodes = eligibility.Capacity.gang_nodes

    def fresh_row(capacity: eligibility.Capacity, job: model.JobSpec) -> Any:
        capacity._gang_nodes.clear()
        return gang_nodes(capacity, job)

    with monkeypatch.context() as m:
        _slow(m)
        m.setattr(policy_base.SolutionMemo, "get", lambda self, key, snap: None)
        m.setattr(eligibility.Capacity, "gang_nodes", fresh_row)
        slow = _run("psdsf", 30, tmp_path, per_node="8:8:8")
    assert len(fast[0]) > 20  # enough rounds to reuse something
    assert fast == slow


def _pod(job_name: str, node_name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{job_name}-r1-0",
            "labels": {crd.LABEL_JOB: job_name, crd.LABEL_REPLICA: "0"},
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running"},
    }


def _fresh(store: snapshot.Store, now: float) -> snapshot.Snapshot:
    """The oracle: a freeze that reuses nothing."""
    saved = dict(store._frozen)
    store._frozen.clear()
    try:
        return store.freeze(now)
    finally:
        store._frozen.update(saved)


def test_freeze_sees_every_change_of_an_index() -> None:
    store = helpers.cluster([helpers.job("a", {"v100": 1.0}), helpers.job("b", {"k80": 1.0})])
    first = store.freeze(0.0)
    again = store.freeze(1.0)
    assert again.nodes is first.nodes and again.jobs is first.jobs  # unchanged: reused
    assert snapshot.cluster_view(again) is snapshot.cluster_view(first)
    steps = [
        lambda: store.upsert("pod", _pod("a", "v100-0")),
        lambda: store.upsert("job", helpers.job("c", {"v100": 2.0})),
        lambda: store.upsert("node", helpers.node("v100-2", "v100", 8)),
        lambda: store.delete("job", "ns", "b"),
        # Writes straight into an index (as some tests do) are seen too.
        lambda: store.pods.pop(("ns", "a-r1-0")),
        lambda: store.nodes.__delitem__("v100-2"),
    ]
    for n, step in enumerate(steps, start=2):
        step()
        got, want = store.freeze(float(n)), _fresh(store, float(n))
        assert got == want
        assert _same_view(snapshot.cluster_view(got), snapshot._build_view(want))


def _same_view(a: snapshot.ClusterView, b: snapshot.ClusterView) -> bool:
    return (
        a.gpu_types == b.gpu_types
        and a.nodes == b.nodes
        and all(
            np.array_equal(getattr(a, f), getattr(b, f))
            for f in ("node_type", "node_gpus", "node_foreign", "type_capacity")
        )
        and a.pools == b.pools
    )

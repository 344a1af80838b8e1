"""The walras mechanics' lookups that keep large runs linear agree with the plain scans they
replace, and a run through them gives exactly the results of a run through the scans."""

from __future__ import annotations

import pathlib
import types

import pytest

from walras.sim import engine, walras_mechanics
from walras.sim.cluster import build_cluster
from walras.sim.config import SimConfig
from walras.sim.generate import GenerateOptions, generate_lines
from walras.sim.metrics import SimResult
from walras.sim.scenario import load_scenario
from walras.sim.throughputs import load_throughputs


def _scan(cluster: object, g: int) -> str:
    """The oracle: the node whose GPU ids hold ``g`` (what the mechanics used to search)."""
    for node in cluster.nodes:  # type: ignore[attr-defined]
        if g in node.gpu_ids:
            return str(node.name)
    raise KeyError(g)


@pytest.mark.parametrize(
    ("counts", "per_node"),
    [
        ({"v100": 8, "p100": 12, "k80": 16}, {"v100": 4, "p100": 4, "k80": 8}),
        ({"v100": 8, "p100": 8, "k80": 8}, {"v100": 1, "p100": 2, "k80": 8}),
    ],
)
def test_gpu_nodes_matches_a_scan_of_the_nodes(
    counts: dict[str, int], per_node: dict[str, int]
) -> None:
    cluster = build_cluster(counts, per_node)
    found = walras_mechanics.gpu_nodes(cluster)
    every_gpu = {g for node in cluster.nodes for g in node.gpu_ids}
    assert set(found) == every_gpu
    assert all(found[g] == _scan(cluster, g) for g in every_gpu)


def _run(trace: pathlib.Path) -> SimResult:
    scenario = load_scenario(trace, cluster="8:8:8", gpus_per_node="4:4:8")
    config = SimConfig(semantics="walras", restart_s=10.0)
    policy = types.SimpleNamespace(name="price-discovery")
    return engine.run(scenario.workload, scenario.cluster, policy, config)


def test_run_through_the_lookup_equals_the_run_through_the_scan(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A continuous trace that keeps the 24 GPUs contended, so gangs stop, restart and move.
    lines = generate_lines(GenerateOptions(jobs=40, rate=4.0, seed=3), load_throughputs(None))
    trace = tmp_path / "small.trace"
    trace.write_text("\n".join(lines) + "\n")
    fast = _run(trace)
    monkeypatch.setattr(
        walras_mechanics._Sim, "_node_of_gpu", lambda self, g: _scan(self.cluster, g)
    )
    slow = _run(trace)
    assert fast.tally.restarts == slow.tally.restarts
    assert sum(fast.tally.restarts) > 0  # the case exercises freeing and re-placing gangs
    assert fast.tally.completion_s == slow.tally.completion_s
    assert fast.tally.gpu_busy_s == slow.tally.gpu_busy_s
    assert fast.tally.rounds == slow.tally.rounds
    assert fast.makespan_s == slow.makespan_s

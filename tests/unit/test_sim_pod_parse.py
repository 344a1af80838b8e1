"""The simulator's pods, kept in parsed form, are what the operator's parser reads of them.

The simulator parses the first pod of each job, GPU count and GPU type in full and derives the
others from it (``walras_mechanics._created``), and marks a pod Succeeded by replacing its phase.
The oracle is ``model.parse_pod`` of the API object the pod is (``created_pod`` of its manifest,
with the phase the simulator gave it): every pod the simulator stores in a contended run must be
equal to it, field by field.
"""

from __future__ import annotations

import copy
import pathlib
import types
from typing import Any

import pytest

from walras.core import model, snapshot
from walras.sim import walras_mechanics
from walras.sim.config import SimConfig
from walras.sim.scenario import load_scenario
from walras.sim.tally import Tally

TRACE = pathlib.Path(__file__).parents[1] / "data" / "gavel" / "static_multi_seed0_n100.trace"


@pytest.mark.parametrize("policy", ["max-min-fairness", "price-discovery"])
def test_every_stored_pod_is_the_parse_of_its_api_object(
    policy: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    made: dict[str, dict[str, Any]] = {}  # pod name -> the API object the simulator bound
    created = walras_mechanics._created

    def record(sim: Any, create: Any) -> model.PodInfo:
        made[create.name] = walras_mechanics.created_pod(create.manifest, create.node)
        return created(sim, create)

    checked: list[str] = []
    put = snapshot.Store.put_pod

    def check(store: snapshot.Store, pod: model.PodInfo) -> None:
        api = copy.deepcopy(made[pod.name])
        api["status"] = {"phase": pod.phase}
        assert pod == model.parse_pod(api)
        checked.append(pod.phase)
        put(store, pod)

    monkeypatch.setattr(walras_mechanics, "_created", record)
    monkeypatch.setattr(snapshot.Store, "put_pod", check)
    path = tmp_path / "head.trace"
    path.write_text("\n".join(TRACE.read_text().splitlines()[:30]) + "\n")
    sc = load_scenario(path, cluster="8:8:8", gpus_per_node="4:4:4")
    tally = Tally(sc.workload, sc.cluster.n_gpus)
    config = SimConfig(round_s=360.0, restart_s=10.0, seed=0, semantics="walras")
    walras_mechanics.run(sc.workload, sc.cluster, types.SimpleNamespace(name=policy), config, tally)
    # Contended (24 GPUs, 30 jobs): most pods are derived ones (a job's gang re-made in later
    # rounds; 30 jobs of one GPU per pod on 3 types: at most 90 parsed in full), and every job's
    # last pods succeed.
    assert checked.count("Running") == len(made) > 2 * 90
    assert checked.count("Succeeded") >= 30

"""Guarantees per round: ``plan_round``'s ``first`` pairs, and a tenant that keeps its guarantee
in every round although the realiser's order alone would slice it out (``walras.core.
guarantee_first``)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from walras.allocator import rounds
from walras.allocator.errors import InvalidProblem
from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app


def _plan(first: Any = None) -> rounds.RoundPlan:
    """One group, one node of 2 free GPUs, three 1-GPU jobs at target 2/3 after one round in
    which jobs 0 and 1 ran: Gavel's priorities are 2/3, 2/3 and +inf, so job 2 runs with one
    of 0 and 1 (the package docstring's worked example, round 2)."""
    return rounds.plan_round(
        targets=np.full((3, 1), 2 / 3),
        received=np.array([[1.0], [1.0], [0.0]]),
        elapsed=np.ones(3),
        replicas=[1, 1, 1],
        gpus_per_pod=[1, 1, 1],
        node_group=[0],
        node_free=[2],
        first=first,
    )


def test_first_pairs_go_before_the_priority_order() -> None:
    assert sorted(p.job for p in _plan().placements) == [0, 2]
    # Job 1 first: it runs, and the one GPU left goes to the highest priority (job 2).
    assert sorted(p.job for p in _plan(np.array([[False], [True], [False]])).placements) == [1, 2]
    # Jobs 0 and 1 first: they take both GPUs, job 2's +inf priority waits.
    both = np.array([[True], [True], [False]])
    assert sorted(p.job for p in _plan(both).placements) == [0, 1]


def test_first_must_have_the_shape_of_targets() -> None:
    with pytest.raises(InvalidProblem, match="first"):
        _plan(np.ones((2, 1), dtype=bool))


def test_a_guaranteed_job_keeps_its_gpu_when_targets_change(tmp_path: pathlib.Path) -> None:
    """4 V100s; tenant f runs 8 long 1-GPU jobs from t = 0, tenant g (guaranteed 2 V100s) two
    3000 s jobs arriving at 1000 s and 1500 s. When g's first job finishes, f's targets rise and
    the jobs of f are owed rounds, more than g's remaining job (target 1, run every round): by
    the realiser's order alone g would hold nothing for a round (guarantee_met 11/12 on this
    case). The guarantee pass keeps g's job on its GPU: met in every round with demand."""

    def job(ns: str, name: str, arrival: float, work: float) -> dict[str, Any]:
        return {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "FungibleJob",
            "metadata": {"namespace": ns, "name": name,
                         "annotations": {"walras.dev/arrival-seconds": str(arrival)}},
            "spec": {"replicas": 1, "throughput": {"v100": 1.0}, "totalWork": work,
                     "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        }  # fmt: skip

    docs = [job("f", f"f{i}", 0.0, 20_000.0) for i in range(8)]
    docs += [job("g", "g0", 1000.0, 3000.0), job("g", "g1", 1500.0, 3000.0)]
    tenant = {"apiVersion": "walras.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": "g"},
              "spec": {"quotas": {"v100": {"guaranteed": 2}}}}  # fmt: skip
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "tenants.yaml").write_text(yaml.safe_dump(tenant))
    res = CliRunner().invoke(
        app,
        ["simulate", str(tmp_path / "jobs.yaml"), "--tenants", str(tmp_path / "tenants.yaml"),
         "--policy", "price-discovery", "--cluster", "v100=4", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])["tenants"]
    assert out["g"]["guarantee_met"] == 1.0

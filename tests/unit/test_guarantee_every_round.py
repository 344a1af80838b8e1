"""Guarantees per round: a tenant keeps its guarantee in every round although the realiser's
deficit order alone would slice it out (the realiser's guarantee pass, ``realise._guaranteed``)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import yaml
from typer.testing import CliRunner

from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app


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


def test_a_job_the_policy_serves_on_a_faster_type_is_not_pulled_onto_a_guarantee(
    tmp_path: pathlib.Path,
) -> None:
    """Tenant g is guaranteed 2 K80s; its one 1-GPU job runs 10 steps/s on a V100 and 1 on a
    K80, and the V100s are free, so the policy gives it all its time on a V100. The guarantee
    pass must not pull it onto the K80 it is guaranteed: 36,000 steps take 3,600 s on a V100
    (10 rounds of 360 s) and 36,000 s on a K80, so a JCT below 7,200 s (twice the V100 time:
    room for rounding to whole rounds, never reached if it ran on the K80 for more than a
    tenth of its work) says it ran on the V100."""
    job = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"namespace": "g", "name": "fast"},
        "spec": {"replicas": 1, "throughput": {"v100": 10.0, "k80": 1.0}, "totalWork": 36_000.0,
                 "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }  # fmt: skip
    tenant = {"apiVersion": "walras.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": "g"},
              "spec": {"quotas": {"k80": {"guaranteed": 2}}}}  # fmt: skip
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "tenants.yaml").write_text(yaml.safe_dump(tenant))
    res = CliRunner().invoke(
        app,
        ["simulate", str(tmp_path / "jobs.yaml"), "--tenants", str(tmp_path / "tenants.yaml"),
         "--policy", "price-discovery", "--cluster", "v100=2,k80=2", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["avg_jct_s"] < 7_200, out

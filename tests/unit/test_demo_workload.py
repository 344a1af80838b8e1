"""The demo's workload and report helpers (pure parts; the live demo is tests/e2e/test_demo.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from walras.demo import report, workload

REPO = Path(__file__).resolve().parents[2]


def crd_schema(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "crds" / name).read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def load() -> workload.Workload:
    table, source = workload.load_throughputs()
    return workload.build(30, table, source)


def test_thirty_jobs_over_three_tenants_with_unique_dns_names(load: workload.Workload) -> None:
    assert len(load.jobs) == 30
    per_tenant = {t: sum(j.namespace == t for j in load.jobs) for t in workload.TENANTS}
    assert per_tenant == {"team-a": 10, "team-b": 10, "team-c": 10}
    names = [j.name for j in load.jobs]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) and len(n) <= 63 for n in names)
    assert {t for _, t, _ in load.nodes} == set(workload.GPU_TYPES)


def test_throughputs_are_the_shipped_table(load: workload.Workload) -> None:
    # Independent lookup straight from the shipped JSON (keys like "('A3C', 1)", value "null").
    data = json.loads((REPO / "src/walras/data/gavel/simulation_throughputs.json").read_text())
    for job in load.jobs:
        for gpu_type, value in job.throughput.items():
            raw = data[gpu_type][str((job.job_type, job.replicas))]["null"]
            assert value == pytest.approx(raw, abs=1e-4), (job.name, gpu_type)
    assert any(j.replicas > 1 for j in load.jobs)  # gangs, from the table's scale factors
    assert "Gavel's throughputs" in load.source


def test_build_is_deterministic() -> None:
    table, source = workload.load_throughputs()
    assert workload.build(30, table, source) == workload.build(30, table, source)


def test_manifests_satisfy_the_crd_schemas(load: workload.Workload) -> None:
    # OpenAPI v3.0 schemas use draft 4's boolean exclusiveMinimum.
    job_schema, pool_schema = crd_schema("fungiblejob.yaml"), crd_schema("resourcepool.yaml")
    for job in load.jobs:
        jsonschema.Draft4Validator(job_schema).validate(workload.job_manifest(job))
    for gpu_type in workload.GPU_TYPES:
        jsonschema.Draft4Validator(pool_schema).validate(workload.pool_manifest(gpu_type))


def _job(ns: str, name: str, replicas: int, allocation: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c"}]}}},
        "status": {"phase": "Running" if allocation else "Pending", "allocation": allocation},
    }


def _pool(name: str, capacity: int, price: float, utilisation: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"gpuType": name},
        "status": {"capacity": capacity, "price": price, "utilisation": utilisation, "round": 4},
    }


def test_record_turns_fractions_into_tenant_shares_of_all_gpus() -> None:
    jobs = [
        _job(
            "a",
            "j1",
            2,
            [{"gpuType": "v100", "fraction": 0.5}, {"gpuType": "k80", "fraction": 0.5}],
        ),
        _job("b", "j2", 4, [{"gpuType": "v100", "fraction": 0.25}]),
        _job("b", "j3", 1, []),
    ]
    pools = [_pool("v100", 4, 2.0, 0.5), _pool("k80", 4, 0.0, 0.25)]
    rec = report.record(report.round_of(pools, jobs), jobs, pools)
    # a: 2 pods x 1.0 of the time = 2 GPUs of 8; b: 4 pods x 0.25 = 1 GPU of 8.
    assert rec.tenant_share == {"a": pytest.approx(0.25), "b": pytest.approx(0.125)}
    assert rec.price == {"k80": 0.0, "v100": 2.0}
    assert (rec.round, rec.running, rec.pending) == (4, 2, 1)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    history = [
        report.RoundRecord(r, {"a": 0.1 * r}, {"v100": 1.0 / r}, {"v100": 0.5}, r, 3 - r)
        for r in (1, 2, 3)
    ]
    path = report.plot(history, tmp_path / "sub" / "demo.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000  # three panels with lines, not an empty canvas


@pytest.mark.parametrize(
    ("n_jobs", "n_waves", "rounds"), [(30, 3, 10), (6, 3, 3), (7, 3, 2), (5, 1, 4)]
)
def test_waves_partition_the_jobs_in_order(n_jobs: int, n_waves: int, rounds: int) -> None:
    table, source = workload.load_throughputs()
    jobs = workload.build(n_jobs, table, source).jobs
    arrivals = workload.waves(jobs, n_waves, rounds)
    assert tuple(j for _, batch in arrivals for j in batch) == jobs
    afters = [after for after, _ in arrivals]
    assert afters[0] == 0 and afters == sorted(set(afters)) and afters[-1] < rounds
    sizes = [len(batch) for _, batch in arrivals]
    assert max(sizes) - min(sizes) <= 1


def test_tenant_manifests_satisfy_the_crd_schema() -> None:
    schema = crd_schema("tenant.yaml")
    for tenant in workload.TENANTS:
        doc = workload.tenant_manifest(tenant)
        jsonschema.Draft4Validator(schema).validate(doc)
        assert doc["spec"]["weight"] == workload.TENANT_WEIGHT[tenant]

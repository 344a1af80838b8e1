"""walras.core.model parses FungibleJob and ResourcePool specs through the CRD models, so the
operator refuses what the API server refuses, naming the field the schema names.

Oracle: the generated openAPIV3Schema checked by jsonschema (draft 4, as OpenAPI 3.0), which
shares no code with pydantic or walras.core.model.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from walras.core import model
from walras.core.schema import fungiblejob, openapi_schema, resourcepool
from walras.core.schema.parsing import REASONS, field_path

REPO = Path(__file__).resolve().parents[2]
JOB_SCHEMA = jsonschema.Draft4Validator(openapi_schema(fungiblejob.FungibleJob))
POOL_SCHEMA = jsonschema.Draft4Validator(openapi_schema(resourcepool.ResourcePool))


def _examples(kind: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == kind]
    return out


JOBS = _examples("FungibleJob")
POOLS = _examples("ResourcePool")


def _job(**spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(JOBS[0])
    obj["metadata"].setdefault("namespace", "ns")
    obj["spec"].update(spec)
    return obj


@pytest.mark.parametrize("obj", JOBS, ids=[j["metadata"]["name"] for j in JOBS])
def test_example_jobs_parse(obj: dict[str, Any]) -> None:
    JOB_SCHEMA.validate(obj)
    assert isinstance(model.parse_job(obj), model.JobSpec)


@pytest.mark.parametrize(
    "spec",
    [
        {"replicas": "2"},
        {"replicas": 0},
        {"replicas": 4097},
        {"throughput": {"v100": -1.0}},
        {"throughput": {"v100": 2e12}},
        {"throughput": {f"t{i}": 1.0 for i in range(65)}},  # maxProperties 64 ({} is valid)
        {"utility": {"kind": "cubic"}},
        {"utility": {"weight": 0}},
        {"utility": {"weight": "abc"}},
        {"utility": {"alpha": 0}},
        {"utility": {"target": -1}},
        {"totalWork": 0},
        {"totalWork": 1e19},
        {"backoffLimit": 1001},
        {"forkable": 1},
        {"tenant": ["a"]},
    ],
    ids=lambda s: str(s),
)
def test_parse_job_refuses_what_the_schema_refuses_naming_its_field(spec: dict[str, Any]) -> None:
    obj = _job(**spec)
    errors = list(JOB_SCHEMA.iter_errors(obj))
    assert len(errors) == 1, [e.message for e in errors]
    named = field_path(tuple(errors[0].absolute_path)[1:])
    parsed = model.parse_job(obj)
    assert isinstance(parsed, model.JobDefect), parsed
    assert parsed.field == named
    assert parsed.reason == REASONS[next(iter(spec))]
    assert parsed.key == (obj["metadata"]["namespace"], obj["metadata"]["name"])


def test_a_missing_required_field_is_named() -> None:
    obj = _job()
    del obj["spec"]["replicas"]
    [error] = JOB_SCHEMA.iter_errors(obj)
    assert error.validator == "required" and "'replicas'" in error.message
    parsed = model.parse_job(obj)
    assert isinstance(parsed, model.JobDefect)
    assert (parsed.field, parsed.reason) == ("spec.replicas", "InvalidReplicas")


def test_the_defect_message_quotes_the_value() -> None:
    parsed = model.parse_job(_job(utility={"weight": 1e308}))
    assert isinstance(parsed, model.JobDefect)
    assert "1e+308" in parsed.message and "1000000" in parsed.message


def test_semantic_checks_stay_after_the_schema() -> None:
    """What the schema accepts but makes no sense is still a defect of its own reason."""
    obj = _job(utility={"kind": "alphaFair", "alpha": 1})
    JOB_SCHEMA.validate(obj)
    parsed = model.parse_job(obj)
    assert isinstance(parsed, model.JobDefect)
    assert (parsed.field, parsed.reason) == ("spec.utility.alpha", "InvalidUtility")


@pytest.mark.parametrize("obj", POOLS, ids=[p["metadata"]["name"] for p in POOLS])
def test_example_pools_parse(obj: dict[str, Any]) -> None:
    POOL_SCHEMA.validate(obj)
    pool = model.parse_pool(obj)
    assert pool.gpu_type == obj["spec"]["gpuType"]
    assert pool.capacity_override == obj["spec"].get("capacityOverride")


@pytest.mark.parametrize("override", [-3, "3", 2.5, True])
def test_a_pool_the_schema_refuses_offers_no_gpus(override: object) -> None:
    obj = copy.deepcopy(POOLS[0])
    obj["spec"]["capacityOverride"] = override
    assert not POOL_SCHEMA.is_valid(obj)
    assert model.parse_pool(obj).capacity_override == 0

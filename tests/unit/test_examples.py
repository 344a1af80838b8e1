"""Every Walras object in examples/ satisfies its CRD's schema (the API server applies them in
tests/integration/test_inspect_cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_FILES = {
    "FungibleJob": "fungiblejob.yaml",
    "ResourcePool": "resourcepool.yaml",
    "StatementOfWork": "statementofwork.yaml",
    "Tenant": "tenant.yaml",
}


def walras_objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and str(doc.get("apiVersion", "")).startswith("walras.dev/"):
                found.append((f"{path.name}:{doc['metadata']['name']}", doc))
    return found


def test_examples_cover_every_kind_users_write() -> None:
    kinds = {doc["kind"] for _, doc in walras_objects()}
    assert kinds == set(CRD_FILES)


@pytest.mark.parametrize(("label", "doc"), walras_objects(), ids=lambda v: str(v)[:40])
def test_example_satisfies_its_crd_schema(label: str, doc: dict[str, Any]) -> None:
    crd = yaml.safe_load((REPO / "crds" / CRD_FILES[doc["kind"]]).read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # OpenAPI v3.0 (CRD) schemas use draft 4's boolean exclusiveMinimum.
    jsonschema.Draft4Validator(schema).validate(doc)
    assert doc["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"

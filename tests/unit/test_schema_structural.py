"""The CRDs generated from the pydantic models (walras.core.schema) are structural and current.

Oracles: Kubernetes' rules for structural schemas, restated below from the apiextensions
documentation ("Specifying a structural schema"); the apiextensions.k8s.io/v1 OpenAPI schema of a
CustomResourceDefinition, as shipped by kubernetes-validate (strict: unknown fields rejected);
and crds/*.yaml, which the API server installs in the integration tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import kubernetes_validate
import pytest
import yaml
from pydantic import Field

from walras.core.schema import DESCRIPTORS, build_crd, openapi_schema
from walras.core.schema.kubetypes import Model, OpenModel
from walras.core.schema.structural import NotStructuralError, structural

REPO = Path(__file__).resolve().parents[2]
IDS = [d.kind for d in DESCRIPTORS]
# Keywords a structural schema may not use at all, or not to add types (apiextensions docs).
FORBIDDEN = ("$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "not", "title")
# Kubernetes version whose CRD schema kubernetes-validate checks the documents against.
K8S = "1.30"


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path: properties, additionalProperties and items."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield from nodes(extra, f"{path}[*]")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")


def structural_violations(schema: dict[str, Any]) -> list[str]:
    """Kubernetes' structural rules, each violation as ``path: rule``."""
    out = []
    for path, node in nodes(schema):
        where = path or "<root>"
        for key in FORBIDDEN:
            if key in node:
                out.append(f"{where}: uses {key}")
        exempt = node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        )
        if not node.get("type") and not exempt:
            out.append(f"{where}: no type")
        if "properties" in node and "additionalProperties" in node:
            out.append(f"{where}: properties and additionalProperties")
        if isinstance(node.get("additionalProperties"), bool):
            out.append(f"{where}: additionalProperties is a boolean")
        if node.get("type") == "object" and "items" in node:
            out.append(f"{where}: items on an object")
        if node.get("type") == "array" and "items" not in node:
            out.append(f"{where}: array without items")
        if "default" in node and node["default"] is None:
            out.append(f"{where}: null default")
    meta = schema.get("properties", {}).get("metadata")
    if meta is not None and set(meta) - {"type"}:
        # Only name/generateName restrictions are allowed on metadata; ours sets none.
        out.append(f"metadata: restricted ({sorted(meta)})")
    return out


@pytest.mark.parametrize("desc", DESCRIPTORS, ids=IDS)
def test_generated_schema_is_structural(desc: Any) -> None:
    schema = openapi_schema(desc.model)
    assert schema["type"] == "object"
    assert structural_violations(schema) == []


@pytest.mark.parametrize("desc", DESCRIPTORS, ids=IDS)
def test_generated_crd_is_a_valid_custom_resource_definition(desc: Any) -> None:
    crd = build_crd(desc)
    assert kubernetes_validate.validate(crd, K8S, strict=True) == K8S
    assert crd["metadata"]["name"] == desc.name
    assert crd["spec"]["names"]["kind"] == desc.kind


@pytest.mark.parametrize("desc", DESCRIPTORS, ids=IDS)
def test_crds_on_disk_are_the_generated_ones(desc: Any) -> None:
    """crds/ is current (what `make verify` checks, here in the test suite too)."""
    on_disk = yaml.safe_load((REPO / "crds" / desc.file).read_text())
    assert on_disk == build_crd(desc), "run `make crds` and commit crds/ and the chart's copy"


def test_every_model_crd_is_generated_and_every_file_known() -> None:
    generated = {d.file for d in DESCRIPTORS}
    assert len(generated) == len(DESCRIPTORS)
    # Hand-written CRDs left in crds/ must be listed in hack/gen_crds.py's HAND_WRITTEN.
    gen_source = (REPO / "hack" / "gen_crds.py").read_text()
    for path in sorted((REPO / "crds").glob("*.yaml")):
        assert path.name in generated or f'"{path.name}"' in gen_source, path.name


def test_the_checker_catches_what_kubernetes_refuses() -> None:
    """The structural checker above is not vacuous: each rule fires on its counter-example."""
    bad = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "b": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "c": {"type": "object", "additionalProperties": False},
            "d": {"description": "no type"},
            "e": {"type": "string", "default": None},
        },
    }
    found = structural_violations(bad)
    for expected in (".a: uses $ref", ".b: uses anyOf", ".c: additionalProperties", ".d: no"):
        assert any(v.startswith(expected) for v in found), (expected, found)


# ---- the converter on small models ---------------------------------------------------------------


class _Inner(Model):
    """A docstring, which is not copied into the CRD."""

    size: Annotated[int, Field(ge=1, le=10)]


class _Outer(Model):
    inner: _Inner | None = Field(None, description="the inner object")
    items: list[_Inner] = Field(default_factory=list, max_length=3)
    share: float = Field(0.5, gt=0, le=1)
    mode: Literal["a"] = "a"
    open: _Open | None = None


class _Open(OpenModel):
    known: str | None = None


_Outer.model_rebuild()


def test_converter_inlines_references_and_collapses_optional() -> None:
    schema = structural(_Outer.model_json_schema(by_alias=True))
    inner = schema["properties"]["inner"]
    assert inner == {
        "description": "the inner object",
        "type": "object",
        "required": ["size"],
        "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 10}},
    }
    assert schema["properties"]["items"]["items"] == {
        k: v for k, v in inner.items() if k != "description"
    }
    assert schema["properties"]["items"]["maxItems"] == 3
    assert structural_violations(schema) == []


def test_converter_writes_openapi_3_0_bounds_enums_and_open_objects() -> None:
    schema = structural(_Outer.model_json_schema(by_alias=True))
    # JSON Schema 2020-12's exclusiveMinimum: 0 is OpenAPI 3.0's minimum 0 + exclusiveMinimum.
    share = schema["properties"]["share"]
    assert (share["minimum"], share["exclusiveMinimum"], share["maximum"]) == (0, True, 1)
    assert share["default"] == 0.5
    assert schema["properties"]["mode"]["enum"] == ["a"]
    assert schema["properties"]["open"]["x-kubernetes-preserve-unknown-fields"] is True
    assert "additionalProperties" not in schema["properties"]["open"]


def test_a_union_of_two_types_has_no_structural_form() -> None:
    class Either(Model):
        value: int | str

    with pytest.raises(NotStructuralError, match="value"):
        structural(Either.model_json_schema())

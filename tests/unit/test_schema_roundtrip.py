"""Manifests in examples/, docs/ and README.md validate with both the pydantic models and the
openAPIV3Schema generated from them; invalid ones fail in both, naming the same field.

The openAPI side is checked with jsonschema's draft 4 validator (OpenAPI 3.0 schemas use draft
4's boolean ``exclusiveMinimum``), after one rewrite that states Kubernetes' meaning of
``x-kubernetes-int-or-string`` in plain JSON Schema (an integer, or a string matching the
pattern), which jsonschema does not know. The two validators share no code: agreement between
them is the test.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from walras.core.schema import DESCRIPTORS, openapi_schema

REPO = Path(__file__).resolve().parents[2]
MODELS: dict[str, type[BaseModel]] = {d.kind: d.model for d in DESCRIPTORS}
FENCE = re.compile(r"```ya?ml\n(.*?)```", re.DOTALL)


def _int_or_string(node: Any) -> Any:
    """Kubernetes' int-or-string as JSON Schema: ``anyOf: [integer, string + pattern]``."""
    if isinstance(node, list):
        return [_int_or_string(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _int_or_string(v) for k, v in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        string: dict[str, Any] = {"type": "string"}
        if "pattern" in out:
            string["pattern"] = out.pop("pattern")
        out["anyOf"] = [{"type": "integer"}, string]
    return out


VALIDATORS = {
    d.kind: jsonschema.Draft4Validator(_int_or_string(openapi_schema(d.model))) for d in DESCRIPTORS
}


def documents() -> list[tuple[str, dict[str, Any]]]:
    """Every walras.dev object with a model in examples/*.yaml and the docs' YAML blocks."""
    texts = [(p.name, p.read_text()) for p in sorted((REPO / "examples").glob("*.yaml"))]
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        texts += [(f"{doc.name}#{i}", b) for i, b in enumerate(FENCE.findall(doc.read_text()))]
    found = []
    for where, text in texts:
        for obj in yaml.safe_load_all(text):
            ours = isinstance(obj, dict) and obj.get("kind") in MODELS
            if ours and str(obj.get("apiVersion", "")).startswith("walras.dev/"):
                found.append((f"{where}:{obj['metadata']['name']}", obj))
    return found


DOCS = documents()


def test_the_examples_cover_jobs_pools_and_tenants() -> None:
    assert {obj["kind"] for _, obj in DOCS} >= {"FungibleJob", "ResourcePool", "Tenant"}


@pytest.mark.parametrize(("where", "obj"), DOCS, ids=[w for w, _ in DOCS])
def test_documented_manifests_validate_with_both(where: str, obj: dict[str, Any]) -> None:
    MODELS[obj["kind"]].model_validate(obj)
    VALIDATORS[obj["kind"]].validate(obj)


def pydantic_paths(kind: str, obj: dict[str, Any]) -> set[tuple[Any, ...]]:
    """Where pydantic's errors are; a missing field is named by its object, as jsonschema does."""
    try:
        MODELS[kind].model_validate(obj)
    except ValidationError as exc:
        return {tuple(e["loc"])[: -1 if e["type"] == "missing" else None] for e in exc.errors()}
    return set()


def openapi_paths(kind: str, obj: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {tuple(e.absolute_path) for e in VALIDATORS[kind].iter_errors(obj)}


def _example(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(obj for _, obj in DOCS if obj["kind"] == kind))


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = value

    return edit


def _delete(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        node = obj
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


C0 = ("spec", "template", "spec", "containers", 0)
LIMITS = (*C0, "resources", "limits")
# (kind, edit of a valid example, the one field both validators must name)
INVALID: list[tuple[str, Callable[[dict[str, Any]], None], tuple[Any, ...]]] = [
    ("FungibleJob", _set(("spec", "replicas"), "2"), ("spec", "replicas")),
    ("FungibleJob", _set(("spec", "replicas"), 0), ("spec", "replicas")),
    ("FungibleJob", _set(("spec", "replicas"), 5000), ("spec", "replicas")),
    ("FungibleJob", _delete(("spec", "replicas")), ("spec",)),
    ("FungibleJob", _delete(("spec", "template")), ("spec",)),
    # At most 64 GPU types ({} is valid: nothing declared).
    (
        "FungibleJob",
        _set(("spec", "throughput"), {f"t{i}": 1.0 for i in range(65)}),
        ("spec", "throughput"),
    ),
    ("FungibleJob", _set(("spec", "throughput"), {"v100": -1.0}), ("spec", "throughput", "v100")),
    ("FungibleJob", _set(("spec", "throughput"), {"v100": True}), ("spec", "throughput", "v100")),
    ("FungibleJob", _set(("spec", "utility"), {"kind": "cubic"}), ("spec", "utility", "kind")),
    ("FungibleJob", _set(("spec", "utility"), {"weight": 0}), ("spec", "utility", "weight")),
    ("FungibleJob", _set(("spec", "utility"), {"weight": 2e6}), ("spec", "utility", "weight")),
    ("FungibleJob", _set(("spec", "utility"), {"alpha": 101}), ("spec", "utility", "alpha")),
    ("FungibleJob", _set(("spec", "utility"), "log"), ("spec", "utility")),
    ("FungibleJob", _set(("spec", "totalWork"), 0), ("spec", "totalWork")),
    ("FungibleJob", _set(("spec", "backoffLimit"), -1), ("spec", "backoffLimit")),
    ("FungibleJob", _set(("spec", "forkable"), "yes"), ("spec", "forkable")),
    ("FungibleJob", _set(("spec", "tenant"), 7), ("spec", "tenant")),
    ("FungibleJob", _set(("spec", "template", "spec", "containers"), []), C0[:-1]),
    ("FungibleJob", _set((*C0, "name"), "Train_1"), (*C0, "name")),
    ("FungibleJob", _set((*C0, "image"), ""), (*C0, "image")),
    ("FungibleJob", _delete((*C0, "image")), C0),
    ("FungibleJob", _set(LIMITS, {"cpu": "abc"}), (*LIMITS, "cpu")),
    ("FungibleJob", _set(LIMITS, {"cpu": 1.5}), (*LIMITS, "cpu")),
    ("FungibleJob", _set(LIMITS, {f"r{i}": 1 for i in range(65)}), LIMITS),
    (
        "FungibleJob",
        _set(("spec", "template", "metadata"), {"labels": {"a": "x" * 64}}),
        ("spec", "template", "metadata", "labels", "a"),
    ),
    (
        "FungibleJob",
        _set(("spec", "template", "spec", "tolerations"), [{"operator": "Sometimes"}]),
        ("spec", "template", "spec", "tolerations", 0, "operator"),
    ),
    (
        "FungibleJob",
        _set(("spec", "template", "spec", "restartPolicy"), "Sometimes"),
        ("spec", "template", "spec", "restartPolicy"),
    ),
    ("ResourcePool", _set(("spec", "gpuType"), ""), ("spec", "gpuType")),
    ("ResourcePool", _set(("spec", "gpuType"), "-v100"), ("spec", "gpuType")),
    ("ResourcePool", _delete(("spec", "gpuType")), ("spec",)),
    ("ResourcePool", _set(("spec", "capacityOverride"), -3), ("spec", "capacityOverride")),
    ("ResourcePool", _set(("spec", "capacityOverride"), "3"), ("spec", "capacityOverride")),
    ("ResourcePool", _set(("spec", "nodeSelector"), {"a": 1}), ("spec", "nodeSelector", "a")),
    ("Tenant", _set(("spec", "weight"), 0), ("spec", "weight")),
    ("Tenant", _set(("spec", "namespaces"), [""]), ("spec", "namespaces", 0)),
    (
        "Tenant",
        _set(("spec", "quotas"), {"v100": {"maximum": -1}}),
        ("spec", "quotas", "v100", "maximum"),
    ),
    (
        "NodeAllocation",
        _set(("status",), {"tasks": {"team": -1.0}}),
        ("status", "tasks", "team"),
    ),
]


@pytest.mark.parametrize(
    ("kind", "edit", "field"),
    INVALID,
    ids=[f"{k}-{'.'.join(map(str, f))}-{i}" for i, (k, _, f) in enumerate(INVALID)],
)
def test_invalid_manifests_fail_in_both_naming_the_same_field(
    kind: str, edit: Callable[[dict[str, Any]], None], field: tuple[Any, ...]
) -> None:
    if kind == "NodeAllocation":
        obj: dict[str, Any] = {"apiVersion": "walras.dev/v1alpha1", "kind": kind, "spec": {}}
    else:
        obj = _example(kind)
    assert pydantic_paths(kind, obj) == set() == openapi_paths(kind, obj)
    edit(obj)
    assert openapi_paths(kind, obj) == {field}
    assert pydantic_paths(kind, obj) == {field}

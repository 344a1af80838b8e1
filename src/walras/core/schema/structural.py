"""Pydantic's JSON schema -> a *structural* Kubernetes ``openAPIV3Schema``.

Kubernetes accepts a CRD schema only when it is structural (apiextensions' "Specifying a
structural schema"): every node says its ``type`` (or is ``x-kubernetes-int-or-string`` /
``x-kubernetes-preserve-unknown-fields``), there is no ``$ref``, ``definitions``/``$defs``,
``anyOf``/``oneOf``/``allOf`` that adds types, and ``additionalProperties`` is never combined
with ``properties`` nor ``false``. Pydantic (JSON Schema 2020-12) writes all of these, so
:func:`structural` rewrites its output node by node:

============================  ===========================================================
pydantic writes               Kubernetes gets
============================  ===========================================================
``{"$ref": "#/$defs/M"}``     the definition of M, inlined (the referring node's own keys win)
``anyOf: [X, {type: null}]``  X: an ``Optional`` field. The API server drops a ``null`` of a
                              field that is not ``nullable``, which is what ``None`` means
``exclusiveMinimum: 0``       ``minimum: 0, exclusiveMinimum: true`` (OpenAPI 3.0, draft 4)
``additionalProperties: true``  ``x-kubernetes-preserve-unknown-fields: true``
``const: v``                  ``enum: [v]``
``title``, ``default: null``  dropped (no title in CRDs; a null default defaults nothing)
``1000000.0``                 ``1000000`` (integral floats in bounds and defaults)
============================  ===========================================================

A model's docstring (pydantic's ``description`` of a definition, or of the root) is for Python
readers and is dropped; a schema description comes from ``Field(description=...)`` of the field
that uses the model. Anything else a CRD needs (``format: int32``, ``x-kubernetes-validations``,
``x-kubernetes-list-type``, ``x-kubernetes-int-or-string``) is written by the model itself
through ``json_schema_extra`` / ``WithJsonSchema`` and passes through unchanged. Example::

    >>> structural({"properties": {"w": {"anyOf": [{"type": "number", "exclusiveMinimum": 0},
    ...     {"type": "null"}], "default": None, "title": "W"}}, "type": "object", "title": "M"})
    {'type': 'object', 'properties': {'w': {'type': 'number', 'minimum': 0, \
'exclusiveMinimum': True}}}

A union of two real types (``int | str``) has no structural form: :class:`NotStructuralError`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# Keys printed first, in this order, so that the generated YAML reads like a hand-written CRD.
_ORDER = (
    "description",
    "type",
    "format",
    "x-kubernetes-int-or-string",
    "enum",
    "default",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "properties",
    "additionalProperties",
    "items",
)
_NUMERIC = ("minimum", "maximum", "default")
_DROPPED = ("title", "$defs", "definitions", "$schema")


class NotStructuralError(ValueError):
    """The pydantic schema has a construct without a structural Kubernetes equivalent."""


def structural(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of a model's ``model_json_schema()`` (see module doc)."""
    defs: Mapping[str, Any] = schema.get("$defs", {})
    root = {k: v for k, v in schema.items() if k != "description"}  # the root's docstring
    return _node(root, defs, "")


def _node(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ref = node.get("$ref")
    all_of = node.get("allOf")
    if ref is None and isinstance(all_of, list) and len(all_of) == 1:
        ref = all_of[0].get("$ref")  # pydantic's older spelling of a described reference
    if ref is not None:
        name = str(ref).rsplit("/", 1)[-1]
        if name not in defs:
            raise NotStructuralError(f"{path or '<root>'}: unknown reference {ref}")
        body = {k: v for k, v in defs[name].items() if k != "description"}  # the docstring
        out.update(_node(body, defs, path))
    any_of = node.get("anyOf")
    if any_of is not None:
        branches = [b for b in any_of if b.get("type") != "null"]
        if len(branches) != 1:
            raise NotStructuralError(
                f"{path or '<root>'}: a union of {len(branches)} types has no structural form; "
                "give the field one type (or an int-or-string WithJsonSchema)"
            )
        out.update(_node(branches[0], defs, path))
    for key, value in node.items():
        if key in _DROPPED or key in ("$ref", "allOf", "anyOf"):
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {name: _node(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = _node(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is False:
                # Structural schemas forbid it; the API server prunes unknown fields anyway.
                continue
            else:
                out[key] = _node(value, defs, f"{path}[*]")
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out[key.replace("exclusiveM", "m")] = _integral(value)
            out[key] = True
        elif key == "x-kubernetes-validations":
            # Pydantic sorts keys; a CEL rule reads best with its rule before its message.
            out[key] = [{"rule": r["rule"], **copy.deepcopy(r)} for r in value]
        elif key == "const":
            out["enum"] = [value]
        elif key in _NUMERIC:
            out[key] = _integral(value)
        else:
            out[key] = copy.deepcopy(value)  # no object shared between two places of the tree
    if "properties" in out and "additionalProperties" in out:
        raise NotStructuralError(f"{path or '<root>'}: properties and additionalProperties")
    return _ordered(out)


def _integral(value: Any) -> Any:
    """``1e6`` as ``1000000``: YAML then reads like the bound a person would write."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {key: i for i, key in enumerate(_ORDER)}
    return dict(sorted(node.items(), key=lambda kv: (rank.get(kv[0], len(_ORDER)), kv[0])))

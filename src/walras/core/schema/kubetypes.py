"""Pydantic building blocks shared by the Walras CRD models, each with its Kubernetes schema.

``Model`` is the base of every CRD model: validation is *strict* as the API server's is (``"2"``
is no integer, ``true`` no number, ``2.0`` no integer), NaN and infinities are refused (JSON
has none), fields unknown to the model are ignored (the API server prunes them), and Python's
``snake_case`` attribute names are the API's ``camelCase`` (``backoff_limit`` <-> ``backoffLimit``;
only the camelCase spelling validates, as only it survives pruning).

``Quantity`` is Kubernetes' int-or-string resource quantity (``4``, ``"500m"``, ``"16Gi"``):
``x-kubernetes-int-or-string`` plus the quantity grammar for strings, as the pattern in the CRD.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """Base of every CRD model (see the module docstring for the validation rules)."""

    model_config = ConfigDict(
        strict=True,
        extra="ignore",
        allow_inf_nan=False,
        alias_generator=to_camel,
        frozen=True,
    )


class OpenModel(Model):
    """A model that keeps fields it does not know (``x-kubernetes-preserve-unknown-fields``)."""

    model_config = ConfigDict(extra="allow")


Int32 = Annotated[int, Field(json_schema_extra={"format": "int32"})]
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]

# A map the API server keeps as is (``{type: object}``): metadata is validated by the server.
ObjectMeta = Annotated[dict[str, Any], WithJsonSchema({"type": "object"})]
# Arbitrary JSON under an object (``x-kubernetes-preserve-unknown-fields``), e.g. pod affinity.
OpenObject = dict[str, Any]

QUANTITY_PATTERN = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)


def _quantity(value: object) -> int | str:
    # OpenAPI's pattern constrains strings only; an integer passes as it is (as in Kubernetes).
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be an integer or a quantity string, got {type(value).__name__}")
    if isinstance(value, str) and _QUANTITY.match(value) is None:
        raise ValueError(f"{value[:40]!r} is not a quantity (e.g. 4, 500m, 16Gi)")
    return value


Quantity = Annotated[
    int | str,
    PlainValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _date_time(value: str) -> str:
    # format: date-time, which the API server checks (RFC 3339).
    dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


DateTime = Annotated[
    str, AfterValidator(_date_time), WithJsonSchema({"type": "string", "format": "date-time"})
]


def unique(items: list[str]) -> list[str]:
    """``x-kubernetes-list-type: set`` for pydantic: the API server rejects a repeated entry."""
    if len(set(items)) != len(items):
        raise ValueError("entries must be unique (a set)")
    return items


class Condition(Model):
    """One entry of ``status.conditions`` (metav1.Condition's fields)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: DateTime | None = None
    observed_generation: Int64 | None = None


Conditions = Annotated[
    list[Condition],
    Field(
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
    ),
]

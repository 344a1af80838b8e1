"""A policy's own arguments: a frozen dataclass that decodes itself from text or values.

Like a kube-scheduler plugin's typed args (``New(args, handle)``), each policy declares the knobs
it takes as one frozen dataclass deriving from :class:`PolicyArgs`, with every default written
once, on its field. The shells never name a field: ``walras operator --policy-arg
psdsf.mode=rdm``, ``walras simulate --policy-arg …`` and the chart's ``policyArgs`` map hand the
registry text (or YAML values), and :meth:`PolicyArgs.decode` turns it into the dataclass.

Field types a policy may use: ``bool``, ``int``, ``float``, ``str`` and ``Literal[...]`` of
strings (the allowed values). A policy adds range checks of its own in ``__post_init__`` by
raising :class:`PolicyArgError` (its message names the field); bounds that JSON Schema can say
(``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``) go in the field's
``metadata`` instead, where :meth:`PolicyArgs.decode` enforces them and the schema carries them,
and so does a one-line ``description``. :meth:`PolicyArgs.json_schema`
writes the same fields as JSON Schema; the chart's ``values.schema.json`` holds that schema for
every registered policy (a unit test keeps the two equal).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

A = TypeVar("A", bound="PolicyArgs")


class PolicyArgError(ValueError):
    """An argument a policy does not take, or a value it cannot use (the message names it)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyArgs:
    """Base of every policy's arguments; a policy with no knobs uses it as is."""

    _TRUE: ClassVar[frozenset[str]] = frozenset({"1", "true", "yes", "on"})
    _FALSE: ClassVar[frozenset[str]] = frozenset({"0", "false", "no", "off"})

    @classmethod
    def decode(cls: type[A], values: Mapping[str, object], *, prefix: str = "") -> A:
        """The arguments from ``values`` (field → text or value); absent fields keep defaults.

        ``prefix`` (the policy's name) qualifies field names in error messages, e.g.
        ``psdsf.mode: 'both' is not one of tdm, rdm``.
        """
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        label = f"{prefix}." if prefix else ""
        unknown = sorted(set(values) - set(fields))
        if unknown:
            takes = ", ".join(fields) if fields else "no arguments"
            raise PolicyArgError(
                f"{label}{unknown[0]}: unknown argument ({prefix or 'this policy'} takes {takes})"
            )
        decoded = {}
        for name, value in values.items():
            decoded[name] = _convert(hints[name], value, f"{label}{name}")
            _check_bounds(fields[name].metadata, decoded[name], f"{label}{name}")
        return cls(**decoded)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The fields as a JSON Schema object (types, allowed values, defaults)."""
        hints = typing.get_type_hints(cls)
        props: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            bounds = {k: v for k, v in f.metadata.items() if k in _BOUNDS or k == "description"}
            props[f.name] = {**_schema_type(hints[f.name]), **bounds, "default": f.default}
        return {"type": "object", "additionalProperties": False, "properties": props}

    def encode(self) -> dict[str, str]:
        """Each field as the text :meth:`decode` reads back (for flags and docs)."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


_BOUNDS: dict[str, tuple[str, typing.Callable[[float, float], bool]]] = {
    "minimum": (">=", lambda x, b: x >= b),
    "maximum": ("<=", lambda x, b: x <= b),
    "exclusiveMinimum": (">", lambda x, b: x > b),
    "exclusiveMaximum": ("<", lambda x, b: x < b),
}


def _check_bounds(metadata: Mapping[str, object], value: object, label: str) -> None:
    for key, (sign, holds) in _BOUNDS.items():
        bound = metadata.get(key)
        numbers = isinstance(bound, int | float) and isinstance(value, int | float)
        if numbers and not holds(float(value), float(bound)):  # type: ignore[arg-type]
            raise PolicyArgError(f"{label}: must be {sign} {bound}, got {value}")


def _choices(hint: object) -> tuple[str, ...] | None:
    if typing.get_origin(hint) is Literal:
        return tuple(str(v) for v in typing.get_args(hint))
    return None


def _schema_type(hint: object) -> dict[str, Any]:
    choices = _choices(hint)
    if choices is not None:
        return {"type": "string", "enum": list(choices)}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    raise TypeError(f"policy argument type {hint!r} is not bool, int, float, str or Literal")


def _convert(hint: object, value: object, label: str) -> object:
    """``value`` (text from a flag, or a value from YAML or Python) as a ``hint``."""
    choices = _choices(hint)
    if choices is not None:
        if not isinstance(value, str) or value not in choices:
            raise PolicyArgError(f"{label}: {value!r} is not one of {', '.join(choices)}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in PolicyArgs._TRUE:
            return True
        if text in PolicyArgs._FALSE:
            return False
        raise PolicyArgError(f"{label}: {value!r} is not a boolean (true or false)")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise PolicyArgError(f"{label}: {value!r} is not an integer")
        try:
            return int(value)
        except ValueError:
            raise PolicyArgError(f"{label}: {value!r} is not an integer") from None
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise PolicyArgError(f"{label}: {value!r} is not a number")
        try:
            number = float(value)
        except ValueError:
            raise PolicyArgError(f"{label}: {value!r} is not a number") from None
        if math.isnan(number):
            raise PolicyArgError(f"{label}: NaN is not a value it takes")
        return number
    if hint is str:
        return str(value)
    raise TypeError(f"{label}: policy argument type {hint!r} is not supported")

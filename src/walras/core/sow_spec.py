"""A StatementOfWork's ``spec`` → the mechanism's SoW: one conversion for operator and simulator.

:func:`statement` validates the spec with the CRD's own model
(:class:`walras.core.schema.statementofwork.StatementOfWorkSpec`, whose schema the API server
enforces), refuses fields the CRD does not have (``kubectl`` refuses them too, with its default
strict field validation), converts it to :class:`walras.allocator.sow.StatementOfWork` and checks
it there (:func:`walras.allocator.sow.validate`). Every refusal is a :class:`SowError` naming the
field by its spec path. ``walras.core.sow_shell`` (the operator) and ``walras.sim.sow``
(``walras simulate --policy sow``) both call it, so a manifest simulates as it will be admitted.

Conversion, field by field: ``throughput`` {type: speed} → one :class:`TypeDemand` per type
(sorted by name) with ``concurrencyPerType[type]`` or else ``concurrency`` GPUs; ``value``
``{deadline, amount}`` → a step, ``{points: [{after, amount}]}`` → piecewise linear;
``distribution`` → (arrival, duration, probability) support points;
``recurrence`` ``{count, period}`` (absent: one instance); ``durationRevealed``.

Example: ``{concurrency: 2, throughput: {v100: 2.0, k80: 1}, value: {deadline: 6, amount: 20},
distribution: [{arrival: 0, duration: 4, probability: 1}], template: ...}`` is
``StatementOfWork(key, birth, (TypeDemand("k80", 2, 1.0), TypeDemand("v100", 2, 2.0)),
ValueFunction.deadline(6, 20), Distribution.of([(0, 4, 1.0)]), Recurrence(1, 0), False)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow import (
    Distribution,
    Recurrence,
    StatementOfWork,
    TypeDemand,
    ValueFunction,
    validate,
)
from walras.core.schema import parsing
from walras.core.schema import statementofwork as schema

# Mechanism field (walras.allocator.sow) -> the SoW's spec path.
_FIELDS = {
    "name": "metadata.name",
    "birth": "status.birth",
    "concurrency": "spec.concurrency",
    "throughput": "spec.throughput",
    "demands.gpu_type": "spec.throughput",
    "value_function": "spec.value",
    "distribution": "spec.distribution",
    "distribution.arrivals": "spec.distribution",
    "distribution.durations": "spec.distribution",
    "distribution.probabilities": "spec.distribution",
    "recurrence.instances": "spec.recurrence.count",
    "recurrence.period": "spec.recurrence.period",
}


class SowError(Exception):
    """A SoW that cannot be admitted: ``field`` is its spec path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def spec_field(problem: InvalidProblem) -> str:
    """The spec path of a mechanism error's field."""
    return _FIELDS.get(problem.field or "", f"spec.{problem.field}" if problem.field else "spec")


def checked_spec(spec: object) -> schema.StatementOfWorkSpec:
    """``spec`` validated by the CRD's model; raises :class:`SowError` naming the field."""
    if not isinstance(spec, Mapping):
        raise SowError("spec", f"expected a mapping, got {spec!r}")
    _refuse_unknown(spec)
    try:
        return schema.StatementOfWorkSpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise _first(exc) from None


def statement(key: str, birth: int, spec: object) -> StatementOfWork:
    """The mechanism's SoW ``key`` born at ``birth`` (module docstring); raises
    :class:`SowError` naming the field."""
    checked = checked_spec(spec)
    per_type = checked.concurrency_per_type or {}
    demands = tuple(
        TypeDemand(g, per_type.get(g, checked.concurrency), float(speed))
        for g, speed in sorted(checked.throughput.items())
    )
    value_spec = checked.value
    if value_spec.points is not None:
        # The model has checked the points are in order of ``after`` (the CRD's isSorted rule).
        value = ValueFunction.linear([(float(p.after), float(p.amount)) for p in value_spec.points])
    else:
        # The model's rule: no points means a deadline with an amount.
        assert value_spec.deadline is not None and value_spec.amount is not None
        value = ValueFunction.deadline(float(value_spec.deadline), float(value_spec.amount))
    dist = Distribution.of(
        [(p.arrival, p.duration, float(p.probability)) for p in checked.distribution]
    )
    rec = checked.recurrence
    recurrence = Recurrence(rec.count, rec.period) if rec is not None else Recurrence(1, 0)
    sow = StatementOfWork(key, birth, demands, value, dist, recurrence, checked.duration_revealed)
    try:
        validate(sow)
    except InvalidProblem as exc:
        raise SowError(spec_field(exc), str(exc)) from None
    return sow


def _first(exc: ValidationError) -> SowError:
    """The first error as (spec path, message); a rule's message naming its own path keeps it."""
    err = exc.errors(include_url=False)[0]
    field = parsing.field_path(tuple(err["loc"]))
    message = str(err["msg"]).removeprefix("Value error, ")
    if message.startswith("spec") and ": " in message:
        field, message = message.split(": ", 1)
    elif err["type"] != "missing":
        shown = repr(err.get("input"))
        message += f", got {shown if len(shown) <= 60 else shown[:57] + '...'}"
    return SowError(field, message)


def _names(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def _refuse_unknown(spec: Mapping[str, Any]) -> None:
    """Fields the CRD lacks (the template is a PodTemplateSpec, open to the Pod API's fields)."""
    _unknown(spec, schema.StatementOfWorkSpec, "spec")
    value = spec.get("value")
    if isinstance(value, Mapping):
        _unknown(value, schema.Value, "spec.value")
        points = value.get("points")
        for i, p in enumerate(points if isinstance(points, list) else []):
            if isinstance(p, Mapping):
                _unknown(p, schema.ValuePoint, f"spec.value.points[{i}]")
    dist = spec.get("distribution")
    for i, p in enumerate(dist if isinstance(dist, list) else []):
        if isinstance(p, Mapping):
            _unknown(p, schema.SupportPoint, f"spec.distribution[{i}]")
    rec = spec.get("recurrence")
    if isinstance(rec, Mapping):
        _unknown(rec, schema.Recurrence, "spec.recurrence")


def _unknown(doc: Mapping[str, Any], model: type[BaseModel], where: str) -> None:
    extra = sorted(str(k) for k in doc if k not in _names(model))
    if extra:
        known = ", ".join(sorted(_names(model)))
        raise SowError(f"{where}.{extra[0]}", f"unknown field (known: {known})")

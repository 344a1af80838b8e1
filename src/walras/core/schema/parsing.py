"""Specs parsed through the CRD models, a pydantic ``ValidationError`` turned into one named field.

``walras.core.model`` calls these before its semantic checks, so an object the API server would
reject (``replicas: "2"``, a weight of 0, ``totalWork: -1``) is refused by the operator for the
same reason, naming the same field. :class:`SpecError` carries the first error: the field path
in the object (``spec.utility.weight``, ``spec.throughput.v100``, list items as ``[i]``), the
condition reason of the top-level spec field (``InvalidUtility``, see :data:`REASONS`), and
pydantic's message with the offending value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from walras.core.schema.fungiblejob import TEMPLATE_CHECKED, FungibleJobSpec
from walras.core.schema.resourcepool import ResourcePoolSpec

# Condition reason of an error under each top-level FungibleJob spec field (the reasons
# walras.core.model used before the models existed); anything else is InvalidSpec.
REASONS: Mapping[str, str] = {
    "replicas": "InvalidReplicas",
    "template": "InvalidTemplate",
    "throughput": "InvalidThroughput",
    "utility": "InvalidUtility",
    "tenant": "InvalidTenant",
    "backoffLimit": "InvalidBackoffLimit",
    "forkable": "InvalidForkable",
    "totalWork": "InvalidTotalWork",
}


@dataclass(frozen=True, slots=True)
class SpecError(Exception):
    """The first thing in a spec that its CRD schema refuses."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def field_path(loc: tuple[int | str, ...], root: str = "spec") -> str:
    """``("utility", "weight")`` -> ``spec.utility.weight``; ``("c", 0)`` -> ``spec.c[0]``."""
    return root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def _first(exc: ValidationError, root: str = "spec") -> SpecError:
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    message = str(err["msg"])
    if err["type"] != "missing":
        shown = repr(err.get("input"))
        message += f", got {shown if len(shown) <= 60 else shown[:57] + '...'}"
    top = str(loc[0]) if loc else ""
    return SpecError(field_path(loc, root), REASONS.get(top, "InvalidSpec"), message)


def job_spec(spec: object, *, template_checked: bool = False) -> FungibleJobSpec:
    """A FungibleJob's ``spec`` validated by its model; raises :class:`SpecError`.

    ``template_checked``: the caller has checked ``spec.template`` with
    ``walras.core.podtemplate`` (Kubernetes' Pod validation, which names its own reasons), so
    the model keeps the template as given.
    """
    try:
        return FungibleJobSpec.model_validate(
            spec, context={TEMPLATE_CHECKED: True} if template_checked else None
        )
    except ValidationError as exc:
        raise _first(exc) from None


def pool_spec(spec: object) -> ResourcePoolSpec:
    """A ResourcePool's ``spec`` validated by its model; raises :class:`SpecError`."""
    try:
        return ResourcePoolSpec.model_validate(spec)
    except ValidationError as exc:
        raise _first(exc) from None

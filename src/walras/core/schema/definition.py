"""A CustomResourceDefinition built from a pydantic model and the metadata beside it.

:class:`CrdDescriptor` holds what a CRD says besides its schema (names, scope, printer columns,
the status subresource, the header comment of its YAML file); :func:`build_crd` puts it together
with the structural schema of the model (``walras.core.schema.structural``). One served and
stored version, ``walras.dev/v1alpha1`` (``walras.core.crd``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from walras.core import crd
from walras.core.schema.structural import structural


@dataclass(frozen=True, slots=True)
class Column:
    """One ``additionalPrinterColumns`` entry (``kubectl get`` shows it)."""

    name: str
    type: str
    json_path: str
    # 0: always shown; 1: only with ``kubectl get -o wide`` (keeps the default view in 80 columns).
    priority: int = 0


AGE = Column("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True, slots=True)
class CrdDescriptor:
    """Everything in a CRD but its ``openAPIV3Schema``, which ``model`` gives."""

    model: type[BaseModel]
    kind: str
    plural: str
    scope: str  # Namespaced | Cluster
    file: str  # under crds/
    comment: str  # the YAML file's header, one line per entry
    columns: tuple[Column, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = True

    @property
    def name(self) -> str:
        return f"{self.plural}.{crd.GROUP}"


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of ``model`` (validation mode, API field names)."""
    return structural(model.model_json_schema(by_alias=True, mode="validation"))


def build_crd(desc: CrdDescriptor) -> dict[str, Any]:
    """The CustomResourceDefinition object of ``desc`` (``apiextensions.k8s.io/v1``)."""
    names: dict[str, Any] = {
        "kind": desc.kind,
        "listKind": f"{desc.kind}List",
        "plural": desc.plural,
        "singular": desc.kind.lower(),
    }
    if desc.short_names:
        names["shortNames"] = list(desc.short_names)
    if desc.categories:
        names["categories"] = list(desc.categories)
    version: dict[str, Any] = {"name": crd.VERSION, "served": True, "storage": True}
    if desc.status_subresource:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [
        {"name": c.name, "type": c.type, "jsonPath": c.json_path}
        | ({"priority": c.priority} if c.priority else {})
        for c in desc.columns
    ]
    version["schema"] = {"openAPIV3Schema": openapi_schema(desc.model)}
    spec: Mapping[str, Any] = {
        "group": crd.GROUP,
        "scope": desc.scope,
        "names": names,
        "versions": [version],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": desc.name},
        "spec": dict(spec),
    }

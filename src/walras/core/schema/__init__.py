"""The Walras CRDs as pydantic models: the one source of their ``openAPIV3Schema``.

Each CRD has a module with its models and a :class:`~walras.core.schema.definition.CrdDescriptor`
(names, scope, printer columns, the YAML header); ``hack/gen_crds.py`` (``make crds``) writes
``crds/*.yaml`` from :data:`DESCRIPTORS`, converting pydantic's JSON schema to a structural
Kubernetes schema (``walras.core.schema.structural``). ``walras.core.model`` parses FungibleJob and
ResourcePool objects through the same models, so the operator and the API server agree on what
is valid.

To add a field: add it to the model (``Field(description=...)``, bounds as ``ge``/``le``), run
``make crds``, commit the model and ``crds/`` + ``charts/walras/crds/`` together. To add a CRD:
a new module here with its models and a ``DESCRIPTOR``, listed in :data:`DESCRIPTORS`.
"""

from __future__ import annotations

from walras.core.schema import fungiblejob, nodeallocation, resourcepool, statementofwork, tenant
from walras.core.schema.definition import CrdDescriptor, build_crd, openapi_schema

DESCRIPTORS: tuple[CrdDescriptor, ...] = (
    fungiblejob.DESCRIPTOR,
    resourcepool.DESCRIPTOR,
    nodeallocation.DESCRIPTOR,
    tenant.DESCRIPTOR,
    statementofwork.DESCRIPTOR,
)

__all__ = ["DESCRIPTORS", "CrdDescriptor", "build_crd", "openapi_schema"]

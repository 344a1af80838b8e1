"""The tenant hierarchy, checked: which Tenants keep their parent and quotas, and why not.

``Tenant.spec.parent`` names another Tenant (organisation → team → ...). Quotas cover the
tenant's subtree, and a child's guarantee comes out of its parent's
(``walras.allocator.quotas``). A Tenant breaking one of these rules keeps scheduling, as a flat
tenant (no parent, no quotas; its weight and namespaces stay), with a problem naming the field:

- ``spec.parent`` names no Tenant (``ParentNotFound``), or following parents comes back to the
  tenant (``ParentCycle``, on every tenant of the cycle);
- ``spec.quotas.<type>.guaranteed``: the children's guarantees of a type add up to more than
  their parent's (``GuaranteeExceedsParent``; a parent without a guarantee of that type has none
  to give), or the roots' guarantees to more than the GPUs of that type in the pools
  (``GuaranteeExceedsCapacity``). Siblings are admitted in name order; the first that does not
  fit, and every later one that does not fit what is left, falls back.

Checked top-down, so a child of a tenant that fell back is checked against that flat parent
(which guarantees nothing: a child's guarantee then falls back too, its parent link stays).
Pure: parsed Tenants in, effective Tenants and problems out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from walras.core.governance import TenantSpec

PARENT_NOT_FOUND = "ParentNotFound"
PARENT_CYCLE = "ParentCycle"
EXCEEDS_PARENT = "GuaranteeExceedsParent"
EXCEEDS_CAPACITY = "GuaranteeExceedsCapacity"


@dataclass(frozen=True, slots=True)
class TenantProblem:
    """Why a Tenant falls back to a flat tenant without quotas (a condition on it)."""

    field: str
    reason: str
    message: str


def _guaranteed(spec: TenantSpec, gpu_type: str) -> float:
    q = spec.quotas.get(gpu_type)
    return float(q.guaranteed or 0.0) if q is not None else 0.0


def _flat(spec: TenantSpec) -> TenantSpec:
    return dataclasses.replace(spec, parent=None, quotas={})


def _cycles(tenants: Mapping[str, TenantSpec]) -> set[str]:
    """Tenants on a cycle of parents."""
    on_cycle: set[str] = set()
    for start in tenants:
        path: list[str] = []
        v: str | None = start
        while v is not None and v in tenants and v not in path:
            path.append(v)
            v = tenants[v].parent
        if v is not None and v in path:
            on_cycle.update(path[path.index(v) :])
    return on_cycle


def validate(
    tenants: Mapping[str, TenantSpec], capacity: Mapping[str, float]
) -> tuple[dict[str, TenantSpec], dict[str, TenantProblem]]:
    """``(effective tenants, problem per fallen-back tenant)`` (module docstring).

    ``capacity``: GPUs per GPU type in the pools (allocatable, ready or not: a node that is
    briefly down does not revoke guarantees; ``walras.allocator.quotas`` scales them down while
    it is gone).
    """
    out = dict(tenants)
    problems: dict[str, TenantProblem] = {}

    def fall_back(name: str, problem: TenantProblem) -> None:
        problems.setdefault(name, problem)
        out[name] = _flat(out[name])

    for name in sorted(tenants):
        parent = tenants[name].parent
        if parent is not None and parent not in tenants:
            fall_back(
                name,
                TenantProblem(
                    "spec.parent", PARENT_NOT_FOUND, f"spec.parent: no Tenant named {parent!r}"
                ),
            )
    for name in sorted(_cycles(out)):
        fall_back(
            name,
            TenantProblem(
                "spec.parent",
                PARENT_CYCLE,
                f"spec.parent: following parents from {name!r} comes back to it",
            ),
        )
    # Top-down by depth (the tree is acyclic now), siblings by name.
    depth: dict[str, int] = {}

    def depth_of(v: str) -> int:
        if v not in depth:
            p = out[v].parent
            depth[v] = 0 if p is None else depth_of(p) + 1
        return depth[v]

    for name in sorted(out, key=lambda v: (depth_of(v), v)):
        spec = out[name]
        for gpu_type, q in sorted(spec.quotas.items()):
            if not q.guaranteed:
                continue
            if spec.parent is None:
                given = sum(
                    _guaranteed(out[v], gpu_type)
                    for v in sorted(out)
                    if v < name and out[v].parent is None
                )
                limit, what = capacity.get(gpu_type, 0.0), f"the {gpu_type} GPUs in the pools"
                reason = EXCEEDS_CAPACITY
            else:
                siblings = [v for v in sorted(out) if v < name and out[v].parent == spec.parent]
                given = sum(_guaranteed(out[v], gpu_type) for v in siblings)
                limit = _guaranteed(out[spec.parent], gpu_type)
                what = f"parent {spec.parent!r}'s guarantee"
                reason = EXCEEDS_PARENT
            if given + q.guaranteed > limit:
                fall_back(
                    name,
                    TenantProblem(
                        f"spec.quotas.{gpu_type}.guaranteed",
                        reason,
                        f"spec.quotas.{gpu_type}.guaranteed: {q.guaranteed:g} (with "
                        f"{given:g} already guaranteed before it) exceeds {what} ({limit:g}); "
                        "the tenant is scheduled as a flat tenant without quotas",
                    ),
                )
                break
    return out, problems

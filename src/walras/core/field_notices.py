"""Fields a FungibleJob sets that are accepted but do nothing, or not what the user asked for.

Such a job is valid and scheduled; the user is told which field, so a typo or a wrong
expectation does not go unnoticed. Each notice names the field (as ``kubectl explain`` spells it)
and says what Walras does instead:

- ``UnknownGPUType`` (``spec.throughput.<type>``): a throughput for a GPU type no ResourcePool
  has, while another type the job declares has one (declaring only unknown types is the
  ``NoPoolForThroughput`` issue of ``walras.core.policies.eligibility``, not a notice). The entry
  is ignored until a pool of that type exists.
- ``WeightClamped`` (``spec.utility.weight``): the weight lies outside its tenant's
  ``[minJobWeight, maxJobWeight]`` (``walras.core.governance.clamp_weight``, default [0.1, 10]);
  the nearest bound is used.
- ``AlphaOutOfRange`` (``spec.utility.alpha`` of an ``alphaFair`` job): α outside
  ``[ALPHA_LOW, ALPHA_HIGH]`` = [0.1, 10]. The job's best response to a price ``p`` is
  ``(w / p)^(1/α)`` (``walras.allocator.pricing.utilities``): a doubling of the price changes it
  by the factor ``2^(1/α)``, which is 1024 at α = 0.1 (a small error in a price is a large error
  in demand, so price discovery needs many more iterations to clear the market) and 1.07 at
  α = 10 (prices barely move demand, so they must move far to clear it). Past those bounds the
  utility is, to within those factors, the linear (α → 0) or max-min (α → ∞) one; the schema
  accepts 0 < α ≤ 100, and the value is used as given.
- ``PriorityClassNotFound`` / ``PriorityClassNotAllowed``
  (``spec.template.spec.priorityClassName``): no PriorityClass has that name, or the job's tenant
  does not allow it (``walras.core.priorities``); the job is scheduled as the default class.

All of them together become one ``SpecWarnings`` condition (``True``) and one Warning Event of
the same reason: the single notice's reason, or ``SeveralFields``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from walras.core import conditions as cond
from walras.core import governance, model, priorities

CONDITION: Final = "SpecWarnings"
SEVERAL: Final = "SeveralFields"
ALPHA_LOW: Final = 0.1
ALPHA_HIGH: Final = 10.0


@dataclass(frozen=True, slots=True)
class Notice:
    field: str
    reason: str
    message: str


def job_notices(
    job: model.JobSpec,
    gpu_types: set[str],
    tenants: Mapping[str, governance.TenantSpec],
    classes: Mapping[str, priorities.PriorityClass] | None = None,
) -> list[Notice]:
    """The notices of one job (``gpu_types``: the types some pool has), in field order
    (``classes``: the PriorityClasses by name; None: the job's class is not checked)."""
    out: list[Notice] = []
    if classes is not None and priorities.class_name(job):
        scheduled_as = priorities.effective(job, classes, tenants)
        if scheduled_as.reason:
            out.append(Notice(priorities.FIELD, scheduled_as.reason, scheduled_as.message))
    known = [t for t in job.throughput if t in gpu_types]
    if known:
        for gpu_type in sorted(t for t in job.throughput if t not in gpu_types):
            out.append(
                Notice(
                    f"spec.throughput.{gpu_type}",
                    "UnknownGPUType",
                    f"no ResourcePool has GPU type {gpu_type!r} (pools have "
                    f"{', '.join(sorted(gpu_types))}); this entry is ignored",
                )
            )
    tenant = governance.config(governance.tenant_of(job.namespace, tenants), tenants)
    weight = float(job.utility.weight)
    used = governance.clamp_weight(weight, tenant)
    if used != weight:
        out.append(
            Notice(
                "spec.utility.weight",
                "WeightClamped",
                f"{weight:g} is outside tenant {tenant.name}'s range "
                f"[{tenant.min_job_weight:g}, {tenant.max_job_weight:g}]; {used:g} is used",
            )
        )
    alpha = float(job.utility.alpha)
    if job.utility.kind == "alpha" and not ALPHA_LOW <= alpha <= ALPHA_HIGH:
        limit = "linear" if alpha < ALPHA_LOW else "max-min"
        out.append(
            Notice(
                "spec.utility.alpha",
                "AlphaOutOfRange",
                f"{alpha:g} is outside [{ALPHA_LOW:g}, {ALPHA_HIGH:g}], where price discovery "
                f"converges well; it is used, and acts almost like the {limit} utility",
            )
        )
    return out


def notices(
    jobs: Sequence[model.JobSpec],
    pools: Sequence[model.PoolSpec],
    tenants: Mapping[str, governance.TenantSpec],
    classes: Mapping[str, priorities.PriorityClass] | None = None,
) -> dict[model.JobKey, list[Notice]]:
    """The jobs with at least one notice."""
    gpu_types = {p.gpu_type for p in pools if p.gpu_type}
    found = {job.key: job_notices(job, gpu_types, tenants, classes) for job in jobs}
    return {key: found[key] for key in sorted(found) if found[key]}


def reason(found: Sequence[Notice]) -> str:
    return found[0].reason if len(found) == 1 else SEVERAL


def message(found: Sequence[Notice]) -> str:
    return "; ".join(f"{n.field}: {n.message}" for n in found)


def mark(core: Mapping[str, Any], found: Sequence[Notice], generation: int) -> dict[str, Any]:
    """``core`` (a job's status) with the ``SpecWarnings`` condition for ``found``."""
    notice = cond.condition(CONDITION, True, reason(found), message(found), generation)
    conditions = [c for c in core.get("conditions") or [] if c.get("type") != CONDITION]
    return {**core, "conditions": [*conditions, notice]}

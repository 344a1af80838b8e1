"""Quotas on statuses: a Tenant's GPUs per type, and a job's ``QuotaExceeded`` or ``Reclaimed``.

From one round's ``walras.core.tenant_usage.QuotaRound``:

- **Tenant** ``status.gpus.<type>``: ``guaranteed``, ``inUse``, ``borrowed``, ``lent`` (and
  ``maximum`` when set), GPU counts to two decimals (a guarantee scaled down while a node is
  gone is fractional); ``status.summary``, the ``GPUs`` printer column: per type
  ``TYPE IN_USE/GUARANTEED``, then ``+N`` borrowed or ``-N`` lent (never both: borrowing means
  holding more than the guarantee, lending less), types by name, e.g. ``v100 8/4 +4, k80 0/2 -2``.
  ``walras_tenant_gpus{tenant,gpu_type,state}`` carries the same four numbers.
- **Job**: ``QuotaExceeded`` replaces the reason of ``Allocated=False`` (the job waits because
  of its tenant's maximum, not its share); ``Reclaimed`` replaces the reason of
  ``Preempted=True`` (it lost its GPUs to a guarantee's owner, not because its slice ended). A
  ``Reclaimed`` condition stays while the job stays stopped, so a user reads it until the job
  runs again, not only in the round it was stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from walras.core import conditions as cond
from walras.core import tenant_usage
from walras.operator import metrics

STATES = ("guaranteed", "in_use", "borrowed", "lent")


def _gpus(x: float) -> float | int:
    r = round(x, 2)
    return int(r) if r == int(r) else r


def tenant_gpus(usage: Mapping[str, tenant_usage.TypeUsage]) -> dict[str, dict[str, Any]]:
    """``status.gpus`` of one tenant."""
    out: dict[str, dict[str, Any]] = {}
    for gpu_type, u in sorted(usage.items()):
        row: dict[str, Any] = {
            "guaranteed": _gpus(u.guaranteed),
            "inUse": _gpus(u.in_use),
            "borrowed": _gpus(u.borrowed),
            "lent": _gpus(u.lent),
        }
        if u.maximum is not None:
            row["maximum"] = _gpus(u.maximum)
        out[gpu_type] = row
    return out


def summary(gpus: Mapping[str, Mapping[str, Any]]) -> str:
    """The ``GPUs`` column (module docstring); ``-`` for a tenant without quotas or GPUs."""
    parts = []
    for gpu_type, row in sorted(gpus.items()):
        text = f"{gpu_type} {row['inUse']:g}/{row['guaranteed']:g}"
        if row["borrowed"]:
            text += f" +{row['borrowed']:g}"
        elif row["lent"]:
            text += f" -{row['lent']:g}"
        parts.append(text)
    return ", ".join(parts) or "-"


def export(usage: Mapping[str, Mapping[str, tenant_usage.TypeUsage]]) -> None:
    """``walras_tenant_gpus`` for every Tenant and type (tenants gone since are dropped)."""
    metrics.TENANT_GPUS.clear()
    for tenant, per_type in usage.items():
        for gpu_type, u in per_type.items():
            values = (u.guaranteed, u.in_use, u.borrowed, u.lent)
            for state, value in zip(STATES, values, strict=True):
                metrics.TENANT_GPUS.labels(tenant=tenant, gpu_type=gpu_type, state=state).set(value)


def _old_reclaimed(old: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for c in old:
        if c.get("type") == cond.PREEMPTED and c.get("reason") == cond.RECLAIMED:
            return c
    return None


def mark_job(
    core: dict[str, Any],
    reason: tenant_usage.QuotaReason | None,
    old: Sequence[Mapping[str, Any]],
    generation: int,
) -> dict[str, Any]:
    """``core`` with the quota reason on its ``Allocated`` or ``Preempted`` condition (module
    docstring); unchanged when the job neither waits on nor lost GPUs to a quota."""
    conds = list(core["conditions"])
    for k, c in enumerate(conds):
        if reason is not None and reason.reason == cond.QUOTA_EXCEEDED:
            if c["type"] == cond.ALLOCATED and c["status"] == "False":
                conds[k] = cond.condition(
                    cond.ALLOCATED, False, cond.QUOTA_EXCEEDED, reason.message(), generation
                )
        elif c["type"] == cond.PREEMPTED and c["status"] == "True":
            if reason is not None and reason.reason == cond.RECLAIMED:
                message = reason.message()
            else:
                kept = _old_reclaimed(old)
                if kept is None:
                    continue
                message = str(kept.get("message") or "")
            conds[k] = cond.condition(cond.PREEMPTED, True, cond.RECLAIMED, message, generation)
    return {**core, "conditions": conds}

"""Tenant quotas made visible: per tenant and GPU type, guaranteed, in use, borrowed and lent, and
why a job waits on or lost GPUs to a quota.

Per tenant ``t`` (its subtree: a tenant's quotas cover its descendants) and GPU type ``g``, after
this round's placements, with ``R_g`` the GPUs of ``g`` in the usable pools and ``U_g`` the GPUs
of ``g`` that Walras's jobs hold (every tenant's, with or without a Tenant object):

    guaranteed  G_tg = Guarantee_tg · min(1, R_g / Σ_roots Guarantee_rg)
    in use      h_tg = Σ_{jobs of t's subtree placed on g} replicas · GPUs per pod
    borrowed    b_tg = max(h_tg − G_tg, 0)
    lent        l_tg = max(G_tg − h_tg − F_g, 0),       F_g = max(R_g − U_g, 0) (free GPUs)

``Guarantee_tg``: the accepted ``spec.quotas.<g>.guaranteed`` (``walras.core.tenant_tree``; a
refused one counts as none), scaled down as ``walras.allocator.quotas`` scales carve-outs when a
node is gone. *Lent* is the part of the unused guarantee ``G − h`` that is not free: somebody
outside the subtree holds it. (Outside ``t``'s subtree ``U − h`` GPUs are held and ``R − G``
are not ``t``'s, so ``U − h − (R − G) = G − h − F`` of ``t``'s guarantee are held by others.)
Example: ``R = 8``, A guarantees 4 and holds 0, B guarantees 4 and holds 8: ``F = 0``, A lends
4 and B borrows 4.

Why a job waits or stopped (:class:`QuotaReason`), from the same numbers:

- ``QuotaExceeded``: a solved job without GPUs this round, and for every type it can use
  (throughput > 0, a type of the usable pools) its tenant or an ancestor ``a`` has a maximum
  ``M_ag`` with ``h_ag + gang > M_ag`` (``gang``: replicas · GPUs per pod). The first such
  tenant up the chain is named per type.
- ``Reclaimed``: a job that held GPUs of ``g`` before the round (its pods in the snapshot) holds
  none now, a tenant ``b`` on its chain was borrowing ``g`` before the round
  (``h⁻_bg > G_bg``), and a tenant ``o`` outside ``b``'s subtree that was below its guarantee
  (``h⁻_og < G_og``) *claims* ``g``: a job of its subtree that held no GPUs of ``g`` before
  the round is placed on ``g`` now or has a target there. The owner of a guarantee took its
  GPUs back. (A target counts, not only a placement: the owner's gang may be created a round
  after the borrower's pods are deleted, once their GPUs are free.)

Pure: the round's snapshot, view, solution and realisation in, values out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from walras.core import conditions, governance, model, snapshot
from walras.core.policies import Solution
from walras.core.realise import Realisation

QUOTA_EXCEEDED = conditions.QUOTA_EXCEEDED
RECLAIMED = conditions.RECLAIMED

Held = Mapping[tuple[str, str], float]
"""GPUs per (tenant, GPU type) held by the tenant's own jobs (not its descendants')."""


@dataclass(frozen=True, slots=True)
class TypeUsage:
    """One tenant's GPUs of one type (module docstring); ``maximum`` None: no maximum."""

    guaranteed: float
    in_use: float
    borrowed: float
    lent: float
    maximum: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """Tenant ``tenant`` holds ``held`` of its ``maximum`` of ``gpu_type``; the gang needs
    ``gang`` more."""

    tenant: str
    gpu_type: str
    held: float
    maximum: float
    gang: float


@dataclass(frozen=True, slots=True)
class QuotaReason:
    """Why a job waits on (``QuotaExceeded``: one :class:`QuotaLimit` per type it could use) or
    lost its GPUs to (``Reclaimed``) a quota."""

    reason: str
    limits: tuple[QuotaLimit, ...] = ()
    # Reclaimed: ``borrower`` (the job's tenant or an ancestor) held ``held`` of ``gpu_type``
    # beyond its guarantee of ``guaranteed``; ``owner`` was below its guarantee ``owner_guaranteed``
    # and took GPUs back.
    gpu_type: str = ""
    borrower: str = ""
    held: float = 0.0
    guaranteed: float = 0.0
    owner: str = ""
    owner_guaranteed: float = 0.0

    def message(self) -> str:
        """The condition's message, with the tenants, types and numbers."""
        if self.reason == QUOTA_EXCEEDED:
            return "; ".join(
                f"tenant {q.tenant} holds {q.held:g} of its maximum of {q.maximum:g} "
                f"{q.gpu_type} GPUs and the gang needs {q.gang:g}"
                for q in self.limits
            )
        return (
            f"tenant {self.owner} took back {self.gpu_type} GPUs of its guarantee of "
            f"{self.owner_guaranteed:g}, which tenant {self.borrower} had borrowed (it held "
            f"{self.held:g} of a guarantee of {self.guaranteed:g})"
        )


@dataclass(frozen=True, slots=True)
class QuotaRound:
    """One round's quota accounting: per Tenant object and type (types it has a quota of or
    uses), and the jobs that wait on or lost GPUs to a quota."""

    usage: Mapping[str, Mapping[str, TypeUsage]] = field(default_factory=dict)
    reasons: Mapping[model.JobKey, QuotaReason] = field(default_factory=dict)


EMPTY = QuotaRound()


def subtree(
    held: Held, tenants: Mapping[str, governance.TenantSpec]
) -> dict[tuple[str, str], float]:
    """``h``: each (tenant, type)'s GPUs together with every descendant's."""
    out: dict[tuple[str, str], float] = {}
    for (t, g), gpus in held.items():
        for u in (t, *governance.ancestors(t, tenants)):
            out[(u, g)] = out.get((u, g), 0.0) + gpus
    return out


def guarantees(
    tenants: Mapping[str, governance.TenantSpec], capacity: Mapping[str, float]
) -> dict[tuple[str, str], float]:
    """``G``: each accepted guarantee, scaled down per type where the roots' exceed the GPUs."""
    raw = {
        (t, g): float(q.guaranteed)
        for t, spec in tenants.items()
        for g, q in spec.quotas.items()
        if q.guaranteed
    }
    roots: dict[str, float] = {}
    for (t, g), x in raw.items():
        if not governance.ancestors(t, tenants):
            roots[g] = roots.get(g, 0.0) + x
    scale = {g: min(1.0, capacity.get(g, 0.0) / total) for g, total in roots.items() if total}
    return {(t, g): x * scale.get(g, 1.0) for (t, g), x in raw.items()}


def account(
    tenants: Mapping[str, governance.TenantSpec], capacity: Mapping[str, float], held: Held
) -> dict[str, dict[str, TypeUsage]]:
    """Every Tenant object's :class:`TypeUsage` per type it has a quota of or holds GPUs of
    (module docstring). ``held``: every tenant's own jobs, Tenant object or not."""
    h = subtree(held, tenants)
    big_g = guarantees(tenants, capacity)
    used: dict[str, float] = {}
    for (_, g), gpus in held.items():
        used[g] = used.get(g, 0.0) + gpus
    out: dict[str, dict[str, TypeUsage]] = {}
    for t in sorted(tenants):
        types = {*tenants[t].quotas, *(g for (u, g), x in h.items() if u == t and x > 0)}
        row: dict[str, TypeUsage] = {}
        for g in sorted(types):
            q = tenants[t].quotas.get(g)
            gt, ht = big_g.get((t, g), 0.0), h.get((t, g), 0.0)
            free = max(capacity.get(g, 0.0) - used.get(g, 0.0), 0.0)
            row[g] = TypeUsage(
                guaranteed=gt,
                in_use=ht,
                borrowed=max(ht - gt, 0.0),
                lent=max(gt - ht - free, 0.0),
                maximum=None if q is None else q.maximum,
            )
        out[t] = row
    return out


def quota_exceeded(
    job: model.JobSpec,
    gang: float,
    types: Sequence[str],
    tenants: Mapping[str, governance.TenantSpec],
    h: Mapping[tuple[str, str], float],
) -> QuotaReason | None:
    """``QuotaExceeded`` when every type the job can use is barred by a maximum up its chain."""
    usable = [g for g in types if job.throughput.get(g, 0.0) > 0]
    limits: list[QuotaLimit] = []
    for g in usable:
        for t in (job.tenant, *governance.ancestors(job.tenant, tenants)):
            q = governance.config(t, tenants).quotas.get(g)
            if q is not None and q.maximum is not None and h.get((t, g), 0.0) + gang > q.maximum:
                limits.append(QuotaLimit(t, g, h.get((t, g), 0.0), float(q.maximum), gang))
                break
        else:
            return None
    return QuotaReason(QUOTA_EXCEEDED, tuple(limits)) if limits else None


def reclaimed(
    job: model.JobSpec,
    lost: Sequence[str],
    tenants: Mapping[str, governance.TenantSpec],
    big_g: Mapping[tuple[str, str], float],
    before: Mapping[tuple[str, str], float],
    claims: Collection[tuple[str, str]],
) -> QuotaReason | None:
    """``Reclaimed`` when a tenant on the job's chain borrowed a type it lost and an owner of a
    guarantee outside it, short of that guarantee before, claims that type (``claims``: the
    (tenant, type) pairs whose subtree has a job new on the type, module docstring)."""
    chain = (job.tenant, *governance.ancestors(job.tenant, tenants))
    for g in lost:
        for b in chain:
            held_b, g_b = before.get((b, g), 0.0), big_g.get((b, g), 0.0)
            if held_b <= g_b:
                continue
            for o in sorted(tenants):
                g_o = big_g.get((o, g), 0.0)
                if governance.in_subtree(o, b, tenants) or before.get((o, g), 0.0) >= g_o:
                    continue
                if (o, g) in claims:
                    return QuotaReason(
                        RECLAIMED,
                        gpu_type=g,
                        borrower=b,
                        held=held_b,
                        guaranteed=g_b,
                        owner=o,
                        owner_guaranteed=g_o,
                    )
    return None


def _pod_gpus(
    snap: snapshot.Snapshot, view: snapshot.ClusterView
) -> dict[model.JobKey, dict[str, float]]:
    """GPUs per job and type its pods held before the round (pods on usable nodes)."""
    index = view.node_index
    out: dict[model.JobKey, dict[str, float]] = {}
    for pod in snap.pods:
        k = index.get(pod.node)
        if k is None:
            continue
        pool = view.node_pool[k]
        gpus = float(pod.requests.get(pool.resource_name, 0.0))
        if gpus > 0 and pod.job:
            per = out.setdefault(pod.job_key, {})
            per[pool.gpu_type] = per.get(pool.gpu_type, 0.0) + gpus
    return out


def quota_round(
    snap: snapshot.Snapshot,
    view: snapshot.ClusterView,
    sol: Solution,
    real: Realisation,
) -> QuotaRound:
    """This round's :class:`QuotaRound` (:data:`EMPTY` when no Tenant object exists)."""
    tenants = snap.tenants
    if not tenants:
        return EMPTY
    capacity = {g: float(c) for g, c in zip(view.gpu_types, view.type_capacity, strict=True)}
    pods = _pod_gpus(snap, view)
    after_own: dict[tuple[str, str], float] = {}
    before_own: dict[tuple[str, str], float] = {}
    gangs: dict[model.JobKey, float] = {}
    claims: set[tuple[str, str]] = set()
    for r, job in enumerate(sol.jobs):
        gang = float(job.replicas * int(sol.gpus_per_pod[r]))
        gangs[job.key] = gang
        jr = real.jobs.get(job.key)
        wanted = {g for g, x in zip(sol.group_type, sol.targets[r].tolist(), strict=True) if x > 0}
        if jr is not None and jr.group:
            key = (job.tenant, jr.gpu_type)
            after_own[key] = after_own.get(key, 0.0) + gang
            wanted.add(jr.gpu_type)
        had = pods.get(job.key, {})
        for g in wanted - set(had):
            claims.update((u, g) for u in (job.tenant, *governance.ancestors(job.tenant, tenants)))
    for job in snap.active_jobs:
        for g, gpus in pods.get(job.key, {}).items():
            before_own[(job.tenant, g)] = before_own.get((job.tenant, g), 0.0) + gpus
    usage = account(tenants, capacity, after_own)
    if not any(spec.quotas for spec in tenants.values()):
        return QuotaRound(usage=usage)
    h_after, h_before = subtree(after_own, tenants), subtree(before_own, tenants)
    big_g = guarantees(tenants, capacity)
    reasons: dict[model.JobKey, QuotaReason] = {}
    for job in sol.jobs:
        jr = real.jobs.get(job.key)
        if jr is None or jr.group:
            continue
        lost = sorted(pods.get(job.key, {}))
        found = (
            reclaimed(job, lost, tenants, big_g, h_before, claims) if lost else None
        ) or quota_exceeded(job, gangs[job.key], view.gpu_types, tenants, h_after)
        if found is not None:
            reasons[job.key] = found
    return QuotaRound(usage=usage, reasons=reasons)

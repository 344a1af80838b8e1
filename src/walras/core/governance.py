"""Tenants and the weight a job may claim: who a job belongs to, and how much its weight counts.

Users write FungibleJobs; only admins write ``Tenant`` objects (cluster-scoped,
``crds/tenant.yaml``). So nothing a user puts in a job may change their tenant's share of the
cluster:

- **Tenant of a job**: the Tenant whose ``spec.namespaces`` lists the job's namespace (the first by
  name if several do), else the namespace itself. ``spec.tenant`` of a job is ignored. A Tenant
  named like a namespace configures that namespace's tenant.
- **Tenant weight** ``W_t``: ``Tenant.spec.weight``, 1 without a Tenant object.
- **Job weight**: the job's ``utility.weight`` clamped to the tenant's allowed range
  ``[lo_t, hi_t]`` (``spec.jobWeight.min/max``, default ``[0.1, 10]``), then normalised inside its
  tenant so the tenant's jobs together weigh ``W_t``::

      w̃_j = clamp(w_j, lo_t, hi_t)
      w'_j = c · W_t · w̃_j / Σ_{k ∈ t} w̃_k,      c = n / Σ_{t present} W_t

  ``c`` only sets the scale (mean weight 1 over the ``n`` jobs, so a cluster of weight-1 jobs in
  one namespace is left exactly as it was); every utility kind's optimum is unchanged when all
  weights are multiplied by one constant, so ``c`` never moves an allocation.

  Example: tenant A (``W=1``) runs one job of weight 5, tenant B (``W=1``) two jobs of weight 1:
  ``c = 3/2``; A's job gets ``1.5``, B's jobs ``0.75`` each. Had A split its job into ten of weight
  5, ``c = 12/2 = 6`` and each of A's ten gets ``0.6``; A's jobs still weigh 6 of the 12 in total,
  half, exactly as before. Raising a weight only moves share between jobs of the same tenant.

- **Quotas** (optional, per GPU type, in GPUs; Kueue's nominal quota and borrowing limit):
  ``guaranteed`` is what the tenant may always claim of that type, ``maximum`` what it may hold at
  most (``guaranteed`` plus what it may borrow). :func:`quota_arrays` gives them to the policies,
  which enforce them through ``walras.allocator.quotas``; :func:`split_quotas` splits them over
  POP's shards.
- **Priority classes** (``spec.priorityClasses``): the Kubernetes PriorityClasses its users may
  name beyond those that do not raise precedence (``walras.core.priorities``).
- **Hierarchy** (``spec.parent``; checked by ``walras.core.tenant_tree``): quotas cover the
  tenant's subtree, and the admin's weights are hierarchical (:func:`hierarchical_weights`):
  among the tenants with jobs, a root holds ``W_v``, a child ``W_v / Σ W_siblings`` of its
  parent's share (siblings without jobs do not count, so an idle team's share goes to its
  siblings, an idle organisation's to the others). ``W_t`` in the formula above is that share;
  flat tenants keep their admin weight.

Everything here is pure (parsed objects in, values out); the policies call it where they read
weights (``walras.core.policies.price_discovery``, ``walras.core.tenants``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator import quotas
from walras.core import model

FloatArray = npt.NDArray[np.float64]

TENANT_KIND = "Tenant"
TENANT_PLURAL = "tenants"

DEFAULT_TENANT_WEIGHT = 1.0
DEFAULT_MIN_JOB_WEIGHT = 0.1
DEFAULT_MAX_JOB_WEIGHT = 10.0


@dataclass(frozen=True, slots=True)
class Quota:
    """GPUs of one type a tenant may always claim (``guaranteed``) and at most hold (``maximum``);
    None: no such limit."""

    guaranteed: float | None = None
    maximum: float | None = None


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """One ``Tenant`` object (or the defaults of a tenant without one)."""

    name: str
    weight: float = DEFAULT_TENANT_WEIGHT
    namespaces: tuple[str, ...] = ()
    min_job_weight: float = DEFAULT_MIN_JOB_WEIGHT
    max_job_weight: float = DEFAULT_MAX_JOB_WEIGHT
    quotas: Mapping[str, Quota] = field(default_factory=dict)
    generation: int = 0
    parent: str | None = None
    # PriorityClasses its users may use beyond the default (walras.core.priorities).
    priority_classes: frozenset[str] = frozenset()
    # GPU types its ``status.gpus`` lists on the API server: the status writer nulls those no
    # longer shown, also after a restart, when it no longer remembers what it wrote.
    shown_gpus: frozenset[str] = frozenset()


def _number(value: object, default: float) -> float:
    """A finite positive number from the object, else ``default`` (the schema already checks)."""
    try:
        x = float(value)  # type: ignore[arg-type]  # any JSON scalar; bad ones fall back
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) and x > 0 else default


def _limit(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]  # any JSON scalar; bad ones mean "no limit"
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_tenant(obj: Mapping[str, Any]) -> TenantSpec:
    """Parse a ``Tenant`` dict; values the schema would reject fall back to the defaults."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    shown = _map(_map(obj.get("status")).get("gpus"))
    raw_ns = spec.get("namespaces")
    namespaces = tuple(sorted({str(n) for n in raw_ns})) if isinstance(raw_ns, list) else ()
    jw = _map(spec.get("jobWeight"))
    lo = _number(jw.get("min"), DEFAULT_MIN_JOB_WEIGHT)
    hi = _number(jw.get("max"), DEFAULT_MAX_JOB_WEIGHT)
    if hi < lo:
        lo, hi = hi, lo
    raw_pc = spec.get("priorityClasses")
    priority_classes = (
        frozenset(str(n) for n in raw_pc) if isinstance(raw_pc, list) else frozenset()
    )
    quotas: dict[str, Quota] = {}
    for gpu_type, q in sorted(_map(spec.get("quotas")).items()):
        if isinstance(q, Mapping):
            quotas[str(gpu_type)] = Quota(_limit(q.get("guaranteed")), _limit(q.get("maximum")))
    return TenantSpec(
        name=str(meta.get("name", "")),
        weight=_number(spec.get("weight"), DEFAULT_TENANT_WEIGHT),
        namespaces=namespaces,
        min_job_weight=lo,
        max_job_weight=hi,
        quotas=quotas,
        generation=int(meta.get("generation") or 0),
        parent=str(spec["parent"])
        if isinstance(spec.get("parent"), str) and spec["parent"]
        else None,
        priority_classes=priority_classes,
        shown_gpus=frozenset(str(t) for t, row in shown.items() if row is not None),
    )


def tenant_of(namespace: str, tenants: Mapping[str, TenantSpec]) -> str:
    """The tenant of a job in ``namespace`` (see the module docstring)."""
    for name in sorted(tenants):
        if namespace in tenants[name].namespaces:
            return name
    return namespace


def config(tenant: str, tenants: Mapping[str, TenantSpec]) -> TenantSpec:
    """The tenant's settings: its Tenant object, or the defaults."""
    return tenants.get(tenant) or TenantSpec(name=tenant)


def tenant_weight(tenant: str, tenants: Mapping[str, TenantSpec]) -> float:
    """``W_t``: the admin's weight of the tenant (1 without a Tenant object)."""
    return config(tenant, tenants).weight


def ancestors(tenant: str, tenants: Mapping[str, TenantSpec]) -> list[str]:
    """The tenant's parent, grandparent, ... (stops at a missing parent or a repeat: validation
    names those; here they only end the chain)."""
    out: list[str] = []
    seen = {tenant}
    parent = config(tenant, tenants).parent
    while parent is not None and parent in tenants and parent not in seen:
        out.append(parent)
        seen.add(parent)
        parent = tenants[parent].parent
    return out


def in_subtree(tenant: str, root: str, tenants: Mapping[str, TenantSpec]) -> bool:
    """``tenant`` is ``root`` or one of its descendants."""
    return tenant == root or root in ancestors(tenant, tenants)


OWN_JOBS_WEIGHT = 1.0
"""The weight a tenant's own jobs have beside its children with jobs (module docstring)."""


def hierarchical_weights(
    present: Sequence[str], tenants: Mapping[str, TenantSpec]
) -> dict[str, float]:
    """Each present tenant's share of the cluster (module docstring: hierarchical fair share).

    ``present``: the tenants with jobs. A tenant is *active* if it or a descendant is present.
    An active root holds its weight ``W_v``; among active siblings under a parent, each gets
    ``W_v / Σ W`` of the parent's share; a present tenant with active children keeps
    ``1 / (1 + Σ W_children)`` of its share for its own jobs (they weigh ``OWN_JOBS_WEIGHT``
    among its children). Flat tenants: ``W_t``. Only ratios matter to the policies.
    """
    chains = {t: ancestors(t, tenants) for t in present}
    active = set(present) | {a for chain in chains.values() for a in chain}

    def up(v: str) -> str | None:
        parent = config(v, tenants).parent
        chain = ancestors(v, tenants)
        return chain[0] if chain and chain[0] == parent else None

    children: dict[str | None, list[str]] = {}
    for v in sorted(active):
        children.setdefault(up(v), []).append(v)
    share: dict[str, float] = {}

    def visit(parent: str, amount: float) -> None:
        kids = children.get(parent, [])
        own = OWN_JOBS_WEIGHT if parent in present and kids else 0.0
        total = own + sum(tenant_weight(v, tenants) for v in kids)
        share[parent] = amount * (own / total if kids else 1.0)
        for v in kids:
            visit(v, amount * tenant_weight(v, tenants) / total)

    # Roots hold their own weight W_v (not W_v / Σ W: the same ratios, and a flat tenant's φ is
    # exactly its admin weight, as the node agents compute it).
    for root in children.get(None, []):
        visit(root, tenant_weight(root, tenants))
    # Tenants on a cycle of parents (unvalidated input; ``walras.core.tenant_tree`` flattens
    # them) count as flat tenants.
    return {t: share.get(t, tenant_weight(t, tenants)) for t in present}


def clamp_weight(weight: float, spec: TenantSpec) -> float:
    """A job's weight inside its tenant's allowed range (NaN counts as the lower bound)."""
    if math.isnan(weight):
        return spec.min_job_weight
    return min(max(weight, spec.min_job_weight), spec.max_job_weight)


def resolve(
    jobs: Sequence[model.JobSpec], tenants: Mapping[str, TenantSpec]
) -> tuple[model.JobSpec, ...]:
    """``jobs`` with ``tenant`` set from the namespace and the Tenant objects (order kept)."""
    out: list[model.JobSpec] = []
    for job in jobs:
        tenant = tenant_of(job.namespace, tenants)
        out.append(job if job.tenant == tenant else dataclasses.replace(job, tenant=tenant))
    return tuple(out)


def normalised_weights(
    jobs: Sequence[model.JobSpec], tenants: Mapping[str, TenantSpec]
) -> FloatArray:
    """``w'_j`` of every job, in the order given (see the module docstring).

    The tenant of each job is derived from its namespace here (never from ``spec.tenant``), so
    the result does not depend on whether the caller resolved tenants first.
    """
    n = len(jobs)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    # Looked up once per namespace and tenant, not per job (a queue has few of either).
    of_namespace = {ns: tenant_of(ns, tenants) for ns in {j.namespace for j in jobs}}
    names = [of_namespace[j.namespace] for j in jobs]
    configs = {t: config(t, tenants) for t in of_namespace.values()}
    clamped = np.array(
        [
            clamp_weight(float(j.utility.weight), configs[t])
            for j, t in zip(jobs, names, strict=True)
        ],
        dtype=np.float64,
    )
    totals: dict[str, float] = {}
    for t, w in zip(names, clamped.tolist(), strict=True):
        totals[t] = totals.get(t, 0.0) + w
    big_w = hierarchical_weights(list(totals), tenants)
    scale = n / sum(big_w.values())
    return np.array(
        [scale * big_w[t] * w / totals[t] for t, w in zip(names, clamped.tolist(), strict=True)],
        dtype=np.float64,
    )


def quota_arrays(
    jobs: Sequence[model.JobSpec], gpu_types: Sequence[str], tenants: Mapping[str, TenantSpec]
) -> quotas.Quotas | None:
    """The quotas of the tenants of ``jobs`` (rows) and of their ancestors over ``gpu_types``
    (columns) as the allocator's :class:`~walras.allocator.quotas.Quotas`; ``None`` when none
    of them has one (the policy then solves exactly as without quotas). ``tenants``: validated
    (``walras.core.tenant_tree``; the snapshot's are)."""
    names = [tenant_of(j.namespace, tenants) for j in jobs]
    present = sorted(set(names) | {a for t in set(names) for a in ancestors(t, tenants)})
    index = {t: k for k, t in enumerate(present)}
    guaranteed = np.zeros((len(present), len(gpu_types)))
    maximum = np.full((len(present), len(gpu_types)), np.inf)
    parent = np.full(len(present), -1, dtype=np.int64)
    for k, t in enumerate(present):
        chain = ancestors(t, tenants)
        if chain:
            parent[k] = index[chain[0]]
        for g, gpu_type in enumerate(gpu_types):
            q = config(t, tenants).quotas.get(gpu_type)
            if q is None:
                continue
            if q.guaranteed is not None:
                guaranteed[k, g] = q.guaranteed
            if q.maximum is not None:
                maximum[k, g] = q.maximum
    out = quotas.Quotas(
        owner=np.array([index[t] for t in names], dtype=np.int64),
        guaranteed=guaranteed,
        maximum=maximum,
        parent=parent if (parent >= 0).any() else None,
    )
    return out if out.any else None


def split_quotas(
    shards: Sequence[Sequence[model.JobSpec]],
    gpu_types: Sequence[str],
    tenants: Mapping[str, TenantSpec],
) -> list[dict[str, TenantSpec]]:
    """Each POP shard's tenants: every quota split over the shards in proportion to the GPUs
    the jobs of the tenant's subtree in each shard ask of that type (replicas × GPUs per pod,
    jobs with throughput there), equally where they ask none.

    So the shards' maximums add up to the tenant's (it never holds more in total), and so do
    its guarantees, each where its demand is. Tenants without quotas are passed unchanged.
    """
    out: list[dict[str, TenantSpec]] = [dict(tenants) for _ in shards]
    k = len(shards)
    for name, spec in tenants.items():
        if not spec.quotas:
            continue
        split: list[dict[str, Quota]] = [{} for _ in shards]
        for gpu_type, q in spec.quotas.items():
            asked = np.array(
                [
                    sum(
                        j.replicas * max(j.gpu_limits.values(), default=1)
                        for j in jobs
                        if not j.finished
                        and in_subtree(tenant_of(j.namespace, tenants), name, tenants)
                        and j.throughput.get(gpu_type, 0.0) > 0
                    )
                    for jobs in shards
                ],
                dtype=np.float64,
            )
            share = asked / asked.sum() if asked.sum() > 0 else np.full(k, 1.0 / k)
            for s in range(k):
                split[s][gpu_type] = Quota(
                    None if q.guaranteed is None else q.guaranteed * float(share[s]),
                    None if q.maximum is None else q.maximum * float(share[s]),
                )
        for s in range(k):
            out[s][name] = dataclasses.replace(spec, quotas=split[s])
    return out

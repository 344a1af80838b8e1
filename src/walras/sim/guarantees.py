"""Whether each tenant's guarantees were met, round by round (``walras simulate --tenants``).

A tenant ``t`` with a guarantee ``G_tg`` of GPU type ``g`` (``Tenant.spec.quotas.<g>.guaranteed``,
covering ``t`` and its descendants, as in ``walras.core.governance``) is measured after every
full round has been carried out:

- **demand** ``f_tg``: the GPUs asked by the unfinished jobs of ``t``'s subtree that can use
  ``g`` (a positive throughput there) and whose gang fits in the guarantee (``replicas × GPUs per
  pod ≤ G_tg``): the demand ``f_tg`` of the quota layer's carve-out ``min(G_tg, f_tg)``
  (``walras.allocator.quotas``). A job served elsewhere is left out, because the quota layer
  never forces a *saturated* job (its targets give it all its time, ``Σ_g' x_jg' = 1``) onto
  ``g``: a job running on another GPU type this round, and a saturated job whose largest target
  is on another type;
- **held** ``h_tg``: the GPUs of type ``g`` the subtree's pods hold once the round is applied;
- the pair's guarantee is **met** in the round iff ``h_tg`` reaches the most GPUs the demanding
  gangs fill within the guarantee: ``min(G_tg, f_tg)`` where gangs could be split, the largest
  sum of whole gangs at most ``G_tg`` where they cannot (gangs of 4 and 4 against a guarantee of
  6: 4); the pair has demand iff ``f_tg > 0``.

Per tenant, the rounds in which it had demand for at least one guaranteed type count, and such a
round is met iff every guaranteed type it had demand for was met::

    guarantee_met_t = #(rounds with demand, every pair met) / #(rounds with demand)

(``None`` for a tenant that never had demand for a guaranteed type.)

Measured at full rounds: a job arriving between rounds gets free GPUs at once (incremental
rounds), and GPUs lent to another tenant come back at the next full round, which is when it is
first counted. With ``--min-run-seconds M`` a borrower's gang placed less than ``M`` ago is kept,
so a reclaim can wait up to ``⌈M / R⌉`` more rounds: those rounds count as **not met** (the
metric does not excuse them).

Example (hand-checked in the tests): a tenant guaranteed 2 V100s with 3 GPUs of 1-GPU jobs
waiting or running, holding 2: met; the next round 1 GPU of demand and 0 held: not met; then no
demand: not counted; ``guarantee_met = 1 / 2``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from walras.core import governance, model

# GPUs: placements are whole GPUs; this only absorbs float round-off in the comparison.
_EPS = 1e-9
# Time fraction: a job whose targets add up to within this of 1 is saturated (the solvers'
# round-off; far below what one round of a job's time is worth).
_SATURATED = 1e-6


def gang_gpus(job: model.JobSpec) -> int:
    """GPUs of a job's whole gang (``replicas × GPUs per pod``; one per pod without a limit)."""
    return job.replicas * max(job.gpu_limits.values(), default=1)


def demand_levels(
    jobs: Iterable[model.JobSpec],
    tenants: Mapping[str, governance.TenantSpec],
    placed_type: Mapping[model.JobKey, str],
    targets: Mapping[model.JobKey, Mapping[str, float]] | None = None,
) -> dict[str, dict[str, float]]:
    """``min(G_tg, f_tg)`` per tenant and guaranteed type with ``f_tg > 0`` (module docstring).

    ``jobs``: the unfinished jobs; ``tenants``: validated (``walras.core.tenant_tree``);
    ``placed_type``: the GPU type each running job is on this round; ``targets``: each job's
    time fraction per type this round (the policy's ``Solution.targets``; missing: none).
    """
    jobs = list(jobs)
    targets = targets or {}

    def elsewhere(job: model.JobSpec, gpu_type: str) -> bool:
        if placed_type.get(job.key, gpu_type) != gpu_type:
            return True
        mine = targets.get(job.key, {})
        saturated = sum(mine.values()) >= 1.0 - _SATURATED
        return saturated and max(mine, key=lambda t: (mine[t], t == gpu_type)) != gpu_type

    out: dict[str, dict[str, float]] = {}
    for name in sorted(tenants):
        for gpu_type, quota in sorted(tenants[name].quotas.items()):
            g = quota.guaranteed
            if not g:
                continue
            gangs = [
                gang_gpus(j)
                for j in jobs
                if j.throughput.get(gpu_type, 0.0) > 0
                and gang_gpus(j) <= g
                and not elsewhere(j, gpu_type)
                and governance.in_subtree(governance.tenant_of(j.namespace, tenants), name, tenants)
            ]
            if gangs:
                out.setdefault(name, {})[gpu_type] = float(whole_gangs(gangs, g))
    return out


def whole_gangs(gangs: Sequence[int], limit: float) -> int:
    """The most GPUs whole gangs of ``gangs`` add up to without exceeding ``limit`` (a subset
    sum over at most ``limit + 1`` totals): ``min(G, f)`` where gangs cannot be split."""
    totals = {0}
    for gang in gangs:
        totals |= {t + gang for t in totals if t + gang <= limit}
    return max(totals)


def subtree_held(
    own: Mapping[str, Mapping[str, float]], tenants: Mapping[str, governance.TenantSpec]
) -> dict[str, dict[str, float]]:
    """GPUs held per tenant and type by its subtree, from what each tenant's own jobs hold."""
    out: dict[str, dict[str, float]] = {}
    for tenant, per_type in own.items():
        for holder in [tenant, *governance.ancestors(tenant, tenants)]:
            row = out.setdefault(holder, {})
            for gpu_type, gpus in per_type.items():
                row[gpu_type] = row.get(gpu_type, 0.0) + gpus
    return out


@dataclass
class GuaranteeTally:
    """Rounds with demand and rounds met, per tenant and per (tenant, type)."""

    rounds: dict[str, int] = field(default_factory=dict)
    met: dict[str, int] = field(default_factory=dict)
    pair_rounds: dict[tuple[str, str], int] = field(default_factory=dict)
    pair_met: dict[tuple[str, str], int] = field(default_factory=dict)

    def observe(
        self,
        levels: Mapping[str, Mapping[str, float]],
        held: Mapping[str, Mapping[str, float]],
    ) -> None:
        """One round: ``levels`` from :func:`demand_levels`, ``held`` from
        :func:`subtree_held`."""
        for tenant, per_type in levels.items():
            ok = True
            for gpu_type, level in per_type.items():
                pair = (tenant, gpu_type)
                pair_ok = held.get(tenant, {}).get(gpu_type, 0.0) >= level - _EPS
                self.pair_rounds[pair] = self.pair_rounds.get(pair, 0) + 1
                self.pair_met[pair] = self.pair_met.get(pair, 0) + int(pair_ok)
                ok = ok and pair_ok
            self.rounds[tenant] = self.rounds.get(tenant, 0) + 1
            self.met[tenant] = self.met.get(tenant, 0) + int(ok)

    def fraction(self, tenant: str) -> float | None:
        rounds = self.rounds.get(tenant, 0)
        return self.met.get(tenant, 0) / rounds if rounds else None

    def pair_fraction(self, tenant: str, gpu_type: str) -> float | None:
        rounds = self.pair_rounds.get((tenant, gpu_type), 0)
        return self.pair_met.get((tenant, gpu_type), 0) / rounds if rounds else None


@dataclass
class TenantReport:
    """Per-tenant accounting of one run: guarantees, and each job's tenant (row order)."""

    job_tenant: list[str]
    names: Sequence[str]
    guarantees: GuaranteeTally = field(default_factory=GuaranteeTally)

"""Per tenant and GPU type: guaranteed, in use, borrowed and lent (``walras.core.tenant_usage``),
and why a job waits on a maximum or lost its GPUs to a guarantee's owner.

Oracle: the numbers are worked out by hand in each test from the definitions (borrowed: held
beyond the guarantee; lent: the part of an unused guarantee somebody outside the subtree holds,
i.e. not free), for a hierarchy where a team's guarantee comes out of its organisation's.
"""

from __future__ import annotations

from typing import Any

from walras.core import governance, tenant_usage
from walras.core.tenant_usage import QuotaLimit, TypeUsage


def parsed(*objs: dict[str, Any]) -> dict[str, governance.TenantSpec]:
    specs = [governance.parse_tenant(o) for o in objs]
    return {s.name: s for s in specs}


def tenant(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 1}, "spec": spec}


def job(name: str, tenant: str, **throughput: float) -> Any:
    class _Job:  # only what the reason functions read
        pass

    j: Any = _Job()
    j.name, j.tenant, j.throughput = name, tenant, throughput
    return j


# org guarantees 6 of the 8 v100 (team-a 4 of them, team-b 2); "other" has no Tenant quota.
ORG = parsed(
    tenant("org", quotas={"v100": {"guaranteed": 6, "maximum": 6}}),
    tenant("team-a", parent="org", namespaces=["a"], quotas={"v100": {"guaranteed": 4}}),
    tenant("team-b", parent="org", namespaces=["b"], quotas={"v100": {"guaranteed": 2}}),
)


def test_two_flat_tenants_one_idle_lends_what_the_other_borrows() -> None:
    # R = 8, A guarantees 4 and holds 0, B guarantees 4 and holds 8: nothing is free (F = 0),
    # so all 4 of A's guarantee are held by B: A lends 4, B borrows 8 - 4 = 4.
    tenants = parsed(
        tenant("a", quotas={"v100": {"guaranteed": 4}}),
        tenant("b", quotas={"v100": {"guaranteed": 4, "maximum": 8}}),
    )
    got = tenant_usage.account(tenants, {"v100": 8}, {("b", "v100"): 8})
    assert got["a"] == {"v100": TypeUsage(guaranteed=4, in_use=0, borrowed=0, lent=4)}
    assert got["b"] == {"v100": TypeUsage(4, 8, 4, 0, maximum=8)}


def test_free_gpus_are_not_lent() -> None:
    # B holds 6 of 8: F = 2 free, A's 4 unused guaranteed GPUs: 2 free, 2 held by B.
    tenants = parsed(
        tenant("a", quotas={"v100": {"guaranteed": 4}}),
        tenant("b", quotas={"v100": {"guaranteed": 4}}),
    )
    got = tenant_usage.account(tenants, {"v100": 8}, {("b", "v100"): 6})
    assert got["a"]["v100"].lent == 2
    assert got["b"]["v100"].borrowed == 2


def test_a_hierarchy_counts_subtrees_and_lends_a_teams_guarantee_to_its_sibling() -> None:
    # team-b holds 4, a tenant without a Tenant object ("other") holds 3, team-a nothing.
    # U = 7, F = 1.
    #   team-a: G 4, h 0: lent max(4 - 0 - 1, 0) = 3 (team-b's 2 extra and 1 of other's 3).
    #   team-b: G 2, h 4: borrowed 2.
    #   org:    G 6, h 4 (its subtree): borrowed 0, lent max(6 - 4 - 1, 0) = 1 (held by other).
    held = {("team-b", "v100"): 4.0, ("other", "v100"): 3.0}
    got = tenant_usage.account(ORG, {"v100": 8}, held)
    assert got["team-a"]["v100"] == TypeUsage(4, 0, 0, 3)
    assert got["team-b"]["v100"] == TypeUsage(2, 4, 2, 0)
    assert got["org"]["v100"] == TypeUsage(6, 4, 0, 1, maximum=6)
    assert "other" not in got  # no Tenant object: no status to write


def test_guarantees_shrink_with_the_pools_and_a_used_type_without_quota_is_listed() -> None:
    # Only 3 v100 are usable (a node is gone): org's 6 scale by 3/6, so team-a's 4 become 2.
    got = tenant_usage.account(ORG, {"v100": 3, "k80": 4}, {("team-a", "k80"): 2.0})
    assert got["team-a"]["v100"].guaranteed == 2
    assert got["org"]["v100"].guaranteed == 3
    assert got["team-a"]["k80"] == TypeUsage(0, 2, 2, 0)
    assert got["org"]["k80"] == TypeUsage(0, 2, 2, 0)


def test_quota_exceeded_names_the_first_tenant_at_its_maximum_on_every_usable_type() -> None:
    # org holds 6 of its maximum of 6 v100: a 1-GPU job of team-a cannot take one more.
    h = tenant_usage.subtree({("team-a", "v100"): 4.0, ("team-b", "v100"): 2.0}, ORG)
    why = tenant_usage.quota_exceeded(job("j", "team-a", v100=1.0), 1.0, ["v100"], ORG, h)
    assert why is not None and why.reason == "QuotaExceeded"
    assert why.limits == (QuotaLimit("org", "v100", 6, 6, 1),)
    assert why.message() == (
        "tenant org holds 6 of its maximum of 6 v100 GPUs and the gang needs 1"
    )
    # With k80 usable and no maximum there, the job does not wait on a quota.
    assert (
        tenant_usage.quota_exceeded(
            job("j", "team-a", v100=1.0, k80=0.5), 1.0, ["k80", "v100"], ORG, h
        )
        is None
    )
    # Room for the gang under every maximum: no reason either.
    h5 = tenant_usage.subtree({("team-a", "v100"): 5.0}, ORG)
    assert tenant_usage.quota_exceeded(job("j", "team-a", v100=1.0), 1.0, ["v100"], ORG, h5) is None


def test_reclaimed_names_the_owner_and_the_borrower() -> None:
    tenants = parsed(
        tenant("a", quotas={"v100": {"guaranteed": 4}}),
        tenant("b", quotas={"v100": {"guaranteed": 4}}),
    )
    big_g = tenant_usage.guarantees(tenants, {"v100": 8})
    before = {("b", "v100"): 8.0}
    claims = {("a", "v100")}  # a's job, new on v100, is placed there or has a target there
    why = tenant_usage.reclaimed(job("j", "b"), ["v100"], tenants, big_g, before, claims)
    assert why is not None and why.reason == "Reclaimed"
    assert (why.owner, why.borrower, why.gpu_type, why.held, why.guaranteed) == (
        "a",
        "b",
        "v100",
        8,
        4,
    )
    assert "tenant a took back v100 GPUs of its guarantee of 4" in why.message()
    # B within its guarantee before: its job's slice ended, nothing was reclaimed.
    inside = {("b", "v100"): 4.0}
    assert tenant_usage.reclaimed(job("j", "b"), ["v100"], tenants, big_g, inside, claims) is None
    # Nobody claims v100: not a reclaim either.
    assert tenant_usage.reclaimed(job("j", "b"), ["v100"], tenants, big_g, before, set()) is None
    # On 12 GPUs, a held its whole guarantee before (b borrowing 4 of the 4 unguaranteed): a
    # has nothing to take back.
    g12 = tenant_usage.guarantees(tenants, {"v100": 12})
    full = {("b", "v100"): 8.0, ("a", "v100"): 4.0}
    assert tenant_usage.reclaimed(job("j", "b"), ["v100"], tenants, g12, full, claims) is None

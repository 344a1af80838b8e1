"""``walras explain NAMESPACE/JOB`` and ``walras status``: read-only views of a running Walras.

Both commands only read the API (FungibleJobs, ResourcePools, Tenants); they never write.
``status`` shows, per Tenant and GPU type, the GPUs guaranteed, in use, borrowed (held beyond
the guarantee) and lent (its guarantee held by others) from the Tenants' statuses; ``explain``
says when a job waits on its tenant's maximum (``QuotaExceeded``) or was stopped because a
guarantee's owner took its GPUs back (``Reclaimed``). ``explain`` adds
one computation: what the job would get on each GPU type *alone* at the current prices, i.e. the
job's own subproblem (``walras.allocator.pricing.best_response``) with its throughput row masked
to that one type::

    x_j = argmax_{x ∈ [0,1]}  u(a_j · x) − p_j · d · x      (d = replicas × GPUs per pod)

For the log utility that is ``x_j = min(1, w / (p_j · d))``: at price 2.0 a 4-GPU job of weight 1
gets an eighth of the time on that type. The pool table is reused by ``walras.demo``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from walras.cli.app import app
from walras.kube import client as kubeclient

if TYPE_CHECKING:  # numpy and rich are imported where used: every `walras` command starts faster
    from rich.console import Console
    from rich.table import Table

    from walras.cli import throughput_view

GROUP, VERSION = "walras.dev", "v1alpha1"
# CRD utility kinds -> pricing kinds (the CRD uses user-facing names).
UTILITY_KINDS = {"log": "log", "linear": "linear", "targetPriority": "target", "alphaFair": "alpha"}
# Conditions a job must pass, in order; the first one that is not True explains the wait.
# (TimeSliced and Preempted are informational: False there is not a reason to wait.)
CONDITION_ORDER = ("Admitted", "Allocated", "Bound")

Obj = Mapping[str, Any]
KubeconfigOption = Annotated[
    str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG).")
]


@dataclass(frozen=True)
class PoolView:
    """One ResourcePool as the tables show it (status fields are 0 before the first round)."""

    name: str
    gpu_type: str
    nodes: int
    capacity: float
    allocated: float
    price: float
    utilisation: float


@dataclass(frozen=True)
class Alternative:
    """What the job would get on one GPU type alone, at the current prices."""

    gpu_type: str
    price: float
    fraction: float  # of the time its whole gang would run on that type
    throughput: float  # a_j · fraction
    note: str = ""


@dataclass(frozen=True)
class Explanation:
    job: str
    tenant: str
    phase: str
    reason: str
    message: str
    conditions: tuple[tuple[str, str, str, str], ...]  # (type, status, reason, message)
    allocation: tuple[tuple[str, float, str], ...]  # (gpu type, fraction, nodes)
    expected_throughput: float
    price: float
    fair_share: float | None
    alternatives: tuple[Alternative, ...]
    pools: tuple[PoolView, ...]
    throughputs: tuple[throughput_view.ThroughputRow, ...] = ()
    restarts: str = ""  # measured restart cost and steps lost (status.progress), when any
    reclaimed: str = ""  # the Reclaimed condition's message, while the job stays stopped


@dataclass(frozen=True)
class TenantRow:
    """One Tenant's GPUs of one type, from its status (``walras.operator.quota_status``)."""

    tenant: str
    parent: str
    gpu_type: str
    guaranteed: float
    in_use: float
    borrowed: float
    lent: float
    maximum: float | None


def tenant_rows(tenants: Iterable[Obj]) -> tuple[TenantRow, ...]:
    """Every Tenant's GPUs per type, by tenant then type (a Tenant without any: one row of
    dashes, so every Tenant is listed)."""
    rows = []
    for obj in tenants:
        name = str((obj.get("metadata") or {}).get("name", ""))
        parent = str((obj.get("spec") or {}).get("parent") or "")
        gpus = (obj.get("status") or {}).get("gpus")
        gpus = gpus if isinstance(gpus, Mapping) else {}
        if not gpus:
            rows.append(TenantRow(name, parent, "", 0.0, 0.0, 0.0, 0.0, None))
        for gpu_type, g in sorted(gpus.items()):
            if not isinstance(g, Mapping):
                continue
            top = g.get("maximum")
            rows.append(
                TenantRow(
                    name,
                    parent,
                    str(gpu_type),
                    _num(g.get("guaranteed")),
                    _num(g.get("inUse")),
                    _num(g.get("borrowed")),
                    _num(g.get("lent")),
                    None if top is None else _num(top),
                )
            )
    return tuple(sorted(rows, key=lambda r: (r.tenant, r.gpu_type)))


def restart_summary(status: Obj) -> str:
    """``status.progress``'s restart measurements in one line ("" before the first)."""
    progress = status.get("progress")
    if not isinstance(progress, dict):
        return ""
    costs = [c for c in progress.get("restartSeconds") or [] if isinstance(c, int | float)]
    median = progress.get("restartCostSeconds")
    restores = progress.get("restores")
    if not costs and not restores:
        return ""
    parts = []
    if isinstance(median, int | float):
        last = ", ".join(f"{c:.1f}" for c in costs)
        parts.append(f"cost {median:.1f} s (median of the last {len(costs)}: {last} s)")
    if isinstance(restores, int) and restores:
        lost = int(_num(progress.get("stepsLost")))
        fallbacks = int(_num(progress.get("fallbacks")))
        parts.append(f"{lost} steps lost in {fallbacks} of {restores} restores")
    return "; ".join(parts)


def _num(value: Any, default: float = 0.0) -> float:
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def pool_views(pools: Iterable[Obj]) -> tuple[PoolView, ...]:
    """ResourcePools sorted by GPU type, then name (stable table order)."""
    views = []
    for pool in pools:
        spec, status = pool.get("spec") or {}, pool.get("status") or {}
        views.append(
            PoolView(
                name=str(pool.get("metadata", {}).get("name", "")),
                gpu_type=str(spec.get("gpuType", "")),
                nodes=int(_num(status.get("nodes"))),
                capacity=_num(status.get("capacity", spec.get("capacityOverride"))),
                allocated=_num(status.get("allocated")),
                price=_num(status.get("price")),
                utilisation=_num(status.get("utilisation")),
            )
        )
    return tuple(sorted(views, key=lambda v: (v.gpu_type, v.name)))


def gpus_per_pod(job: Obj, resource_name: str = "nvidia.com/gpu") -> int:
    """The first container's limit of the pool resource (default 1), as the operator reads it."""
    containers = job.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    return max(1, int(_num(limits.get(resource_name), 1.0)))


def pending_reason(job: Obj) -> tuple[str, str]:
    """(reason, message) of the first condition, in lifecycle order, that is not True."""
    conditions = {c.get("type"): c for c in job.get("status", {}).get("conditions") or []}
    for kind in CONDITION_ORDER:
        cond = conditions.get(kind)
        if cond is not None and cond.get("status") != "True":
            return str(cond.get("reason") or kind), str(cond.get("message") or "")
    if not conditions:
        return "NotYetScheduled", "no scheduling round has considered this job yet"
    return "", ""


def alternatives(job: Obj, pools: Sequence[PoolView]) -> tuple[Alternative, ...]:
    """Per GPU type: the job's best response at current prices with only that type available."""
    import numpy as np

    from walras.allocator import pricing  # deferred: numpy/scipy only, but keeps --help fast
    from walras.allocator.errors import InvalidProblem
    from walras.cli import throughput_view

    spec = job.get("spec", {})
    types = sorted({p.gpu_type for p in pools})
    capacity = np.array([sum(p.capacity for p in pools if p.gpu_type == t) for t in types])
    # One price per type; pools of the same type share it, take the highest to be conservative.
    prices = np.array([max(p.price for p in pools if p.gpu_type == t) for t in types])
    # The throughputs the policy used (measured or estimated ones too), else the declared ones.
    throughput = throughput_view.effective(job)
    row = np.array([_num(throughput.get(t)) for t in types])
    demand = float(int(spec.get("replicas", 1)) * gpus_per_pod(job))
    utility = spec.get("utility") or {}
    kind = UTILITY_KINDS.get(str(utility.get("kind", "log")), "log")
    out = []
    for j, gpu_type in enumerate(types):
        if row[j] <= 0:
            out.append(Alternative(gpu_type, prices[j], 0.0, 0.0, "no throughput on this type"))
            continue
        if demand > capacity[j]:
            note = f"needs {demand:g} GPUs, pool has {capacity[j]:g}"
            out.append(Alternative(gpu_type, prices[j], 0.0, 0.0, note))
            continue
        # A one-type problem is the job's row masked to type j: no other type is on offer.
        try:
            problem = pricing.PricingProblem(
                throughput=np.array([[row[j]]]),
                capacity=np.array([capacity[j]]),
                demand=np.array([demand]),
                kind=kind,
                weight=np.array([_num(utility.get("weight"), 1.0)]),
                target=np.array([_num(utility.get("target"), 0.0)]),
                alpha=_num(utility.get("alpha"), 2.0),
            )
            x = float(pricing.best_response(problem, prices[j : j + 1])[0, 0])
        except InvalidProblem as exc:
            out.append(Alternative(gpu_type, prices[j], 0.0, 0.0, str(exc)))
            continue
        out.append(Alternative(gpu_type, float(prices[j]), x, float(row[j] * x)))
    return tuple(out)


def explain(job: Obj, pools: Iterable[Obj]) -> Explanation:
    """Everything ``walras explain`` prints, computed from API objects (no I/O)."""
    from walras.cli import throughput_view

    meta, spec, status = job.get("metadata", {}), job.get("spec", {}), job.get("status") or {}
    views = pool_views(pools)
    phase = str(status.get("phase") or "Pending")
    reason, message = pending_reason(job) if phase == "Pending" else ("", "")
    conditions = tuple(
        (
            str(c.get("type", "")),
            str(c.get("status", "")),
            str(c.get("reason", "")),
            str(c.get("message", "")),
        )
        for c in status.get("conditions") or []
    )
    allocation = tuple(
        (
            str(a.get("gpuType", "")),
            _num(a.get("fraction")),
            ",".join(a.get("nodes") or []) if isinstance(a.get("nodes"), list) else "",
        )
        for a in status.get("allocation") or []
    )
    fair = status.get("fairShare")
    reclaimed = next(
        (m for t, st, r, m in conditions if t == "Preempted" and st == "True" and r == "Reclaimed"),
        "",
    )
    return Explanation(
        job=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        # The operator's word on the tenant (from the Tenants' namespaces) before the spec's.
        tenant=str(status.get("tenant") or spec.get("tenant") or meta.get("namespace", "")),
        phase=phase,
        reason=reason,
        message=message,
        conditions=conditions,
        allocation=allocation,
        expected_throughput=_num(status.get("expectedThroughput")),
        price=_num(status.get("price")),
        fair_share=None if fair is None else _num(fair),
        alternatives=alternatives(job, views) if views else (),
        pools=views,
        throughputs=throughput_view.rows(job),
        restarts=restart_summary(status),
        reclaimed=reclaimed,
    )


def top_pending_reasons(jobs: Iterable[Obj], limit: int = 5) -> list[tuple[str, int]]:
    """Most common reasons among non-running jobs; ties broken by reason name (stable)."""
    counts = collections.Counter(
        pending_reason(j)[0] or "Unknown"
        for j in jobs
        if (j.get("status") or {}).get("phase", "Pending") == "Pending"
    )
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


# ----------------------------------------------------------------------------- rendering


def pools_table(pools: Sequence[PoolView], title: str = "Resource pools") -> Table:
    from rich.table import Table

    table = Table(title=title)
    for column in ("Pool", "GPU type", "Nodes", "Capacity", "Allocated", "Price", "Utilisation"):
        table.add_column(column, justify="left" if column in ("Pool", "GPU type") else "right")
    for p in pools:
        table.add_row(
            p.name,
            p.gpu_type,
            str(p.nodes),
            f"{p.capacity:g}",
            f"{p.allocated:.2f}",
            f"{p.price:.4g}",
            f"{p.utilisation:.0%}",
        )
    return table


def tenants_table(rows: Sequence[TenantRow], title: str = "Tenants (GPUs)") -> Table:
    from rich.table import Table

    table = Table(title=title)
    names = ("Tenant", "Parent", "GPU type", "Guaranteed", "In use", "Borrowed", "Lent", "Maximum")
    for column in names:
        table.add_column(column, justify="left" if column in names[:3] else "right")
    for r in rows:
        if not r.gpu_type:
            table.add_row(r.tenant, r.parent or "-", "-", "-", "-", "-", "-", "-")
            continue
        top = "-" if r.maximum is None else f"{r.maximum:g}"
        table.add_row(
            r.tenant,
            r.parent or "-",
            r.gpu_type,
            f"{r.guaranteed:g}",
            f"{r.in_use:g}",
            f"{r.borrowed:g}",
            f"{r.lent:g}",
            top,
        )
    return table


def render_explanation(console: Console, e: Explanation) -> None:
    from rich.table import Table

    from walras.cli import throughput_view

    console.print(f"[bold]{e.job}[/bold]  tenant={e.tenant}  phase={e.phase}")
    if e.reclaimed:
        console.print(f"Stopped: [yellow]Reclaimed[/yellow]: {e.reclaimed}")
    if e.reason:
        console.print(f"Waiting: [yellow]{e.reason}[/yellow]: {e.message}")
    if e.conditions:
        table = Table(title="Conditions")
        for column in ("Type", "Status", "Reason", "Message"):
            table.add_column(column)
        for row in e.conditions:
            table.add_row(*row)
        console.print(table)
    if e.allocation:
        table = Table(title="Current allocation")
        for column in ("GPU type", "Share", "Nodes"):
            table.add_column(column)
        for gpu_type, fraction, nodes in e.allocation:
            table.add_row(gpu_type, f"{fraction:.2f}", nodes or "-")
        console.print(table)
    share = "-" if e.fair_share is None else f"{e.fair_share:.2f}"
    console.print(
        f"Expected throughput {e.expected_throughput:.4g}/s at price {e.price:.4g}; "
        f"fair share {share}"
    )
    if e.restarts:
        console.print(f"Restarts: {e.restarts}")
    if e.throughputs:
        console.print(throughput_view.table(e.throughputs))
    console.print(pools_table(e.pools, title="Current prices"))
    if e.alternatives:
        table = Table(title="On one GPU type alone, at these prices, you would get")
        for column in ("GPU type", "Price", "Share of time", "Throughput", "Note"):
            table.add_column(column, justify="left" if column in ("GPU type", "Note") else "right")
        for a in e.alternatives:
            row = (a.gpu_type, f"{a.price:.4g}", f"{a.fraction:.3f}", f"{a.throughput:.4g}")
            table.add_row(*row, a.note)
        console.print(table)


# ----------------------------------------------------------------------------- API access


def list_pools(api: Any) -> list[Obj]:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    answer: Any = custom.list_cluster_custom_object(GROUP, VERSION, "resourcepools")
    return list(answer["items"])


def list_jobs(api: Any) -> list[Obj]:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    answer: Any = custom.list_cluster_custom_object(GROUP, VERSION, "fungiblejobs")
    items = answer["items"]
    key = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items]
    return [items[k] for k in sorted(range(len(items)), key=key.__getitem__)]


def list_tenants(api: Any) -> list[Obj] | None:
    """Every Tenant; ``[]`` when the Tenant CRD is not installed (an older chart), ``None`` when
    this kubeconfig may not list them (Tenants are cluster-scoped and admin-only)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        answer: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
            GROUP, VERSION, "tenants"
        )
    except ApiException as exc:
        if exc.status == 404:
            return []
        if exc.status == 403:
            return None
        raise
    return list(answer["items"])


@app.command("explain")
def explain_command(
    job: Annotated[str, typer.Argument(help="NAMESPACE/JOB of a FungibleJob, or `sow`.")],
    sow_name: Annotated[
        str | None, typer.Argument(help="With `sow`: NAMESPACE/NAME of a StatementOfWork.")
    ] = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Why a FungibleJob is pending or what share it has, prices, and its options per GPU type.

    ``walras explain sow NAMESPACE/NAME``: a StatementOfWork's menu, plan and failure estimate.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    if job == "sow" and sow_name is not None:
        from walras.cli import explain_sow

        explain_sow.command(sow_name, kubeconfig)
        return
    namespace, sep, name = job.partition("/")
    if not sep or not namespace or not name:
        raise typer.BadParameter("expected NAMESPACE/JOB", param_hint="JOB")
    api = kubeclient.api_client(kubeconfig)
    try:
        obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "fungiblejobs", name
        )
    except ApiException as exc:
        if exc.status == 404:
            typer.secho(f"FungibleJob {namespace}/{name} not found", err=True, fg="red")
            raise typer.Exit(1) from exc
        raise
    from rich.console import Console

    render_explanation(Console(), explain(obj, list_pools(api)))


@app.command("status")
def status_command(kubeconfig: KubeconfigOption = None) -> None:
    """Pools (capacity, allocation, price, utilisation), Tenants' GPUs per type (guaranteed, in
    use, borrowed, lent), jobs by phase, top pending reasons."""
    from rich.console import Console
    from rich.table import Table

    api = kubeclient.api_client(kubeconfig)
    console = Console()
    jobs = list_jobs(api)
    console.print(pools_table(pool_views(list_pools(api))))
    listed = list_tenants(api)
    if listed is None:
        console.print("Tenants: this kubeconfig may not list them (cluster-scoped, admin-only)")
    elif listed:
        console.print(tenants_table(tenant_rows(listed)))
    phases = collections.Counter((j.get("status") or {}).get("phase", "Pending") for j in jobs)
    summary = ", ".join(f"{phase} {count}" for phase, count in sorted(phases.items()))
    console.print(f"FungibleJobs: {len(jobs)} ({summary or 'none'})")
    reasons = top_pending_reasons(jobs)
    if reasons:
        table = Table(title="Top pending reasons")
        table.add_column("Reason")
        table.add_column("Jobs", justify="right")
        for reason, count in reasons:
            table.add_row(reason, str(count))
        console.print(table)

"""What the demo shows: one rich table of jobs and one of pools per round, and the final PNG.

Everything here reads plain API objects (dicts) as returned by the API server, so what is printed
is what ``kubectl get fjob,rpool -o yaml`` would show, not the operator's private state.

The PNG has three panels over rounds: each tenant's share of all GPUs (Σ over its jobs of
fraction × replicas × GPUs per pod, divided by the cluster's GPUs), the price of each GPU type,
and each pool's utilisation.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from walras.cli import inspect_cmd
from walras.plotting import pyplot

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class RoundRecord:
    """What one round looked like from the API."""

    round: int
    tenant_share: Mapping[str, float]  # fraction of all cluster GPUs
    price: Mapping[str, float]  # per GPU type
    utilisation: Mapping[str, float]  # per pool
    running: int
    pending: int


def job_share(job: Obj) -> float:
    """Σ of the job's allocation fractions (time share of its gang over all GPU types)."""
    return sum(
        float(a.get("fraction") or 0.0) for a in (job.get("status") or {}).get("allocation") or []
    )


def job_gpus(job: Obj) -> float:
    """GPUs the job holds on average: share × replicas × GPUs per pod."""
    replicas = int(job.get("spec", {}).get("replicas", 1))
    return job_share(job) * replicas * inspect_cmd.gpus_per_pod(job)


def round_of(pools: Sequence[Obj], jobs: Sequence[Obj]) -> int:
    """The latest round any pool or job status reports (0 before the first)."""
    rounds = [int((o.get("status") or {}).get("round") or 0) for o in (*pools, *jobs)]
    return max(rounds, default=0)


def record(round_no: int, jobs: Sequence[Obj], pools: Sequence[Obj]) -> RoundRecord:
    views = inspect_cmd.pool_views(pools)
    capacity = sum(v.capacity for v in views) or 1.0
    share: dict[str, float] = collections.defaultdict(float)
    for job in jobs:
        tenant = str(job.get("spec", {}).get("tenant") or job["metadata"]["namespace"])
        share[tenant] += job_gpus(job) / capacity
    phases = collections.Counter((j.get("status") or {}).get("phase", "Pending") for j in jobs)
    return RoundRecord(
        round=round_no,
        tenant_share=dict(sorted(share.items())),
        price={v.gpu_type: v.price for v in views},
        utilisation={v.name: v.utilisation for v in views},
        running=phases.get("Running", 0),
        pending=phases.get("Pending", 0),
    )


def jobs_table(jobs: Sequence[Obj], title: str) -> Table:
    table = Table(title=title)
    for column in (
        "Job",
        "Tenant",
        "Replicas",
        "GPU type",
        "Share",
        "Throughput",
        "Price",
        "Phase",
    ):
        table.add_column(
            column, justify="right" if column in ("Share", "Throughput", "Price") else "left"
        )
    for job in jobs:
        status = job.get("status") or {}
        allocation = status.get("allocation") or []
        types = ", ".join(
            f"{a.get('gpuType')} {float(a.get('fraction') or 0):.2f}"
            for a in sorted(allocation, key=lambda a: -float(a.get("fraction") or 0))
        )
        table.add_row(
            job["metadata"]["name"],
            str(job.get("spec", {}).get("tenant") or job["metadata"]["namespace"]),
            str(job.get("spec", {}).get("replicas", 1)),
            types or "-",
            f"{job_share(job):.2f}",
            f"{float(status.get('expectedThroughput') or 0):.3g}",
            f"{float(status.get('price') or 0):.3g}",
            str(status.get("phase") or "Pending"),
        )
    return table


def pools_table(pools: Sequence[Obj], title: str) -> Table:
    return inspect_cmd.pools_table(inspect_cmd.pool_views(pools), title=title)


def plot(history: Sequence[RoundRecord], path: Path) -> Path:
    """Shares, prices and utilisation per round as a PNG (matplotlib, Agg backend)."""
    plt = pyplot()
    rounds = [r.round for r in history]
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    panels = (
        (axes[0], "tenant_share", "share of all GPUs", "Tenant shares"),
        (axes[1], "price", "price per GPU", "Prices per GPU type"),
        (axes[2], "utilisation", "utilisation", "Pool utilisation"),
    )
    for ax, attr, ylabel, title in panels:
        keys = sorted({k for r in history for k in getattr(r, attr)})
        for key in keys:
            ax.plot(
                rounds, [getattr(r, attr).get(key, 0.0) for r in history], marker="o", label=key
            )
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if keys:
            ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("round")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

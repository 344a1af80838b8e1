"""What the demo submits: GPU nodes, ResourcePools and FungibleJobs (pure; no API calls).

Throughputs are Gavel's isolated measurements (steps/s of one job type at one scale factor on one
GPU type): the ``simulation_throughputs.json`` shipped in ``walras.data.gavel`` (MIT, see its
``LICENSE.gavel``), the same table ``walras simulate`` uses. Job ``i`` takes the ``i``-th job type
in a fixed stride through the sorted list, a gang of ``SCALES[i % len(SCALES)]`` one-GPU pods (the
table's entry for that scale factor, else scale 1), and tenant ``TENANTS[i % 3]``. The result is
deterministic for a given ``n_jobs``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU_TYPES = ("k80", "p100", "v100")
TENANTS = ("team-a", "team-b", "team-c")
# team-c pays for a bigger share: its Tenant object weighs 2 (the admin's setting; job weights
# are normalised inside each tenant, so a tenant's share does not depend on how many jobs it runs).
TENANT_WEIGHT = {"team-a": 1.0, "team-b": 1.0, "team-c": 2.0}
SCALES = (1, 1, 2, 1, 4)
NODES_PER_TYPE = 2
GPUS_PER_NODE = 4
# Walk the sorted job types with a stride coprime to their count so neighbours differ in kind.
STRIDE = 7


@dataclass(frozen=True)
class DemoJob:
    namespace: str  # = tenant
    name: str
    job_type: str
    replicas: int
    throughput: Mapping[str, float]
    weight: float


@dataclass(frozen=True)
class Workload:
    jobs: tuple[DemoJob, ...]
    nodes: tuple[tuple[str, str, int], ...]  # (node name, gpu type, GPUs)
    source: str  # where the throughputs came from, printed by the demo


def load_throughputs(
    path: Path | None = None,
) -> tuple[dict[tuple[str, int], dict[str, float]], str]:
    """{(job type, scale factor): {gpu type: steps/s}} and a one-line description of the source.

    ``path``: a table in Gavel's ``simulation_throughputs.json`` format; default the shipped one.
    """
    from walras.sim.throughputs import load_throughputs as load_table

    loaded = load_table(path)
    table: dict[tuple[str, int], dict[str, float]] = {}
    for gpu_type in GPU_TYPES:
        for key, value in loaded.values.get(gpu_type, {}).items():
            table.setdefault(key, {})[gpu_type] = float(value)
    return table, f"Gavel's throughputs ({loaded.source})"


def slug(text: str) -> str:
    """DNS-1123 label fragment: ``ResNet-18 (batch size 16)`` -> ``resnet-18-bs16``."""
    text = text.lower().replace("batch size ", "bs")
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def build(
    n_jobs: int, table: Mapping[tuple[str, int], Mapping[str, float]], source: str
) -> Workload:
    """``n_jobs`` jobs over 3 tenants and ``NODES_PER_TYPE`` nodes of each GPU type."""
    kinds = sorted({job_type for job_type, _ in table})
    jobs = []
    for i in range(n_jobs):
        job_type = kinds[(i * STRIDE) % len(kinds)]
        scale = SCALES[i % len(SCALES)]
        if (job_type, scale) not in table:
            scale = 1
        tenant = TENANTS[i % len(TENANTS)]
        row = table[(job_type, scale)]
        jobs.append(
            DemoJob(
                namespace=tenant,
                name=f"{slug(job_type)}-{i:02d}",
                job_type=job_type,
                replicas=scale,
                throughput={t: round(float(row.get(t, 0.0)), 4) for t in GPU_TYPES},
                weight=TENANT_WEIGHT[tenant],
            )
        )
    nodes = tuple(
        (f"gpu-{t}-{k}", t, GPUS_PER_NODE) for t in GPU_TYPES for k in range(NODES_PER_TYPE)
    )
    return Workload(jobs=tuple(jobs), nodes=nodes, source=source)


def pool_manifest(gpu_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "ResourcePool",
        "metadata": {"name": gpu_type},
        "spec": {"gpuType": gpu_type, "nodeSelector": {"walras.dev/gpu-type": gpu_type}},
    }


def job_manifest(job: DemoJob) -> dict[str, Any]:
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": {
            "replicas": job.replicas,
            "throughput": dict(job.throughput),
            "utility": {"kind": "log", "weight": job.weight},
            "template": {
                "metadata": {"labels": {"app": "walras-demo", "job-type": slug(job.job_type)}},
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            # Never pulled: kwok nodes fake the kubelet.
                            "image": "registry.example/walras-demo/train:latest",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                },
            },
        },
    }


def waves(
    jobs: Sequence[DemoJob], n_waves: int, rounds: int
) -> list[tuple[int, tuple[DemoJob, ...]]]:
    """Split the jobs into ``n_waves`` arrival waves: (round after which to submit, jobs).

    Wave 0 is submitted before the operator starts; wave k after round ``k · rounds / n_waves``,
    so prices can be watched rising as the cluster fills up. Jobs keep their order.
    """
    n_waves = max(1, min(n_waves, len(jobs), rounds))
    bounds = [round(k * len(jobs) / n_waves) for k in range(n_waves + 1)]
    return [
        ((k * rounds) // n_waves, tuple(jobs[bounds[k] : bounds[k + 1]])) for k in range(n_waves)
    ]


def tenant_manifest(tenant: str) -> dict[str, Any]:
    """The cluster-scoped Tenant an admin creates for one demo namespace."""
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": tenant},
        "spec": {"weight": TENANT_WEIGHT[tenant], "namespaces": [tenant]},
    }

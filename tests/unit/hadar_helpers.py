"""A minimal fixed-round loop around :func:`walras.allocator.hadar.plan_round`, for tests and
``bench/bench_hadar.py`` only (the real simulator is ``walras.sim``).

Semantics, deliberately simple: every job arrives at ``t = 0``; each round the clock advances by
``L``; a gang that is not kept pays the restart first; a gang's progress is
``rate × (L − restart if not kept)``, capped by the steps it was assigned; a job's progress is the
sum over its gangs. A job completes at the moment its last needed gang finishes its share.

Metrics:
- TTD (total time to done, the makespan): the last completion time.
- utilisation: GPU-seconds the gangs hold their GPUs (restart plus computing, at most ``L`` per
  round) over ``GPUs × TTD``.

Workloads: :func:`small_cluster` (a dozen long forkable jobs on 5 nodes × 4 GPUs) and
:func:`gavel_like` (a D5-shaped batch for the planning-time benchmark).

The HadarE acceptance case runs the PRODUCT policies instead (``walras simulate --semantics
walras``, the operator's scheduling core): :func:`paper_mix` writes the FungibleJob manifests of
the paper's mixes M-1 … M-12 on its 5-node, one-GPU-per-node cluster (:data:`PAPER_CLUSTER`), and
:func:`simulate_manifests` runs them the way the CLI does.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from walras.allocator.hadar import HadarPlan, Utility, make_inputs, plan_round

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Workload:
    """Jobs and cluster of a fixed-round run."""

    throughput: FloatArray  # (J, T)
    replicas: IntArray  # (J,)
    total_work: FloatArray  # (J,)
    node_type: IntArray  # (K,)
    node_free: IntArray  # (K,)
    forkable: npt.NDArray[np.bool_]  # (J,)
    round_seconds: float = 360.0
    restart_seconds: float = 10.0


@dataclass(frozen=True)
class RunResult:
    ttd: float
    completion: FloatArray  # (J,)
    utilisation: float
    rounds: int
    plans: tuple[HadarPlan, ...]


def run(
    work: Workload,
    *,
    fork_jobs: bool,
    utility: Utility | None = None,
    backfill: bool = False,
    max_rounds: int = 10_000,
) -> RunResult:
    """Run rounds until every job is done (or ``max_rounds``; then TTD is ``inf``)."""
    J, K = work.throughput.shape[0], work.node_type.shape[0]
    remaining = work.total_work.astype(np.float64).copy()
    completion = np.full(J, np.inf)
    current = np.zeros((J, K), dtype=np.int64)
    L, restart = work.round_seconds, work.restart_seconds
    clock = 0.0
    busy = 0.0
    plans: list[HadarPlan] = []
    for _ in range(max_rounds):
        if not (remaining > 0).any():
            break
        inputs = make_inputs(
            work.throughput,
            work.replicas,
            remaining,
            work.node_type,
            work.node_free,
            elapsed=np.full(J, clock),
            current=current,
            forkable=work.forkable,
            total_work=work.total_work,
            round_seconds=L,
            restart_seconds=restart,
            utility=utility,
        )
        plan = plan_round(inputs, fork_jobs=fork_jobs, backfill=backfill)
        plans.append(plan)
        current = np.zeros((J, K), dtype=np.int64)
        for jp in plan.jobs:
            j = jp.job
            done_at = 0.0
            progress = 0.0
            for g in jp.gangs:
                start = 0.0 if g.kept else restart
                work_c = min(g.steps, g.rate * (L - start), remaining[j] - progress)
                work_c = max(work_c, 0.0)
                seconds = start + work_c / g.rate
                progress += work_c
                done_at = max(done_at, seconds)
                busy += sum(p for _, p in g.nodes) * seconds
            remaining[j] -= progress
            if remaining[j] <= 1e-9 * work.total_work[j]:
                remaining[j] = 0.0
                completion[j] = clock + done_at
            else:
                for k, pods in jp.placement:
                    current[j, k] = pods
        clock += L
    ttd = float(completion.max())
    gpus = float(work.node_free.sum())
    util = busy / (gpus * ttd) if np.isfinite(ttd) and ttd > 0 else 0.0
    return RunResult(ttd, completion, util, len(plans), tuple(plans))


def small_cluster(seed: int = 0) -> Workload:
    """5 nodes of 4 GPUs (V100, P100, P100, K80, K80) and 12 forkable single-GPU jobs.

    Like the paper's 5-node physical clusters, the cluster has more GPUs (20) than jobs (12), so
    Hadar, one gang per job, leaves GPUs idle that HadarE's copies can use. Speeds per type follow
    the usual ordering (V100 fastest: P100 at 0.4–0.7 and K80 at 0.15–0.4 of it, per job); each
    job needs 2–8 hours alone on a V100, long against 6-minute rounds.
    """
    rng = np.random.default_rng(seed)
    J = 12
    v100 = rng.uniform(1.0, 3.0, J)
    throughput = np.stack(
        [v100, v100 * rng.uniform(0.4, 0.7, J), v100 * rng.uniform(0.15, 0.4, J)], axis=1
    )
    hours = rng.uniform(2.0, 8.0, J)
    return Workload(
        throughput=throughput,
        replicas=np.ones(J, dtype=np.int64),
        total_work=hours * 3600.0 * v100,
        node_type=np.array([0, 1, 1, 2, 2]),
        node_free=np.full(5, 4, dtype=np.int64),
        forkable=np.ones(J, dtype=bool),
    )


def gavel_like(n_jobs: int = 480, seed: int = 0) -> Workload:
    """A 480-job batch on 15 nodes × 4 GPUs (20 V100, 20 P100, 20 K80), shaped like case D5.

    Synthetic (seeded), not the Gavel trace: gang sizes 1/2/4/8 in the trace's proportions
    (312/57/82/29 of 480), whole-gang speeds V100 > P100 > K80 with per-job ratios, and 0.2–20
    V100-hours of work per job (log-uniform). Nothing is forkable.
    """
    rng = np.random.default_rng(seed)
    gangs = rng.choice(np.array([1, 2, 4, 8]), n_jobs, p=np.array([312, 57, 82, 29]) / 480)
    v100 = rng.uniform(1.0, 10.0, n_jobs) * gangs
    throughput = np.stack(
        [v100, v100 * rng.uniform(0.3, 0.8, n_jobs), v100 * rng.uniform(0.1, 0.5, n_jobs)], axis=1
    )
    hours = np.exp(rng.uniform(np.log(0.2), np.log(20.0), n_jobs))
    return Workload(
        throughput=throughput,
        replicas=gangs.astype(np.int64),
        total_work=hours * 3600.0 * v100,
        node_type=np.repeat(np.arange(3), 5),
        node_free=np.full(15, 4, dtype=np.int64),
        forkable=np.zeros(n_jobs, dtype=bool),
    )


PAPER_CLUSTER = "v100=1,p100=2,k80=2"
"""The Hadar paper's §VI AWS cluster in Gavel's GPU types: five nodes of ONE GPU each, one V100, two
K80 and two T4. Gavel's throughput table has no T4; the P100 stands in for it (the nearest type
in the table: a 16 GB data-centre card between the K80 and the V100 in training speed)."""

PAPER_GPUS_PER_NODE = "1"


def gavel_single_gpu_types() -> dict[str, dict[str, float]]:
    """Gavel's job types at scale factor 1: ``{job type: {gpu type: steps/s}}`` (sorted)."""
    from walras.sim.throughputs import load_throughputs

    values = load_throughputs().values
    jobs = sorted(job for job, scale in values["v100"] if scale == 1)
    return {job: {t: float(values[t][(job, 1)]) for t in ("v100", "p100", "k80")} for job in jobs}


def paper_mix(n_jobs: int, seed: int = 0) -> list[dict[str, Any]]:
    """FungibleJob manifests of mix M-``n_jobs`` (the Hadar paper's §VI: mixes of 1 to 12 jobs).

    The mixes are nested like the paper's (M-k is the first k jobs of one seeded sequence of 12):
    each job is a Gavel job type drawn uniformly from the single-GPU types, with Gavel's
    throughputs, and needs 2–8 hours on one V100 (uniform), long against 6-minute rounds. All are
    forkable, single-GPU and arrive at t = 0.
    """
    table = gavel_single_gpu_types()
    names = list(table)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), 12)
    hours = rng.uniform(2.0, 8.0, 12)
    docs: list[dict[str, Any]] = []
    for i in range(n_jobs):
        job = names[int(picks[i])]
        thr = table[job]
        docs.append(
            {
                "apiVersion": "walras.dev/v1alpha1",
                "kind": "FungibleJob",
                "metadata": {
                    "name": f"m{n_jobs}-job-{i:02d}",
                    "namespace": "research",
                    "annotations": {"walras.dev/job-type": job},
                },
                "spec": {
                    "forkable": True,
                    "replicas": 1,
                    "totalWork": round(float(hours[i]) * 3600.0 * thr["v100"], 1),
                    "throughput": {t: round(v, 4) for t, v in sorted(thr.items())},
                    "template": {
                        "spec": {
                            "containers": [{"name": "train", "image": "registry.example/train:1"}]
                        }
                    },
                },
            }
        )
    return docs


def simulate_manifests(
    docs: Sequence[Mapping[str, Any]] | pathlib.Path,
    policy: str,
    *,
    cluster: str = PAPER_CLUSTER,
    gpus_per_node: str = PAPER_GPUS_PER_NODE,
    restart_seconds: float = 10.0,
    round_seconds: float = 360.0,
) -> dict[str, Any]:
    """``walras simulate FILE --semantics walras --policy POLICY --json``, by the CLI's own path
    (:func:`walras.sim.manifests.load_manifests`, then :func:`walras.sim.engine.run` with the
    registered policy); returns the summary dict."""
    import types as _types

    from walras.sim import engine, manifests
    from walras.sim.cluster import build_cluster, parse_cluster, parse_gpus_per_node
    from walras.sim.config import SimConfig

    counts = parse_cluster(cluster)
    built = build_cluster(counts, parse_gpus_per_node(gpus_per_node, [t for t in counts]))
    config = SimConfig(round_s=round_seconds, restart_s=restart_seconds, semantics="walras")
    policy_ns: Any = _types.SimpleNamespace(name=policy)
    if isinstance(docs, pathlib.Path):
        workload = manifests.load_manifests(docs, built)
        return engine.run(workload, built, policy_ns, config).summary()
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "mix.yaml"
        path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
        workload = manifests.load_manifests(path, built)
        return engine.run(workload, built, policy_ns, config).summary()

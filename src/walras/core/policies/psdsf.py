"""``psdsf``: per-server dominant-share fairness over nodes, time-shared (TDM).

The argument ``mode`` (:class:`PsdsfArgs`; ``--policy-arg psdsf.mode=rdm``) picks the mode:
``"tdm"`` (default, nodes time-shared) or ``"rdm"`` (resources divisible inside a node; Theorem 1
instead of Theorem 2).
For ``psdsf-distributed`` it must match the agents' own ``--mode`` (it says how to read their
tasks).
Groups are nodes. ``walras.allocator.fairness`` (in that mode) on the tenant model of
``walras.core.tenants.tenant_model`` (throughputs normalised per job) gives tasks ``x_{n,i}`` in
work units, i.e. tenant ``n``'s fraction ``y_{n,i} = x_{n,i} / γ_{n,i}`` of node ``i``'s time.
``walras.allocator.fairness.handout`` turns those into per-job targets: first each tenant's time
on a node goes to its own jobs that can run there (equal time, each job's fastest GPU type
first), then whatever no tenant's jobs took goes to any job that can still use it, so that no
GPU idles in the long run while a job that can use it waits (Theorem 2's condition, per job; the
tenant-level solution keeps its certificate). A gang must fit on one node (its placement group).
The policy asks the realiser to backfill (``work_conserving``): GPUs a round leaves free (a job
served elsewhere this round) go to waiting jobs that can use them, so the condition also holds
round by round.

``psdsf-distributed`` (``walras.core.policies.psdsf_distributed``) is the same model with the
tasks read from the node agents' converged NodeAllocations instead of solved here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from walras.core import governance, model, snapshot, tenants
from walras.core.policies.args import PolicyArgs
from walras.core.policies.base import (
    DistributedReader,
    Handle,
    JobIssue,
    PolicyUnavailableError,
    Solution,
    SolutionMemo,
    align_tasks,
    empty_solution,
    inputs_key,
    with_seconds,
)
from walras.core.policies.eligibility import Capacity, usable_types
from walras.core.policies.registry import register


@dataclass(frozen=True, slots=True)
class PsdsfArgs(PolicyArgs):
    """Arguments of ``psdsf`` and ``psdsf-distributed``."""

    mode: Literal["tdm", "rdm"] = field(
        default="tdm",
        metadata={"description": "tdm: nodes time-shared; rdm: resources divisible in a node"},
    )


@register(
    "psdsf",
    summary="fair multi-resource shares per node, time-shared (PS-DSF)",
    args=PsdsfArgs,
)
class PSDSF:
    """PS-DSF solved centrally each round."""

    name = "psdsf"
    distributed = False
    # Work conservation is part of PS-DSF's guarantee (Theorem 2): the cycle turns on the
    # realiser's backfill for this policy (walras.core.cycle).
    work_conserving = True
    reports_gap = False

    def __init__(self, args: PsdsfArgs, handle: Handle) -> None:
        self.reader: DistributedReader | None = handle.distributed_reader
        self.mode: Literal["tdm", "rdm"] = args.mode
        self._memo = SolutionMemo()

    def warm_up(self) -> None:
        from walras.allocator import fairness
        from walras.allocator.fairness import handout

        del fairness, handout

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        """The PS-DSF solution; the last one while its inputs are unchanged. The solve reads no
        progress: the active jobs, their tenants and quotas, the cluster (``inputs_key``) and the
        pools the tenant model maps nodes with. The distributed variant always reads the agents'
        latest tasks."""
        start = time.perf_counter()
        key: tuple[object, ...] | None = None
        if not self.distributed:
            pools = tuple((p.name, p.generation, p.defect) for p in snap.pools)
            key = (inputs_key(snap, view), pools)
            cached = self._memo.get(key, snap)
            if cached is not None:
                return cached
        sol = with_seconds(self._solve(snap, view), time.perf_counter() - start)
        if key is not None:
            self._memo.put(key, sol)
        return sol

    def _solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        from walras.allocator import fairness
        from walras.allocator.fairness import handout

        issues: list[JobIssue] = []
        fits: dict[model.JobKey, npt.NDArray[np.bool_]] = {}
        jobs: list[model.JobSpec] = []
        capacity = Capacity.of(view)
        free = capacity.free  # GPUs per node not held by foreign pods (read-only)
        for job in snap.active_jobs:
            _, issue = usable_types(job, view, capacity)
            if issue is not None and issue.reason != "GangTooLarge":
                issues.append(issue)
                continue
            # GPUs and the nodeSelector only: the tenant model (walras.core.tenants), which the
            # node agents share, decides eligibility the same way. The realiser still applies
            # every filter (taints, affinity, cpu/memory fit) when it places the pods.
            row = capacity.gang_nodes(job)
            if not row.any():
                issues.append(
                    JobIssue(
                        job.key,
                        "spec.replicas",
                        "GangTooLarge",
                        f"under PS-DSF a gang runs on one node; {job.replicas} pods do not fit "
                        f"on any single node it can use (largest has {int(free.max(initial=0))} "
                        "free GPUs)",
                    )
                )
                continue
            fits[job.key] = row
            jobs.append(job)
        tm = tenants.tenant_model(jobs, view.nodes, snap.pools, snap.tenants)
        K = len(view.nodes)
        gpp = np.array(
            [job.gpus_per_pod(view.node_pool[0].resource_name) if K else 1 for job in jobs],
            dtype=np.int64,
        )
        groups = tuple(n.name for n in view.nodes)
        group_type = tuple(view.gpu_types[g] for g in view.node_type)
        if not jobs or K == 0:
            return empty_solution(self.name, view, jobs, issues, gpp, by_node=True)
        iterations, converged = 0, True
        problem = tenants.fairness_problem(tm)
        if self.distributed:
            if self.reader is None:
                raise PolicyUnavailableError(
                    "psdsf-distributed requires the node agents (walras agent) and a reader of "
                    "their NodeAllocations; none is configured"
                )
            tasks = align_tasks(tm, *self.reader())
        else:
            limits = _quotas(tm, jobs, fits, gpp, view, snap)
            if limits is None:
                result = fairness.solve(problem, mode=self.mode)
                tasks = np.asarray(result.tasks, dtype=np.float64)
            else:
                from walras.allocator.fairness import quota_nodes

                quota = quota_nodes.solve(problem, view.node_type, *limits, mode=self.mode)
                result, tasks = quota.result, quota.tasks
            iterations, converged = int(result.sweeps), bool(result.converged)
        gamma = fairness.monopoly_tasks(problem)
        with np.errstate(divide="ignore", invalid="ignore"):
            tenant_time = np.where(gamma > 0, tasks / gamma, 0.0)
            if self.mode == "rdm":
                # RDM divides resources, not time: a tenant's GPU budget on a node is the share
                # of its GPUs the tenant's pods hold (x / throughput pods × GPUs per pod, column
                # 0 of the tenant model), at most its time share x/γ and summing to ≤ 1 by
                # RDM's capacity constraint on GPUs (x/γ need not).
                tput = problem.throughput if problem.throughput is not None else np.ones_like(tasks)
                pods = np.where(tput > 0, tasks / np.where(tput > 0, tput, 1.0), 0.0)
                gpus = problem.capacity[None, :, 0]
                tenant_time = np.where(gpus > 0, pods * problem.demand[:, :1] / gpus, 0.0)
        t_index = {t: n for n, t in enumerate(tm.tenants)}
        owner = {key: t_index[t] for t, keys in tm.tenant_jobs.items() for key in keys}
        usable = np.array([fits[job.key] for job in jobs], dtype=bool).reshape(len(jobs), K)
        raw = np.array(
            [[job.throughput.get(t, 0.0) for t in group_type] for job in jobs], dtype=np.float64
        ).reshape(len(jobs), K)
        handed = handout.hand_out(
            tenant_time,
            np.array([owner[job.key] for job in jobs], dtype=np.int64),
            usable,
            np.array([job.replicas for job in jobs], dtype=np.float64) * gpp,
            free,
            preference=raw,
        )
        targets = handed.targets
        totals = tasks.sum(axis=1)
        return Solution(
            policy=self.name,
            groups=groups,
            group_type=group_type,
            node_group=np.arange(K, dtype=np.int64),
            jobs=tuple(jobs),
            targets=targets,
            gpus_per_pod=gpp,
            prices={},
            expected_throughput=(targets * raw).sum(axis=1),
            tenant_tasks={t: float(totals[t_index[t]]) for t in tm.tenants},
            alternatives={},
            issues=tuple(issues),
            iterations=iterations,
            converged=converged,
        )


def _quotas(
    tm: tenants.TenantModel,
    jobs: list[model.JobSpec],
    fits: dict[model.JobKey, npt.NDArray[np.bool_]],
    gpp: npt.NDArray[np.int64],
    view: snapshot.ClusterView,
    snap: snapshot.Snapshot,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """``(carve, maximum)`` per tenant of the model and GPU type, or ``None`` without quotas.

    ``carve = min(G, f)``: ``f`` the GPUs (replicas × GPUs per pod) of the tenant's jobs whose
    gang fits on some node of the type and in ``G``. A tenant's own quotas; those of its
    ancestors are kept by the realiser's maximums (``walras.core.realise``)."""
    types = view.gpu_types
    carve = np.zeros((len(tm.tenants), len(types)))
    maximum = np.full((len(tm.tenants), len(types)), np.inf)
    by_key = {job.key: r for r, job in enumerate(jobs)}
    for n, tenant in enumerate(tm.tenants):
        q = governance.config(tenant, snap.tenants).quotas
        for g, gpu_type in enumerate(types):
            limit = q.get(gpu_type)
            if limit is None:
                continue
            if limit.maximum is not None:
                maximum[n, g] = limit.maximum
            if limit.guaranteed:
                on = view.node_type == g
                gangs = [
                    float(jobs[by_key[k]].replicas * gpp[by_key[k]])
                    for k in tm.tenant_jobs[tenant]
                    if k in by_key and bool(fits[k][on].any())
                ]
                f = sum(x for x in gangs if x <= limit.guaranteed)
                carve[n, g] = min(limit.guaranteed, f)
    if not (carve > 0).any() and not np.isfinite(maximum).any():
        return None
    return carve, maximum

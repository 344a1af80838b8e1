"""``hadar`` and ``hadare``: online primal–dual scheduling, and job forking (Sultana et al. 2024).

Unlike the fraction policies, Hadar decides each round's placements itself
(``walras.allocator.hadar.plan_round``): per GPU type a price exponential in the GPUs taken, a job's
payoff = its utility at the projected finish − the price of its GPUs, positive-payoff jobs admitted
so that the total payoff is maximal. ``hadare`` adds HadarE's copies: a forkable job
(``spec.forkable: true``) runs one gang per node with room, and its work is split across them. The
solution carries those placements (``Solution.placements``), which ``walras.core.placements`` turns
into pods.

Configuration of ``hadar`` (chosen for batches such as Gavel's D5):
``Hyperbolic`` utility (one time scale for all jobs: shortest projected completion first), the
makespan horizon (``walras.allocator.hadar.horizon``: types from the fluid makespan LP, critical
long jobs first), rounds re-planned (``preempt``: a running job keeps its nodes when it is
chosen again, else it is preempted; restart-aware: keeping its GPUs is credited the restart it
saves), idle GPUs backfilled (its figures on D5:
docs/evaluation.md#the-operators-scheduling-core-on-d5).

``hadare`` keeps the paper's incremental rounds and effective-throughput utility (running jobs keep
their GPUs unless a move gains more than the restart) and adds the makespan horizon in its forking
form (``walras.allocator.hadar.horizon``: forked jobs' copies may run on several types at once, so
the LP has no one-type-at-a-time row for them; the LP's support decides which types a job is
admitted on and where its copies go first, copies then fill every idle node). Its figures on the
cases of ``docs/forking.md``: docs/evaluation.md#hadare-against-hadar-on-small-clusters.

Both re-plan when a job arrives, finishes or changes, when the cluster or their pods change, and
at least every :data:`REPLAN_ROUNDS` rounds (HadarE twice that); the cycle reuses the last plan
in between (``Hadar.plan_key``, ``walras.core.cycle.solve``).

Inputs from the snapshot: ``throughput[j, t]`` = ``spec.throughput[t]`` (0 where the gang cannot
run), ``replicas`` = gang size (one GPU per pod), ``remaining`` = ``totalWork − work done``
(required: a job without ``totalWork`` gets a ``TotalWorkRequired`` issue), ``elapsed`` = now −
arrival, ``node_free`` = each usable node's GPUs minus foreign use (Walras's own pods included:
Hadar decides afresh who keeps them), ``current`` = the job's alive pods per node.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from walras.core import crd, governance, model, snapshot
from walras.core.policies.args import PolicyArgs
from walras.core.policies.base import (
    Handle,
    JobIssue,
    Solution,
    empty_solution,
    inputs_key,
    with_seconds,
)
from walras.core.policies.eligibility import (
    Capacity,
    total_work_required,
    usable_throughput,
    usable_types,
)
from walras.core.policies.registry import register

if TYPE_CHECKING:
    from walras.allocator import hadar as hadar_alloc
    from walras.allocator import quotas

REPLAN_ROUNDS = 4
"""Hadar re-plans at least once in this many rounds when no job arrives or finishes (``plan_key``):
re-planning every round cost 0.04 s of CPU per round on D5 and mostly moved gangs back and forth.
HadarE, whose rounds keep running gangs anyway, re-plans every ``2 × REPLAN_ROUNDS``."""

DP_MAX_CELLS = 500_000
"""The exact queue DP while ``queue × pooled states`` stays below this, the greedy rule above.
Every round re-plans the whole queue here, so D5's 480 jobs × 9,261 states (about 1 s of CPU per
round for the DP) would cost an hour over a run; the greedy rule takes milliseconds."""


@register("hadar", summary="online primal-dual placement with exponential prices (Hadar)")
class Hadar:
    """Hadar: one gang per job, placed by payoff."""

    name = "hadar"
    fork = False
    # Shortest-first utility, re-planned rounds and backfill (module docstring).
    replan = True
    # The makespan horizon (both policies; HadarE's forking form, module docstring).
    use_horizon = True
    work_conserving = False
    reports_gap = False
    # Rounds between re-plans when nothing happens (plan_key).
    replan_rounds = REPLAN_ROUNDS

    def __init__(self, args: PolicyArgs, handle: Handle) -> None:
        del args  # Hadar takes no arguments; it plans with the shell's round and restart cost
        self.round_seconds = handle.round_seconds
        self.restart_seconds = handle.restart_seconds
        # The pods the last plan placed (job, node), sorted: plan_key compares the cluster to it.
        self._placed: tuple[tuple[model.JobKey, str], ...] | None = None

    def warm_up(self) -> None:
        from walras.allocator import hadar

        del hadar

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        start = time.perf_counter()
        sol = with_seconds(self._solve(snap, view), time.perf_counter() - start)
        self._placed = tuple(
            sorted(
                (key, node)
                for key, where in (sol.placements or {}).items()
                for node, n in where
                for _ in range(n)
            )
        )
        return sol

    def plan_key(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Hashable | None:
        """When Hadar re-plans (``walras.core.cycle.solve``): when a job arrives, finishes or
        changes, or the cluster changes (``inputs_key``); when its pods are not where its last
        plan put them (``None``: a pod failed, was deleted, or is not bound yet); and at least
        every ``replan_rounds`` rounds, since progress alone moves projected finish times,
        prices and the horizon's critical jobs. In between, every gang keeps its GPUs (Gavel's
        simulator re-solves only when jobs arrive or finish). On D5 this moved the makespan and
        average JCT by under 1% and cut restarts (docs/evaluation.md)."""
        alive = [
            p
            for p in snap.pods
            if not p.terminating and p.phase not in (crd.PHASE_FAILED, crd.PHASE_SUCCEEDED)
        ]
        if tuple(sorted((p.job_key, p.where) for p in alive)) != self._placed:
            return None
        period = math.floor(snap.taken_at / (self.replan_rounds * self.round_seconds) + 1e-9)
        return (inputs_key(snap, view), period)

    def _solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        from walras.allocator import hadar

        types = view.gpu_types
        capacity = Capacity.of(view)
        issues: list[JobIssue] = []
        rows: list[model.JobSpec] = []
        masks: list[list[bool]] = []
        first_pool = view.node_pool[:1]
        for job in snap.active_jobs:
            usable, issue = usable_types(job, view, capacity)
            if issue is None and job.total_work is None:
                issue = total_work_required(
                    job, self.name, "projects finish times from the remaining work"
                )
            if issue is None and first_pool and job.gpus_per_pod(first_pool[0].resource_name) != 1:
                issue = JobIssue(
                    job.key,
                    "spec.template.spec.containers",
                    "OneGPUPerPodRequired",
                    f"policy {self.name} places one GPU per pod; use replicas for more GPUs",
                )
            if issue is not None:
                issues.append(issue)
                continue
            rows.append(job)
            masks.append([usable.get(t, False) for t in types])
        gpp = np.ones(len(rows), dtype=np.int64)
        K = len(view.nodes)
        if not rows or not types or K == 0:
            return empty_solution(self.name, view, rows, issues, gpp)
        thr = usable_throughput(rows, masks, types)
        node_index = view.node_index
        current = np.zeros((len(rows), K), dtype=np.int64)
        pods_by_job = snap.pods_by_job()
        for r, job in enumerate(rows):
            for pod in pods_by_job.get(job.key, []):
                k = node_index.get(pod.where)
                if k is not None and not pod.terminating and pod.phase != crd.PHASE_FAILED:
                    current[r, k] += 1
        remaining = [snapshot.remaining_work(j, snap) or 0.0 for j in rows]
        elapsed = [snapshot.seconds_since_arrival(j, snap) for j in rows]
        inputs = hadar.make_inputs(
            thr,
            [j.replicas for j in rows],
            remaining,
            view.node_type,
            np.maximum(view.node_gpus - view.node_foreign, 0),
            elapsed=elapsed,
            current=current,
            forkable=[self.fork and j.forkable for j in rows],
            weight=[j.utility.weight for j in rows],
            total_work=[
                max(j.total_work or 0.0, left) for j, left in zip(rows, remaining, strict=True)
            ],
            round_seconds=self.round_seconds,
            restart_seconds=self.restart_seconds,
            utility=hadar.Hyperbolic() if self.replan else hadar.InverseSlowdown(),
        )
        plan = hadar.plan_round(
            inputs,
            fork_jobs=self.fork,
            dp_max_cells=DP_MAX_CELLS,
            backfill=self.replan,
            preempt=self.replan,
            horizon=hadar.Horizon() if self.use_horizon else None,
        )
        # Per job: its gangs as (nodes, rate, steps), and whether it was forked.
        gangs: dict[int, list[tuple[tuple[tuple[int, int], ...], float, float]]] = {
            jp.job: [(g.nodes, float(g.rate), float(g.steps)) for g in jp.gangs] for jp in plan.jobs
        }
        forked = {jp.job for jp in plan.jobs if jp.forked}
        quota = governance.quota_arrays(rows, types, snap.tenants)
        if quota is not None:
            gangs = _with_quotas(quota, gangs, inputs, thr, current, elapsed, backfill=self.replan)
        targets = np.zeros((len(rows), len(types)))
        placements: dict[model.JobKey, tuple[tuple[str, int], ...]] = {}
        rates: dict[model.JobKey, float] = {}
        forks: dict[model.JobKey, tuple[tuple[tuple[tuple[str, int], ...], float], ...]] = {}
        for j, job_gangs in sorted(gangs.items()):
            job = rows[j]
            per_node: dict[int, int] = {}
            for nodes, _, _ in job_gangs:
                for k, n in nodes:
                    per_node[k] = per_node.get(k, 0) + n
            pods = sum(per_node.values())
            for k, n in per_node.items():
                targets[j, int(view.node_type[k])] += n / max(pods, 1)
            placements[job.key] = tuple(
                (view.nodes[k].name, int(n)) for k, n in sorted(per_node.items())
            )
            rates[job.key] = float(sum(rate for _, rate, _ in job_gangs))
            if j in forked and len(job_gangs) > 1:
                forks[job.key] = tuple(
                    (tuple((view.nodes[k].name, int(n)) for k, n in nodes), steps)
                    for nodes, _, steps in job_gangs
                )
        prices = {
            t: float(p) for t, p in zip(types, plan.type_prices, strict=True) if np.isfinite(p)
        }
        return Solution(
            policy=self.name,
            groups=types,
            group_type=types,
            node_group=view.node_type.copy(),
            jobs=tuple(rows),
            targets=targets,
            gpus_per_pod=gpp,
            prices=prices,
            expected_throughput=np.array([rates.get(j.key, 0.0) for j in rows]),
            tenant_tasks={},
            alternatives={},
            issues=tuple(issues),
            placements=placements,
            rates=rates,
            forks=forks,
        )


@register("hadare", summary="Hadar with job forking: copies of forkable jobs on idle nodes")
class HadarE(Hadar):
    """HadarE: Hadar plus copies of forkable jobs (``spec.forkable: true``)."""

    name = "hadare"
    fork = True
    replan = False
    replan_rounds = 2 * REPLAN_ROUNDS


Gangs = dict[int, list[tuple[tuple[tuple[int, int], ...], float, float]]]


def _with_quotas(
    quota: quotas.Quotas,
    gangs: Gangs,
    inputs: hadar_alloc.HadarInputs,
    thr: npt.NDArray[np.float64],
    current: npt.NDArray[np.int64],
    elapsed: Sequence[float],
    *,
    backfill: bool,
) -> Gangs:
    """The plan's gangs repaired to the tenants' quotas (``walras.allocator.gang_quotas``):
    gangs over a maximum dropped, waiting jobs of tenants short of a guarantee placed on free or
    borrowed GPUs (whole gangs preempted), then free GPUs backfilled when Hadar backfills. A new
    gang runs at the job's rate on its type and gets all its remaining work."""
    from walras.allocator import gang_quotas
    from walras.allocator.hadar.find_alloc import layout

    node_type = inputs.node_type
    m = thr.shape[1]
    index: list[tuple[int, int]] = []  # (job, gang number) of each GangUse
    uses: list[gang_quotas.GangUse] = []
    for j, job_gangs in sorted(gangs.items()):
        for n, (nodes, _, _) in enumerate(job_gangs):
            counts = np.zeros(m, dtype=np.int64)
            for k, pods in nodes:
                counts[int(node_type[k])] += pods
            here = np.zeros_like(current[j])
            for k, pods in nodes:
                here[k] += pods
            index.append((j, n))
            uses.append(gang_quotas.GangUse(j, counts, kept=bool((here == current[j]).all())))
    capacity = np.bincount(node_type, weights=inputs.node_free, minlength=m).astype(np.int64)
    # Hadar's queue order: longest waiting first.
    order = sorted(range(thr.shape[0]), key=lambda j: (-float(elapsed[j]), j))
    fixed = gang_quotas.repair(
        quota,
        uses,
        inputs.replicas.astype(np.int64),
        (thr > 0) & (inputs.remaining > 0)[:, None],
        capacity,
        order=order,
        backfill=backfill,
    )
    out: Gangs = {}
    free = inputs.node_free.astype(np.int64).copy()
    for (j, n), keep in zip(index, fixed.kept, strict=True):
        if keep:
            out.setdefault(j, []).append(gangs[j][n])
            for k, pods in gangs[j][n][0]:
                free[k] -= pods
    for j, g in fixed.added:
        counts = np.zeros(m, dtype=np.int64)
        counts[g] = int(inputs.replicas[j])
        nodes = layout(counts, free, node_type, current[j] if current[j].any() else None)
        out.setdefault(j, []).append((nodes, float(thr[j, g]), float(inputs.remaining[j])))
    return out

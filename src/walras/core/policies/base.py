"""What every policy is: a name and ``solve(snapshot, view) -> Solution``.

A policy turns one frozen :class:`~walras.core.snapshot.Snapshot` (and its
:class:`~walras.core.snapshot.ClusterView`) into long-run target fractions per (job, placement
group). The realiser (``walras.core.realise``) turns those into this round's pods. Both shells run
the same policies through :func:`walras.core.cycle.plan`: the operator each round on the live
cluster, the simulator on a simulated clock and cluster.

Like kube-scheduler's plugins (``New(args, handle)``), a policy implements one small interface,
:class:`Policy`, is built from its own typed arguments (:mod:`walras.core.policies.args`) and a
:class:`Handle` onto the shell, and registers itself by name in
:mod:`walras.core.policies.registry`.
Policies may keep warm-start state between rounds (price discovery keeps the last prices); the
cycle never shares one policy object between two shells.

Jobs that a policy cannot schedule never fail the solve: they come back in ``Solution.issues``
(a :class:`JobIssue` naming the spec field), and the rest are solved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from walras.core import model, snapshot, tenants

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class PolicyUnavailableError(RuntimeError):
    """The configured policy cannot run in this deployment (e.g. no node agents)."""


@dataclass(frozen=True, slots=True)
class JobIssue:
    """Why a job was left out of the solve; becomes ``Admitted=False`` with this reason."""

    key: model.JobKey
    field: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Solution:
    """One policy result over the snapshot's solvable jobs (rows) and placement groups (columns).

    Attributes:
        groups: placement groups, GPU types (price discovery) or node names (PS-DSF).
        group_type: GPU type of each group.
        node_group: ``(K,)`` group of each node of the cluster view.
        jobs: the solved jobs, in row order (sorted by namespace/name).
        targets: ``(J, G)`` long-run fraction of time per job and group.
        gpus_per_pod: ``(J,)`` GPUs per pod of each job.
        prices: price of one GPU per GPU type (price discovery; empty for PS-DSF).
        expected_throughput: ``(J,)`` ``Σ_g targets[j, g] · throughput_j(type(g))``.
        tenant_tasks: PS-DSF tenant totals ``x_n`` (work units per second).
        alternatives: per job, ``{gpu type: fraction it would get there alone at these prices}``.
        issues: jobs left out, with the reason.
        placements: for policies that place gangs themselves (Hadar): job → ``(node, pods)``;
            ``None`` for policies whose targets the realiser turns into pods.
        rates: with ``placements``, each placed job's work per second (all its pods).
        forks: for jobs run as several copies (HadarE): one ``(nodes, steps)`` per copy, each a
            whole gang; ``placements`` then lists all their pods.
    """

    policy: str
    groups: tuple[str, ...]
    group_type: tuple[str, ...]
    node_group: IntArray
    jobs: tuple[model.JobSpec, ...]
    targets: FloatArray
    gpus_per_pod: IntArray
    prices: Mapping[str, float]
    expected_throughput: FloatArray
    tenant_tasks: Mapping[str, float]
    alternatives: Mapping[model.JobKey, Mapping[str, float]]
    issues: tuple[JobIssue, ...]
    iterations: int = 0
    gap: float = 0.0
    converged: bool = True
    seconds: float = 0.0
    timings: Mapping[str, float] = field(default_factory=dict)
    placements: Mapping[model.JobKey, tuple[tuple[str, int], ...]] | None = None
    rates: Mapping[model.JobKey, float] = field(default_factory=dict)
    forks: Mapping[model.JobKey, tuple[tuple[tuple[tuple[str, int], ...], float], ...]] = field(
        default_factory=dict
    )


# Integration point with the node agents: a reader returns the agents' converged tasks as
# ``(tasks (N, K), tenant_names, node_names)`` (``walras.kube.nodeallocations.reader`` builds one
# from the API); the policy aligns them with the tenant model of its own snapshot by name (missing
# tenants/nodes count as 0 tasks).
DistributedReader = Callable[[], tuple[Any, Sequence[str], Sequence[str]]]


@dataclass(frozen=True, slots=True)
class Handle:
    """What a policy may ask of the shell that runs it (kube-scheduler's ``framework.Handle``).

    Facts of the shell, not knobs of a policy: a policy's own knobs are its arguments
    (:mod:`walras.core.policies.args`). The operator and the simulator fill the fields they have;
    a policy reads only the ones it needs.

    Attributes:
        round_seconds: length of a round (policies that plan whole rounds: Hadar).
        restart_seconds: what a (re)started job loses (Hadar credits keeping GPUs with it).
        seed: the run's seed (Gavel's agnostic FIFO shuffles with it).
        distributed_reader: the node agents' converged tasks (``psdsf-distributed``); ``None``
            where the shell has no agents (the simulator).
    """

    round_seconds: float = 360.0
    restart_seconds: float = 10.0
    seed: int = 0
    distributed_reader: DistributedReader | None = None


class Policy(Protocol):
    """One scheduling policy (see the module docstring).

    Attributes:
        name: the registered name (an alias resolves to it).
        work_conserving: the realiser must backfill idle GPUs for this policy whatever the shell
            configured (part of PS-DSF's guarantee; :func:`walras.core.cycle.plan`).
        reports_gap: ``Solution.gap`` is a duality gap the operator exports
            (``walras_duality_gap``); policies without one leave it ``False``.
    """

    name: str
    work_conserving: bool
    reports_gap: bool

    def warm_up(self) -> None:
        """Import heavy solver modules before the first round (optional work; may do nothing)."""

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        """Target fractions for every schedulable active job of the snapshot."""


def inputs_key(snap: snapshot.Snapshot, view: snapshot.ClusterView) -> tuple[object, ...]:
    """What every policy's solve depends on besides progress: the active jobs (UID and spec
    generation, throughputs), their tenants, and the usable cluster (nodes, GPUs, foreign use
    per node, and what the filters read: labels, taints, allocatable, foreign requests)."""
    last = _LAST_JOBS_KEY[0] if _LAST_JOBS_KEY else None
    if last is not None and last[0] is snap.jobs:
        jobs_key = last[1]  # the same (immutable) job objects as the last call: the same key
    else:
        jobs_key = (
            tuple((j.uid, j.generation, j.tenant) for j in snap.active_jobs),
            # Throughputs change without a new generation: measured or estimated.
            tuple(tuple(sorted(j.throughput.items())) for j in snap.active_jobs),
        )
        _LAST_JOBS_KEY[:] = [(snap.jobs, jobs_key)]
    return (
        *jobs_key,
        tuple(sorted((name, repr(spec)) for name, spec in snap.tenants.items())),
        view.inputs_key(),
    )


# The jobs tuple of the last inputs_key and its part of the key: ``Store.freeze`` hands out the
# same tuple while no job changed, and every policy asks once per round. Holding the tuple keeps
# its id from being reused.
_LAST_JOBS_KEY: list[tuple[tuple[model.JobSpec, ...], tuple[object, ...]]] = []


class SolutionMemo:
    """The last solution and the inputs it came from, reused while the inputs stay identical.

    Most rounds see exactly the problem of the round before (no job arrived, finished or changed,
    no node came or went); re-solving it gives the same targets (up to the solver's tolerance)
    and costs the most CPU of a round. A policy computes a key from everything its solve reads
    (:func:`inputs_key` plus, e.g., weights that depend on progress) and asks the memo first. The
    reused solution carries the current snapshot's job objects (their statuses are newer).
    """

    def __init__(self) -> None:
        self._key: object = None
        self._solution: Solution | None = None

    def get(self, key: object, snap: snapshot.Snapshot) -> Solution | None:
        if self._solution is None or key != self._key:
            return None
        by_key = {j.key: j for j in snap.jobs}
        if any(j.key not in by_key for j in self._solution.jobs):
            return None
        # Iterations and gap stay those of the solve that produced it (what the metrics show);
        # ``timings["reused"]`` says no solver ran this round.
        return replace(
            self._solution,
            jobs=tuple(by_key[j.key] for j in self._solution.jobs),
            seconds=0.0,
            timings={"reused": 1.0},
        )

    def put(self, key: object, solution: Solution) -> None:
        self._key, self._solution = key, solution


def with_seconds(sol: Solution, seconds: float) -> Solution:
    """The solution with its solve time filled in."""
    return replace(sol, seconds=seconds)


def empty_solution(
    name: str,
    view: snapshot.ClusterView,
    jobs: Sequence[model.JobSpec],
    issues: Sequence[JobIssue],
    gpus_per_pod: IntArray,
    *,
    by_node: bool = False,
) -> Solution:
    """No allocation: every job gets target 0 (no job, no GPU type, or no node)."""
    if by_node:
        groups = tuple(n.name for n in view.nodes)
        group_type = tuple(view.gpu_types[g] for g in view.node_type)
        node_group = np.arange(len(view.nodes), dtype=np.int64)
        prices: dict[str, float] = {}
    else:
        groups = group_type = view.gpu_types
        node_group = view.node_type.copy()
        prices = {t: 0.0 for t in groups}
    return Solution(
        policy=name,
        groups=groups,
        group_type=group_type,
        node_group=node_group,
        jobs=tuple(jobs),
        targets=np.zeros((len(jobs), len(groups))),
        gpus_per_pod=gpus_per_pod,
        prices=prices,
        expected_throughput=np.zeros(len(jobs)),
        tenant_tasks={},
        alternatives={},
        issues=tuple(issues),
    )


def align_tasks(
    tm: tenants.TenantModel, tasks: Any, tenant_names: Sequence[str], nodes: Sequence[str]
) -> FloatArray:
    """The agents' ``tasks`` rearranged into ``tm``'s tenant/node order (absent ones: 0)."""
    matrix = np.asarray(tasks, dtype=np.float64).reshape(len(tenant_names), len(nodes))
    out = np.zeros((len(tm.tenants), len(tm.node_names)))
    row = {t: n for n, t in enumerate(tenant_names)}
    col = {name: k for k, name in enumerate(nodes)}
    for n, tenant in enumerate(tm.tenants):
        if tenant not in row:
            continue
        for k, node in enumerate(tm.node_names):
            if node in col:
                out[n, k] = matrix[row[tenant], col[node]]
    return out

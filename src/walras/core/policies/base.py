"""Policies: one snapshot in, long-run target fractions per (job, placement group) out.

The round loop (``walras.operator.loop``) calls :meth:`Policy.solve` in a worker thread
(``asyncio.to_thread``) once per round. Three policies:

- ``price-discovery`` (default): groups are GPU types. ``walras.allocator.pricing`` maximises
  ``Σ_i u_i(a_i^T x_i)`` s.t. ``Σ_i d_i x_i ≤ R``; the targets are ``X``, the prices ``p`` are
  shown on the pools and jobs. Prices are warm-started from the previous round.
- ``psdsf``: groups are nodes. ``walras.allocator.fairness`` (TDM) on the tenant model of
  ``snapshot.tenant_model`` gives tasks ``x_{n,i}`` in work units; a tenant's pods on node ``i`` are
  ``P_{n,i} = x_{n,i} / throughput_{n,i}``, shared by its jobs that fit on ``i`` in proportion to
  their gang sizes, so job ``j`` runs on ``i`` a fraction ``P_{n,i} / Σ_{j' fits i} r_{j'}`` of the
  time (rows scaled to sum ≤ 1). A gang must fit on one node (its placement group).
- ``psdsf-distributed``: as ``psdsf``, but the tasks are the node agents' converged
  NodeAllocations (``walras.agent.distributed_tasks``), aligned by tenant and node name.

Jobs the allocator would reject never fail the solve: the operator's own checks (no pool offers a
type with throughput > 0, gang larger than every pool, nodeSelector matching no node) and
``pricing.screen_jobs`` drop them with a :class:`JobIssue`, and the rest are solved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem
from walras.operator import model, snapshot

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


# Integration point with the node agents (walras.agent): a reader returns the agents' converged
# tasks as ``(tasks (N, K), tenant_names, node_names)``, e.g.
# ``lambda: walras.agent.distributed_tasks(api_client, stale_after=30)``; the operator aligns them
# with the tenant model of its own snapshot by name (missing tenants/nodes count as 0 tasks).
DistributedReader = Callable[[], tuple[Any, Sequence[str], Sequence[str]]]


def align_tasks(
    tm: snapshot.TenantModel, tasks: Any, tenants: Sequence[str], nodes: Sequence[str]
) -> FloatArray:
    """The agents' ``tasks`` rearranged into ``tm``'s tenant/node order (absent ones: 0)."""
    matrix = np.asarray(tasks, dtype=np.float64).reshape(len(tenants), len(nodes))
    out = np.zeros((len(tm.tenants), len(tm.node_names)))
    row = {t: n for n, t in enumerate(tenants)}
    col = {name: k for k, name in enumerate(nodes)}
    for n, tenant in enumerate(tm.tenants):
        if tenant not in row:
            continue
        for k, node in enumerate(tm.node_names):
            if node in col:
                out[n, k] = matrix[row[tenant], col[node]]
    return out


def _types_text(types: Sequence[str]) -> str:
    return ", ".join(types) if types else "none"


def _selector_matches(job: model.JobSpec, node: model.NodeInfo) -> bool:
    return all(node.labels.get(k) == v for k, v in job.node_selector.items())


class Capacity:
    """Per GPU type, the nodes and how many pods of a given size fit, memoised per round.

    Jobs mostly share a few (type, nodeSelector, GPUs per pod) combinations, so a round with
    thousands of jobs answers each combination once instead of scanning every node per job.
    """

    def __init__(self, view: snapshot.ClusterView) -> None:
        self.view = view
        self.free = np.maximum(view.node_gpus - view.node_foreign, 0)
        self.type_nodes = {
            t: np.flatnonzero(view.node_type == g) for g, t in enumerate(view.gpu_types)
        }
        self._memo: dict[tuple[str, tuple[tuple[str, str], ...], int], tuple[bool, int]] = {}

    def nodes_matching(self, job: model.JobSpec, gpu_type: str) -> list[int]:
        return [
            int(k)
            for k in self.type_nodes.get(gpu_type, ())
            if _selector_matches(job, self.view.nodes[k])
        ]

    def fit(self, job: model.JobSpec, gpu_type: str) -> tuple[bool, int]:
        """(some node matches the job's selector, pods of the job's size that fit at once)."""
        nodes = self.type_nodes.get(gpu_type)
        if nodes is None or nodes.size == 0:
            return False, 0
        gpp = job.gpus_per_pod(self.view.node_pool[int(nodes[0])].resource_name)
        key = (gpu_type, tuple(sorted(job.node_selector.items())), gpp)
        if key not in self._memo:
            matching = self.nodes_matching(job, gpu_type)
            pods = int((self.free[matching] // max(gpp, 1)).sum()) if matching else 0
            self._memo[key] = (bool(matching), pods)
        return self._memo[key]


def usable_types(
    job: model.JobSpec, view: snapshot.ClusterView, capacity: Capacity | None = None
) -> tuple[dict[str, bool], JobIssue | None]:
    """Per GPU type, whether the job's gang can run there; an issue if it can run nowhere."""
    capacity = capacity or Capacity(view)
    positive = [t for t, a in job.throughput.items() if a > 0]
    offered = [t for t in positive if t in view.gpu_types]
    if not offered:
        return {}, JobIssue(
            job.key,
            "spec.throughput",
            "NoPoolForThroughput",
            f"throughput > 0 only on {_types_text(positive)}; no ResourcePool offers those "
            f"types (pools offer {_types_text(view.gpu_types)})",
        )
    usable: dict[str, bool] = {}
    selector_ok = False
    for gpu_type in offered:
        matches, pods = capacity.fit(job, gpu_type)
        selector_ok = selector_ok or matches
        usable[gpu_type] = pods >= job.replicas
    if not selector_ok:
        return usable, JobIssue(
            job.key,
            "spec.template.spec.nodeSelector",
            "NoMatchingNodes",
            f"nodeSelector {dict(job.node_selector)} matches no node of {_types_text(offered)}",
        )
    if not any(usable.values()):
        sizes = ", ".join(f"{t} holds {view.max_pods_on_type(t, 1)} GPUs" for t in offered)
        return usable, JobIssue(
            job.key,
            "spec.replicas",
            "GangTooLarge",
            f"gang of {job.replicas} pods does not fit in any pool it can use ({sizes})",
        )
    return usable, None


class Policy:
    """A configured policy with its warm-start state (prices of the previous round)."""

    def __init__(
        self,
        name: str,
        *,
        eps: float = 1e-3,
        backend: str = "auto",
        max_iter: int = 100,
        distributed_reader: DistributedReader | None = None,
    ) -> None:
        if name not in ("price-discovery", "psdsf", "psdsf-distributed"):
            raise ValueError(f"unknown policy {name!r}")
        self.name = name
        self.eps = eps
        self.backend = backend
        self.max_iter = max_iter
        self.distributed_reader = distributed_reader
        self._warm: tuple[tuple[str, ...], FloatArray] | None = None

    def warm_up(self) -> None:
        """Import the solver and its backend (torch for ``auto``) before the first round, so the
        first binding after start-up does not pay for it."""
        if self.name != "price-discovery":
            from walras.allocator import fairness

            del fairness
            return
        from walras.allocator import pricing

        problem = pricing.PricingProblem(throughput=[[1.0]], capacity=[1.0])
        pricing.solve(problem, eps=self.eps, backend=self.backend)

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        """Target fractions for every schedulable active job of the snapshot."""
        start = time.perf_counter()
        if self.name == "price-discovery":
            sol = self._price_discovery(snap, view)
        else:
            sol = self._psdsf(snap, view, distributed=self.name == "psdsf-distributed")
        return _with_seconds(sol, time.perf_counter() - start)

    # ----------------------------------------------------------------- price discovery

    def _price_discovery(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        from walras.allocator import pricing

        types = view.gpu_types
        issues: list[JobIssue] = []
        rows: list[model.JobSpec] = []
        masks: list[list[bool]] = []
        capacity = Capacity(view)
        for job in snap.active_jobs:
            usable, issue = usable_types(job, view, capacity)
            if issue is not None:
                issues.append(issue)
                continue
            rows.append(job)
            masks.append([usable.get(t, False) for t in types])
        n, m = len(rows), len(types)
        resource_of_type = [
            next((p.resource_name for p in snap.pools if p.gpu_type == t), "") for t in types
        ]
        A = np.zeros((n, m))
        D = np.ones((n, m))
        for i, job in enumerate(rows):
            for g, t in enumerate(types):
                if masks[i][g]:
                    A[i, g] = job.throughput.get(t, 0.0)
                D[i, g] = job.replicas * job.gpus_per_pod(resource_of_type[g])
        kinds = [j.utility.kind for j in rows]
        weight = np.array([j.utility.weight for j in rows], dtype=np.float64)
        target = np.array([j.utility.target for j in rows], dtype=np.float64)
        alpha = np.array([j.utility.alpha for j in rows], dtype=np.float64)

        def make(a: FloatArray, d: FloatArray, sel: Sequence[int]) -> Any:
            idx = list(sel)
            return pricing.PricingProblem(
                throughput=a[idx],
                capacity=view.type_capacity.copy(),
                demand=d[idx],
                kind=[kinds[i] for i in idx],
                weight=weight[idx],
                target=target[idx],
                alpha=alpha[idx],
            )

        keep = list(range(n))
        if n and m:
            for bad in pricing.screen_jobs(make(A, D, keep)):
                job = rows[keep[bad.index]]
                issues.append(JobIssue(job.key, bad.field, "Unsolvable", bad.reason))
            dropped = {i.key for i in issues}
            keep = [i for i in keep if rows[i].key not in dropped]
        solved = [rows[i] for i in keep]
        gpp = np.array(
            [max(j.gpus_per_pod(r) for r in resource_of_type) if m else 1 for j in solved],
            dtype=np.int64,
        )
        if not solved or m == 0:
            return self._empty(snap, view, solved, issues, gpp)
        warm = None
        if self._warm is not None and self._warm[0] == types:
            warm = self._warm[1]
        while True:
            try:
                result = pricing.solve(
                    make(A, D, keep),
                    eps=self.eps,
                    max_iter=self.max_iter,
                    backend=self.backend,
                    warm_prices=warm,
                    strict=False,
                )
                break
            except InvalidProblem as exc:
                # A job the screening missed: drop it with the solver's reason, solve the rest.
                if exc.index is None or not 0 <= exc.index < len(keep) or len(keep) == 1:
                    raise
                job = rows[keep[exc.index]]
                issues.append(JobIssue(job.key, exc.field or "spec", "Unsolvable", str(exc)))
                del keep[exc.index]
        solved = [rows[i] for i in keep]
        gpp = np.array(
            [max(j.gpus_per_pod(r) for r in resource_of_type) if m else 1 for j in solved],
            dtype=np.int64,
        )
        prices = np.asarray(result.prices, dtype=np.float64)
        self._warm = (types, prices.copy())
        X = np.clip(np.asarray(result.allocation, dtype=np.float64), 0.0, 1.0)
        sums = X.sum(axis=1)
        X = np.where(sums[:, None] > 1.0, X / np.maximum(sums, 1e-300)[:, None], X)
        Ak = A[keep]
        alternatives = self._alternatives(pricing, make, A, D, keep, X, prices, solved, types)
        return Solution(
            policy=self.name,
            groups=types,
            group_type=types,
            node_group=view.node_type.copy(),
            jobs=tuple(solved),
            targets=X,
            gpus_per_pod=gpp,
            prices={t: float(prices[g]) for g, t in enumerate(types)},
            expected_throughput=(Ak * X).sum(axis=1),
            tenant_tasks={},
            alternatives=alternatives,
            issues=tuple(issues),
            iterations=int(result.iterations),
            gap=float(result.gap),
            converged=bool(result.converged),
            timings=dict(result.timings),
        )

    @staticmethod
    def _alternatives(
        pricing: Any,
        make: Callable[[FloatArray, FloatArray, Sequence[int]], Any],
        A: FloatArray,
        D: FloatArray,
        keep: Sequence[int],
        X: FloatArray,
        prices: FloatArray,
        solved: Sequence[model.JobSpec],
        types: Sequence[str],
    ) -> dict[model.JobKey, dict[str, float]]:
        """For jobs short of a full share: the fraction each type alone would give them.

        ``pricing.best_response`` at the current prices with every other type's throughput
        masked to 0 (the "on k80 you would get 0.90" of the Pending condition). ``A`` and ``D``
        are the full (pre-screening) arrays; ``keep[r]`` is solved row ``r``'s index in them.
        """
        out: dict[model.JobKey, dict[str, float]] = {}
        short = [r for r in range(len(solved)) if X[r].sum() < 0.999]
        for g, gpu_type in enumerate(types):
            rows = [r for r in short if A[keep[r], g] > 0]
            if not rows:
                continue
            masked = np.zeros_like(A)
            masked[:, g] = A[:, g]
            x = np.asarray(
                pricing.best_response(make(masked, D, [keep[r] for r in rows]), prices),
                dtype=np.float64,
            )
            for pos, r in enumerate(rows):
                out.setdefault(solved[r].key, {})[gpu_type] = float(x[pos, g])
        return out

    def _empty(
        self,
        snap: snapshot.Snapshot,
        view: snapshot.ClusterView,
        solved: Sequence[model.JobSpec],
        issues: Sequence[JobIssue],
        gpp: IntArray,
    ) -> Solution:
        groups = view.gpu_types
        return Solution(
            policy=self.name,
            groups=groups,
            group_type=groups,
            node_group=view.node_type.copy(),
            jobs=tuple(solved),
            targets=np.zeros((len(solved), len(groups))),
            gpus_per_pod=gpp,
            prices={t: 0.0 for t in groups},
            expected_throughput=np.zeros(len(solved)),
            tenant_tasks={},
            alternatives={},
            issues=tuple(issues),
        )

    # ----------------------------------------------------------------- PS-DSF

    def _psdsf(
        self, snap: snapshot.Snapshot, view: snapshot.ClusterView, *, distributed: bool
    ) -> Solution:
        from walras.allocator import fairness

        issues: list[JobIssue] = []
        fits: dict[model.JobKey, npt.NDArray[np.bool_]] = {}
        jobs: list[model.JobSpec] = []
        free = np.maximum(view.node_gpus - view.node_foreign, 0)
        capacity = Capacity(view)
        for job in snap.active_jobs:
            _, issue = usable_types(job, view, capacity)
            if issue is not None and issue.reason != "GangTooLarge":
                issues.append(issue)
                continue
            row = np.zeros(len(view.nodes), dtype=bool)
            for gpu_type, rate in job.throughput.items():
                if rate <= 0 or gpu_type not in capacity.type_nodes:
                    continue
                ks = capacity.type_nodes[gpu_type]
                if job.node_selector:
                    ks = np.array(capacity.nodes_matching(job, gpu_type), dtype=np.int64)
                if ks.size == 0:
                    continue
                per_pod = job.gpus_per_pod(view.node_pool[int(ks[0])].resource_name)
                row[ks] = job.replicas * per_pod <= free[ks]
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
        tm = snapshot.tenant_model(jobs, view.nodes, snap.pools)
        K = len(view.nodes)
        gpp = np.array(
            [job.gpus_per_pod(view.node_pool[0].resource_name) if K else 1 for job in jobs],
            dtype=np.int64,
        )
        groups = tuple(n.name for n in view.nodes)
        group_type = tuple(view.gpu_types[g] for g in view.node_type)
        if not jobs or K == 0:
            return Solution(
                policy=self.name,
                groups=groups,
                group_type=group_type,
                node_group=np.arange(K, dtype=np.int64),
                jobs=tuple(jobs),
                targets=np.zeros((len(jobs), K)),
                gpus_per_pod=gpp,
                prices={},
                expected_throughput=np.zeros(len(jobs)),
                tenant_tasks={},
                alternatives={},
                issues=tuple(issues),
            )
        iterations, converged = 0, True
        if distributed:
            if self.distributed_reader is None:
                raise PolicyUnavailableError(
                    "psdsf-distributed requires the node agents (walras agent) and a reader of "
                    "their NodeAllocations; none is configured"
                )
            tasks = align_tasks(tm, *self.distributed_reader())
        else:
            result = fairness.solve(snapshot.fairness_problem(tm), mode="tdm")
            tasks = np.asarray(result.tasks, dtype=np.float64)
            iterations, converged = int(result.sweeps), bool(result.converged)
        with np.errstate(divide="ignore", invalid="ignore"):
            pods = np.where(tm.throughput > 0, tasks / tm.throughput, 0.0)
        t_index = {t: n for n, t in enumerate(tm.tenants)}
        targets = np.zeros((len(jobs), K))
        for n, tenant in enumerate(tm.tenants):
            members = [j for j, job in enumerate(jobs) if job.tenant == tenant]
            reps = np.array([jobs[j].replicas for j in members], dtype=np.float64)
            mask = np.array([fits[jobs[j].key] for j in members]).reshape(len(members), K)
            denom = (mask * reps[:, None]).sum(axis=0)
            share = np.where(denom > 0, pods[n] / np.maximum(denom, 1e-300), 0.0)
            for r, j in enumerate(members):
                targets[j] = np.where(mask[r], share, 0.0)
        sums = targets.sum(axis=1)
        targets = np.where(
            sums[:, None] > 1.0, targets / np.maximum(sums, 1e-300)[:, None], targets
        )
        speeds = np.array(
            [[job.throughput.get(t, 0.0) for t in group_type] for job in jobs], dtype=np.float64
        ).reshape(len(jobs), K)
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
            expected_throughput=(targets * speeds).sum(axis=1),
            tenant_tasks={t: float(totals[t_index[t]]) for t in tm.tenants},
            alternatives={},
            issues=tuple(issues),
            iterations=iterations,
            converged=converged,
        )


def _with_seconds(sol: Solution, seconds: float) -> Solution:
    from dataclasses import replace

    return replace(sol, seconds=seconds)

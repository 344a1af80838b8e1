"""POP for any policy whose groups are GPU types: ``k`` shards solved independently.

Written once for every registered policy (``PolicyConfig.pop_shards = k``, ``--pop-shards k``;
the registry's builder wraps the policy in :class:`Sharded`). Each round:

- jobs go to shards by a stable hash of their UID (``walras.allocator.pop.shard_of``), so a job
  keeps its shard across rounds and jobs coming and going never move it;
- shard ``s`` gets a share of every GPU type's free GPUs proportional to its jobs' GPU demand
  (the paper's 1/k when shards are balanced), in whole GPUs (``pop.split_capacity``: no
  capacity lost, ``Σ_s capacity_s = capacity``), and at least one GPU of every type when the
  type has a GPU for every shard with jobs (:func:`at_least_one`);
- each shard is an ordinary snapshot (its jobs only) and view (its capacity) solved by its own
  instance of the inner policy (its own warm start);
- each tenant's quotas are split over the shards in proportion to its GPU demand in each
  (``governance.split_quotas``): the shards' maximums add up to the tenant's, so it never holds
  more in total, and its guarantee is met shard by shard where its demand is;
- a round in which some job's gang fits the cluster but not its shard's share of any type it
  runs on is solved exactly (one more instance; ``timings["pop_exact_fallback"] = 1``): POP
  assumes jobs much smaller than a shard (POP's "granular" problems), which a few 8-GPU
  gangs on 20 GPUs per type split 4 ways are not;
- the targets are stacked (rows in namespace/name order, as every Solution). Feasible by
  construction: ``Σ_j d_j x_{j,t} = Σ_s Σ_{j∈s} d_j x_{j,t} ≤ Σ_s capacity_{s,t} = capacity_t``.

Prices are per shard; the merged solution shows their mean per type, and ``timings`` carries the
spread ``max_s p_{s,t} − min_s p_{s,t}`` (what the repair in docs/algorithms.md#pop acts on).
Policies whose groups are nodes (``psdsf``) or that place gangs themselves (``hadar``) are not
sharded here: ``walras.allocator.pop.solve_fairness`` shards PS-DSF tenants for
``walras fairshare``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from walras.core import governance, model, snapshot
from walras.core.policies.base import (
    Policy,
    PolicyUnavailableError,
    Solution,
    with_seconds,
)


class Sharded:
    """``k`` instances of an inner policy, one per shard (see the module docstring)."""

    def __init__(self, name: str, k: int, make: Callable[[], Policy]) -> None:
        if k < 2:
            raise ValueError(f"POP needs k >= 2 shards, got {k}")
        self.name = name
        self.k = k
        self._make = make
        self._shards = [make() for _ in range(k)]
        self.work_conserving = self._shards[0].work_conserving
        self.reports_gap = self._shards[0].reports_gap
        self._exact: Policy | None = None  # made on the first round a gang fits no shard
        self._of: dict[str, int] = {}

    def warm_up(self) -> None:
        self._shards[0].warm_up()

    def _shard(self, uid: str) -> int:
        if uid not in self._of:
            from walras.allocator import pop

            self._of[uid] = pop.shard_of(uid, self.k)
        return self._of[uid]

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        from walras.allocator import pop

        start = time.perf_counter()
        shard_jobs = [tuple(j for j in snap.jobs if self._shard(j.uid) == s) for s in range(self.k)]
        # Capacity in proportion to each shard's GPU demand (whole GPUs): with the paper's equal
        # 1/k split a shard of few large gangs starves while another idles (measured on Gavel's
        # max-min LP: minimum per-job ratio 0.938 equal vs 0.980 demand-weighted at k = 8).
        demand = np.array(
            [
                sum(
                    j.replicas * max(j.gpu_limits.values(), default=1) for j in js if not j.finished
                )
                for js in shard_jobs
            ],
            dtype=np.float64,
        )
        weights = demand / demand.sum() if demand.sum() > 0 else None
        parts = at_least_one(
            pop.split_capacity(
                view.type_capacity, self.k, weights=weights, integral=True, demand=demand
            ),
            demand > 0,
        )
        if any(
            fits(j, view.type_capacity, view.gpu_types) and not fits(j, parts[s], view.gpu_types)
            for s, js in enumerate(shard_jobs)
            for j in js
            if not j.finished
        ):
            # A gang larger than its shard's share of every type it runs on would wait forever
            # (price discovery drops it as Unsolvable; measured: four 8-GPU jobs on 4 × 5 GPUs
            # per type never ran). This round is solved exactly instead; shards stay as they are.
            if self._exact is None:
                self._exact = self._make()
            sol = self._exact.solve(snap, view)
            timings = {**sol.timings, "shards": float(self.k), "pop_exact_fallback": 1.0}
            return with_seconds(
                dataclasses.replace(sol, policy=self.name, timings=timings),
                time.perf_counter() - start,
            )
        results: list[Solution] = []
        shard_tenants = governance.split_quotas(shard_jobs, view.gpu_types, snap.tenants)
        for s, inner in enumerate(self._shards):
            jobs = shard_jobs[s]
            sub_snap = dataclasses.replace(snap, jobs=jobs, tenants=shard_tenants[s])
            sub_view = dataclasses.replace(view, type_capacity=np.asarray(parts[s], np.float64))
            results.append(inner.solve(sub_snap, sub_view))
        if any(r.placements is not None for r in results) or any(
            r.groups != view.gpu_types for r in results
        ):
            raise PolicyUnavailableError(
                f"policy {self.name}: POP shards split GPU types; this policy's groups are nodes "
                "or it places gangs itself"
            )
        return with_seconds(merge(self.name, results, view), time.perf_counter() - start)


def fits(job: model.JobSpec, capacity: np.ndarray, types: Sequence[str]) -> bool:
    """Whether ``job``'s whole gang fits the GPUs ``capacity`` gives one type it runs on."""
    gang = job.replicas * max(job.gpu_limits.values(), default=1)
    return any(
        capacity[g] >= gang and job.throughput.get(t, 0.0) > 0.0 for g, t in enumerate(types)
    )


def at_least_one(parts: np.ndarray, live: np.ndarray) -> np.ndarray:
    """``parts`` (shards × types, whole GPUs) with every ``live`` shard holding ≥ 1 GPU of every
    type that has at least as many GPUs as there are live shards.

    Why: a demand-weighted split rounds a small shard's share of a type down to 0 (a shard
    with 1 of 40 demanded GPUs gets ⌊20/40⌋ = 0 of a 20-GPU type), and price discovery cannot
    price a type with no capacity (``PricingProblem`` rejects it). Each missing GPU is taken
    from a shard that can spare it (an idle shard, or a live one keeping ≥ 1), so every column
    keeps its sum (the merged allocation stays feasible).
    """
    out = np.array(parts, dtype=np.float64)
    rows = np.flatnonzero(live)
    for t in range(out.shape[1]):
        if out[:, t].sum() < len(rows):
            continue  # too few GPUs of this type for every shard: left as split
        for s in rows:
            if out[s, t] < 1.0:
                # GPUs a shard can give: all of an idle shard's, all but one of a live one's.
                # They sum to Σ − live ≥ 0 with shard s at −1, so some donor has ≥ 1.
                spare = out[:, t] - live
                donor = int(np.argmax(spare))
                out[donor, t] -= 1.0
                out[s, t] += 1.0
    return out


def merge(name: str, results: Sequence[Solution], view: snapshot.ClusterView) -> Solution:
    """The shards' solutions as one (rows sorted by namespace/name)."""
    rows = [(job.key, s, r) for s, sol in enumerate(results) for r, job in enumerate(sol.jobs)]
    rows.sort()
    jobs = tuple(results[s].jobs[r] for _, s, r in rows)
    G = len(view.gpu_types)
    targets = np.array([results[s].targets[r] for _, s, r in rows]).reshape(len(rows), G)
    gpp = np.array([results[s].gpus_per_pod[r] for _, s, r in rows], dtype=np.int64)
    expected = np.array([results[s].expected_throughput[r] for _, s, r in rows])
    prices: dict[str, float] = {}
    timings: dict[str, float] = {"shards": float(len(results))}
    for t in view.gpu_types:
        values = [sol.prices[t] for sol in results if t in sol.prices and sol.jobs]
        if values:
            prices[t] = float(np.mean(values))
            timings[f"price_spread_{t}"] = float(max(values) - min(values))
    alternatives = {k: v for sol in results for k, v in sol.alternatives.items()}
    return Solution(
        policy=name,
        groups=view.gpu_types,
        group_type=view.gpu_types,
        node_group=view.node_type.copy(),
        jobs=jobs,
        targets=targets,
        gpus_per_pod=gpp,
        prices=prices,
        expected_throughput=expected,
        tenant_tasks={},
        alternatives=alternatives,
        issues=tuple(i for sol in results for i in sol.issues),
        iterations=max((sol.iterations for sol in results), default=0),
        gap=float(sum(sol.gap for sol in results)),
        converged=all(sol.converged for sol in results),
        timings=timings,
    )

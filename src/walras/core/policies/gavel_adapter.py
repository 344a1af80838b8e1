"""Gavel's baseline policies (``walras.allocator.gavel``) behind the core's policy interface.

Platform teams compare Walras with the policies they know; these are Gavel's (Narayanan et al.,
OSDI 2020), solved exactly (HiGHS LPs; FIFO as Gavel's greedy). Groups are GPU types, as for price
discovery, so the same realiser turns their time fractions into pods, in the operator and in
``walras simulate --semantics walras``. (``--semantics gavel`` calls ``walras.allocator.gavel``
directly, inside Gavel's own round mechanics.)

Inputs with Gavel's meaning, from the snapshot:

- ``throughputs[j, t]`` = the job's ``spec.throughput[t]`` (work/s of the whole gang), 0 where the
  gang cannot run on ``t`` this round (``eligibility.usable_types``);
- ``scale_factors[j]`` = replicas × GPUs per pod; ``capacity[t]`` = free GPUs of type ``t``;
- ``job_ids[j]``: a stable integer per job UID, given in order of (creation time, namespace/name)
  the first time the policy sees the job, so FIFO's queue and state survive across rounds;
- ``priority_weights[j]`` = ``spec.utility.weight``;
- ``num_steps_remaining[j]`` = ``totalWork − work done`` (``snapshot.remaining_work``); policies
  that need it give jobs without ``totalWork`` a ``TotalWorkRequired`` issue;
- ``times_since_start[j]`` = snapshot time − the job's arrival.

Tenant quotas: when a tenant present has one, the policy runs over
``walras.allocator.quotas``' columns (a carve-out per guarantee, a private column per binding
maximum; the columns are named ``TYPE@TENANT-INDEX``), each pass on a copy of the policy's
state. Gavel's objectives are not utility maximisation, so this is a heuristic for them: every
maximum holds, and every guarantee its tenant's demand allows (``quotas.fill_private``), but the
allocation is not proven the optimum of Gavel's objective with the quota rows.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from walras.allocator import quotas
from walras.allocator.errors import InvalidProblem
from walras.allocator.gavel.inputs import REFERENCE_TYPE
from walras.core import governance, model, snapshot
from walras.core.policies.args import PolicyArgs
from walras.core.policies.base import (
    FloatArray,
    Handle,
    IntArray,
    JobIssue,
    PolicyUnavailableError,
    Solution,
    SolutionMemo,
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


class GavelBaseline:
    """One Gavel policy (``gavel_name``), stateful across rounds like Gavel's policy objects."""

    name: str
    gavel_name: str
    needs_remaining: bool = False
    work_conserving = False
    reports_gap = False

    def __init__(self, args: PolicyArgs, handle: Handle) -> None:
        del args  # Gavel's policies take no arguments; the agnostic FIFO uses the run's seed
        self.seed = handle.seed
        self._policy: Any = None
        self._ids: dict[str, int] = {}
        self._memo = SolutionMemo()

    def warm_up(self) -> None:
        self._gavel_policy()

    def _gavel_policy(self) -> Any:
        if self._policy is None:
            from walras.allocator import gavel

            self._policy = gavel.make_policy(self.gavel_name, seed=self.seed)
        return self._policy

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        start = time.perf_counter()
        # Policies that read progress (remaining work, time since arrival) see new inputs every
        # round; the others only when jobs or the cluster change.
        key = None if self.needs_remaining else inputs_key(snap, view)
        cached = self._memo.get(key, snap) if key is not None else None
        if cached is not None:
            return cached
        sol = with_seconds(self._solve(snap, view), time.perf_counter() - start)
        self._memo.put(key, sol)
        return sol

    def _with_quotas(
        self,
        gavel: Any,
        quota: quotas.Quotas,
        thr: FloatArray,
        fields: dict[str, Any],
        view: snapshot.ClusterView,
    ) -> FloatArray:
        """Gavel's policy over :mod:`walras.allocator.quotas`' columns (module docstring).

        Each pass runs on a copy of the policy object as it was before the round, so state kept
        across rounds (FIFO's remembered types, finish-time fairness's isolated time) advances
        once per round, by the pass whose allocation is kept.
        """
        types = view.gpu_types
        before = self._gavel_policy()
        last: list[Any] = []
        demand = np.repeat(
            np.asarray(fields["scale_factors"], dtype=np.float64)[:, None], len(types), 1
        )

        def over_columns(cols: quotas.Columns, live: IntArray) -> FloatArray:
            names = tuple(
                types[b] if t == quotas.SHARED else f"{types[b]}@{t}"
                for b, t in zip(cols.base.tolist(), cols.tenant.tolist(), strict=True)
            )
            # The agnostic policies read the reference type's column for every type: its shared
            # column (listed first), else a private one; none: the policy says so, as without.
            reference = next(
                (n for n in names if n.split("@")[0] == REFERENCE_TYPE), REFERENCE_TYPE
            )
            rates = cols.expand(thr)[live]
            if self.name.endswith("-agnostic") and REFERENCE_TYPE in types:
                # An agnostic policy reads each job's reference-type rate from that one column for
                # every type; a job barred from it by its maximum still has its rate there (the
                # columns it may not use get nothing of it: quotas.enforce drops them).
                k = names.index(reference) if reference in names else -1
                if k >= 0:
                    own = thr[live, types.index(REFERENCE_TYPE)]
                    rates[:, k] = np.where(rates[:, k] > 0, rates[:, k], own)
            inputs = gavel.GavelInputs(
                throughputs=rates,
                capacity=cols.capacity,
                type_names=names,
                reference_type=reference,
                **{name: np.asarray(value)[live] for name, value in fields.items()},
            )
            policy = copy.deepcopy(before)
            last.append(policy)
            return np.asarray(policy.allocate(inputs), dtype=np.float64)

        out = quotas.enforce(over_columns, quota, thr, demand, view.type_capacity.copy())
        if last:
            self._policy = last[-1]
        return out.allocation

    def _job_id(self, job: model.JobSpec) -> int:
        if job.uid not in self._ids:
            self._ids[job.uid] = len(self._ids)
        return self._ids[job.uid]

    def _solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        from walras.allocator import gavel

        types = view.gpu_types
        capacity = Capacity.of(view)
        issues: list[JobIssue] = []
        rows: list[model.JobSpec] = []
        masks: list[list[bool]] = []
        remaining: list[float] = []
        for job in sorted(snap.active_jobs, key=lambda j: (j.created, j.key)):
            usable, issue = usable_types(job, view, capacity)
            left = snapshot.remaining_work(job, snap)
            if issue is None and self.needs_remaining and left is None:
                issue = total_work_required(job, self.name, "orders jobs by remaining work")
            if issue is not None:
                issues.append(issue)
                continue
            rows.append(job)
            masks.append([usable.get(t, False) for t in types])
            remaining.append(left if left is not None else 0.0)
        resources = [
            next((p.resource_name for p in snap.pools if p.gpu_type == t), "") for t in types
        ]
        # Rows back in namespace/name order, as every Solution has them.
        order = sorted(range(len(rows)), key=lambda r: rows[r].key)
        rows = [rows[r] for r in order]
        masks = [masks[r] for r in order]
        remaining = [remaining[r] for r in order]
        gpp = np.array(
            [max((j.gpus_per_pod(r) for r in resources), default=1) for j in rows],
            dtype=np.int64,
        )
        if not rows or not types:
            return empty_solution(self.name, view, rows, issues, gpp)
        thr = usable_throughput(rows, masks, types)
        since = [snapshot.seconds_since_arrival(j, snap) for j in rows]
        fields: dict[str, Any] = {
            "scale_factors": np.array([j.replicas for j in rows], dtype=np.int64) * gpp,
            "job_ids": np.array([self._job_id(j) for j in rows], dtype=np.int64),
            "priority_weights": np.array([j.utility.weight for j in rows], dtype=np.float64),
            "num_steps_remaining": np.array(remaining, dtype=np.float64),
            "times_since_start": np.array(since, dtype=np.float64),
        }
        try:
            quota = governance.quota_arrays(rows, types, snap.tenants)
            if quota is None:
                inputs = gavel.GavelInputs(
                    throughputs=thr, capacity=view.type_capacity.copy(), type_names=types, **fields
                )
                X = np.asarray(self._gavel_policy().allocate(inputs), dtype=np.float64)
            else:
                X = self._with_quotas(gavel, quota, thr, fields, view)
        except InvalidProblem as exc:
            raise PolicyUnavailableError(f"policy {self.name}: {exc}") from exc
        # Time on a type where the job makes no progress is worth nothing to it; an LP may still
        # put some there when it is indifferent (degenerate optima). Drop it so the realiser never
        # holds GPUs for a job that cannot use them.
        X = np.where(thr > 0, np.clip(X, 0.0, 1.0), 0.0)
        sums = X.sum(axis=1)
        X = np.where(sums[:, None] > 1.0, X / np.maximum(sums, 1e-300)[:, None], X)
        return Solution(
            policy=self.name,
            groups=types,
            group_type=types,
            node_group=view.node_type.copy(),
            jobs=tuple(rows),
            targets=X,
            gpus_per_pod=gpp,
            prices={},
            expected_throughput=(thr * X).sum(axis=1),
            tenant_tasks={},
            alternatives={},
            issues=tuple(issues),
        )

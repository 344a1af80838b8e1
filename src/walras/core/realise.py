"""Realise: a policy's target fractions → this round's pods to create, bind and delete.

Called by the round loop after the solve. It builds the inputs of
``walras.allocator.rounds.plan_round`` from the snapshot (history, replicas, GPUs per pod, node
groups, free GPUs per node, where each job's pods are now), then diffs the plan against the
existing Walras pods:

- a job kept on its nodes: nothing to do (no API write);
- a job placed afresh (new, moved, or coming back after its slice ended): delete its old pods,
  create ``replicas`` pods named ``<job>-r<round>-<replica>`` from its template;
- a job not placed (its slice ended): delete its pods (preemption; the workload checkpoints);
- pods of jobs that are finished, deleted (no garbage collector is assumed), impossible, or on a
  node that is gone or cordoned: delete.

No placement takes a tenant (or an ancestor) over its ``maximum`` of a GPU type: targets are
time fractions, and rounds with free GPUs would otherwise run every time-sliced job of a capped
tenant at once.

Priorities (``walras.core.priorities``): a running gang whose PriorityClass runs to completion is
kept where it is until it finishes (as a gang inside its minimum run time is kept), and such a
gang starts only where it fits inside its tenant's guarantee; inside a tenant, the plan visits
the higher class value first (``plan_round``'s ``rank``).

Every placement obeys kube-scheduler's filters (``walras.core.filters``): ``plan_round`` packs
GPUs only, so each of its placements is checked, in order (kept gangs first), against the nodes
that pass the job's filters and against the per-node use of every resource (foreign pods' and
the placements accepted so far); a placement that breaks a filter or overfills a resource is
moved to eligible nodes of the same group with room, or, when the gang fits nowhere, left out of
the round with the reason in ``JobRound.why``.

An *incremental* round (a job arrived or finished between round boundaries) keeps every running
gang as it is and only fills free GPUs, so that arrivals start at once without cutting anyone's
slice short. Pod names carry the round number, which the operator keeps above every round it ever
used, so a restarted operator never re-creates a name that still exists.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.allocator import rounds
from walras.core import (
    crd,
    filters,
    governance,
    history,
    model,
    pod_env,
    policies,
    priorities,
    snapshot,
    switching,
)
from walras.core.policies.eligibility import Capacity, job_shape


@dataclass(frozen=True, slots=True)
class PodCreate:
    """A pod to create: who, where, its group and round; its manifest is built when read.

    The operator reads each manifest once, to write it; a simulated run needs only the first pod
    of each kind of job (``walras.sim.walras_mechanics._created``), and building every manifest
    was a fourteenth of a PS-DSF run on D5.
    """

    job: model.JobSpec
    name: str
    replica: int
    node: str
    gpus: int
    group: str
    round_no: int
    build: Callable[[], Mapping[str, Any]] = field(repr=False, compare=False)

    @property
    def manifest(self) -> Mapping[str, Any]:
        """The pod's manifest (built afresh at each read: callers may change their copy)."""
        return self.build()


@dataclass(frozen=True, slots=True)
class PodDelete:
    pod: model.PodInfo
    reason: str  # SliceEnded | Rescheduled | JobFinished | JobGone | NotSchedulable | NodeGone


@dataclass(frozen=True, slots=True)
class JobRound:
    """What this round does with one solved job."""

    key: model.JobKey
    group: str  # "" when not running this round
    gpu_type: str
    node_pods: tuple[tuple[str, int], ...]  # (node, replicas on it)
    kept: bool
    preempted: bool  # it had pods that this round deletes because its slice ended
    why: str = ""  # why a job the plan placed was left out (no eligible node had room)
    bound: int = 0  # of its pods on these nodes, how many the snapshot shows bound already
    held: bool = False  # kept: started less than the minimum run time ago, or runs to completion

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.node_pods)


@dataclass(frozen=True, slots=True)
class Realisation:
    creates: tuple[PodCreate, ...]
    deletes: tuple[PodDelete, ...]
    jobs: Mapping[model.JobKey, JobRound]


def pod_name(job: str, round_no: int, replica: int) -> str:
    """Deterministic pod name ``<job>-r<round>-<replica>`` (hashed down to 253 characters)."""
    suffix = f"-r{round_no}-{replica}"
    if len(job) + len(suffix) <= 253:
        return job + suffix
    digest = hashlib.sha256(job.encode()).hexdigest()[:10]
    return job[: 253 - len(suffix) - 11] + "-" + digest + suffix


def pod_manifest(
    job: model.JobSpec,
    *,
    name: str,
    replica: int,
    node: str,
    group: str,
    gpu_type: str,
    resource_name: str,
    gpus: int,
    round_no: int,
    fraction: float,
    price: float,
) -> dict[str, Any]:
    """The pod of one replica: the job's template plus Walras's scheduler, labels, annotations."""
    # A JSON round trip is a deep copy several times faster than copy.deepcopy (plain data only).
    template = json.loads(_template_json(job))
    meta = dict(template.get("metadata") or {})
    labels = dict(meta.get("labels") or {})
    labels.update({crd.LABEL_JOB: job.name, crd.LABEL_REPLICA: str(replica)})
    annotations = dict(meta.get("annotations") or {})
    annotations.update(
        {
            crd.ANN_ROUND: str(round_no),
            crd.ANN_GPU_TYPE: gpu_type,
            crd.ANN_TIME_SLICE: f"{fraction:.3f}",
            crd.ANN_PRICE: f"{price:.4g}",
            crd.ANN_NODE: node,
            crd.ANN_GROUP: group,
        }
    )
    spec = dict(template.get("spec") or {})
    spec["schedulerName"] = crd.SCHEDULER_NAME
    # No token controller in minimal control planes, and training pods rarely need the API.
    spec.setdefault("automountServiceAccountToken", False)
    spec.pop("nodeName", None)
    containers = [dict(c) for c in spec.get("containers") or []]
    if containers and resource_name not in job.requests:
        # No container asks for the pool's GPUs: make the request explicit on the first one, so
        # accounting (ours and the kubelet's) sees it on the pod itself. A template that asks in
        # any container (or initContainer) keeps its own numbers: adding here would double them.
        first = containers[0]
        resources = dict(first.get("resources") or {})
        limits = dict(resources.get("limits") or {})
        limits[resource_name] = str(gpus)
        resources["limits"] = limits
        first["resources"] = resources
    # The pod's name and namespace for walras.workload.report_progress (walras.core.pod_env).
    if containers:
        spec["containers"] = pod_env.with_pod_identity(containers)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": crd.API_VERSION,
                    "kind": crd.JOB_KIND,
                    "name": job.name,
                    "uid": job.uid,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


_TEMPLATE_CACHE: dict[tuple[str, int], str] = {}


def _template_json(job: model.JobSpec) -> str:
    """The job's template serialised once per (uid, generation)."""
    key = (job.uid, job.generation)
    text = _TEMPLATE_CACHE.get(key)
    if text is None:
        if len(_TEMPLATE_CACHE) > 100_000:
            _TEMPLATE_CACHE.clear()
        text = json.dumps(dict(job.template))
        _TEMPLATE_CACHE[key] = text
    return text


def _alive(pod: model.PodInfo) -> bool:
    """Counts as the job's pod now: not being deleted and not failed (Succeeded still counts)."""
    return not pod.terminating and pod.phase != crd.PHASE_FAILED


def _gang_pods(job: model.JobSpec, pods: Sequence[model.PodInfo]) -> list[model.PodInfo]:
    """The pods of ``job``'s gang. A mirror's Succeeded pods are left out: they are its
    workload's record of work done (an Indexed Job's completed indexes, which its controller
    never runs again and never deletes), not replicas of the gang that runs the indexes left."""
    if not job.workload_uid:
        return list(pods)
    return [p for p in pods if p.phase != crd.PHASE_SUCCEEDED]


def realise(
    sol: policies.Solution,
    snap: snapshot.Snapshot,
    view: snapshot.ClusterView,
    histories: Mapping[model.JobKey, history.History],
    round_no: int,
    *,
    incremental: bool = False,
    hold: float = 0.0,
    backfill: bool = False,
    restart_s: float = 0.0,
    now: float | None = None,
    min_run_s: float = 0.0,
    restart_costs: Mapping[model.JobKey, float] | None = None,
) -> Realisation:
    """Plan this round and diff it against the existing pods (see the module docstring).

    ``hold``: seconds of credit a running gang gets on its current group (``plan_round``'s
    ``hold``): it is served in blocks instead of alternating between groups every round.
    ``restart_s``: a restart's cost; when positive the plan visits pairs by deficit and running
    gangs get a credit priced from it (``walras.core.switching``), on top of ``hold``.
    ``backfill``: GPUs no positive target could use go to waiting jobs that run on that group's
    GPU type (``plan_round``'s ``backfill``; the filters below still apply).
    ``min_run_s``: a running gang that was placed afresh less than this long before ``now``
    (``History.started_at``) is kept where it is, as an incremental round keeps every gang.
    ``restart_costs``: per job, its own measured restart cost (``walras.core.restarts``), which
    prices its restarts instead of ``restart_s`` (the order stays the one ``restart_s`` selects).
    """
    node_index = view.node_index
    pods_by_job = snap.pods_by_job()
    J, G = sol.targets.shape
    K = len(view.nodes)
    replicas = np.array([j.replicas for j in sol.jobs], dtype=np.int64)
    current = np.zeros((J, K), dtype=np.int64)
    # Per job row, its live pods per node index (the nonzero entries of ``current``, in order).
    on_nodes: list[dict[int, int]] = []
    for r, job in enumerate(sol.jobs):
        counts: dict[int, int] = {}
        mine = pods_by_job.get(job.key)
        if mine:  # most of a long queue has no pods: no scan, no sort
            for pod in _gang_pods(job, mine):
                k = node_index.get(pod.where)
                if _alive(pod) and k is not None:
                    counts[k] = counts.get(k, 0) + 1
            if len(counts) > 1:
                counts = dict(sorted(counts.items()))
            for k, n in counts.items():
                current[r, k] = n
        on_nodes.append(counts)
    # Built as lists and converted once (a row assignment per job cost more than its values).
    nothing = [0.0] * G
    received_rows: list[list[float]] = []
    elapsed_list: list[float] = []
    for job in sol.jobs:
        hist = histories.get(job.key)
        if hist is None:
            received_rows.append(nothing)
            elapsed_list.append(0.0)
        else:
            got = hist.received
            received_rows.append([got.get(g, 0.0) for g in sol.groups] if got else nothing)
            elapsed_list.append(hist.elapsed)
    received = np.array(received_rows, dtype=np.float64).reshape(J, G)
    elapsed = np.array(elapsed_list, dtype=np.float64).reshape(J)
    node_free = np.maximum(view.node_gpus - view.node_foreign, 0).astype(np.int64)
    targets = sol.targets.copy()
    running = current.sum(axis=1) == replicas
    frozen: list[rounds.JobPlacement] = []
    held = np.zeros(J, dtype=bool)
    classes = priorities.resolve(sol.jobs, snap.priority_classes, snap.tenants)
    complete = np.array([not c.time_sharing for c in classes], dtype=bool)
    if not incremental:
        held |= running & complete  # its class runs to completion (walras.core.priorities)
    if not incremental and min_run_s > 0 and now is not None:
        for r, job in enumerate(sol.jobs):
            hist = histories.get(job.key)
            started = hist.started_at if hist is not None else None
            held[r] |= bool(running[r]) and started is not None and now - started < min_run_s
    keep = running if incremental else held
    if keep.any():
        node_group = sol.node_group.tolist()
        for r in np.flatnonzero(keep).tolist():
            counts = on_nodes[r]
            groups = {node_group[k] for k in counts}
            if len(groups) != 1:
                held[r] = False  # a gang split over groups is not a placement to keep
                continue
            gpp = int(sol.gpus_per_pod[r])
            for k, n in counts.items():
                node_free[k] -= n * gpp
            nodes = tuple(counts.items())
            frozen.append(
                rounds.JobPlacement(job=r, group=int(groups.pop()), nodes=nodes, kept=True)
            )
            targets[r] = 0.0
        node_free = np.maximum(node_free, 0)
    if not incremental:
        # Guarantees are reclaimed this round, before the plan shares the rest (_guaranteed).
        owed_first = targets * elapsed[:, None] - received  # the plan's deficit order
        for fixed in _guaranteed(sol, snap, targets, owed_first, node_free, current, frozen):
            for k, n in fixed.nodes:
                node_free[k] -= n * int(sol.gpus_per_pod[fixed.job])
            frozen.append(fixed)
            targets[fixed.job] = 0.0
    plan_current = current.copy()
    for fixed in frozen:
        plan_current[fixed.job] = 0
    if J and K:
        how = switching.switching(restart_s, hold)
        costs = _restart_costs(sol, restart_s, restart_costs)
        plan = rounds.plan_round(
            targets=np.clip(targets, 0.0, None),
            received=received,
            elapsed=elapsed,
            replicas=replicas,
            gpus_per_pod=sol.gpus_per_pod,
            node_group=sol.node_group,
            node_free=node_free,
            current=plan_current if plan_current.any() else None,
            hold=how.hold if costs is None else switching.hold_per_job(costs, hold),
            backfill=_backfill_mask(sol, view, frozen) if backfill else None,
            order=how.order,
            hold_fit=_fit_credit(sol, targets, elapsed, restart_s if costs is None else costs, how),
            **_ranks(sol, classes),
        )
        placements = {p.job: p for p in (*plan.placements, *frozen)}
        unplaced: Sequence[int] = plan.unplaced
    else:
        placements, unplaced = {}, ()
    placements, why = _enforce_filters(
        placements,
        sol,
        view,
        targets,
        unplaced,
        _Maximums(sol, snap),
        _Completions(complete, priorities.Guarantees(sol.jobs, snap.tenants), sol),
    )

    creates: list[PodCreate] = []
    deletes: list[PodDelete] = []
    jobs: dict[model.JobKey, JobRound] = {}
    solved = {job.key for job in sol.jobs}
    known_nodes = {n.name for n in snap.nodes}

    def gone(pod: model.PodInfo, reason: str) -> PodDelete:
        # A pod bound to a node that no longer exists is never confirmed deleted by a kubelet.
        gone = bool(pod.node) and pod.node not in known_nodes
        return PodDelete(pod, "NodeGone" if gone else reason)

    for r, job in enumerate(sol.jobs):
        mine = pods_by_job.get(job.key)
        pods = [p for p in _gang_pods(job, mine) if not p.terminating] if mine else []
        pl = placements.get(r)
        if pl is None:
            preempted = False
            if pods:
                preempted = any(p.phase != crd.PHASE_SUCCEEDED for p in pods)
                deletes.extend(gone(p, "SliceEnded") for p in pods)
            jobs[job.key] = JobRound(job.key, "", "", (), False, preempted, why.get(r, ""))
            continue
        group = sol.groups[pl.group]
        gpu_type = sol.group_type[pl.group]
        node_pods = tuple((view.nodes[k].name, int(n)) for k, n in pl.nodes)
        node_names = tuple(n for n, _ in node_pods)
        if pl.kept:
            keep_nodes = set(node_names)
            deletes.extend(
                gone(p, "Rescheduled") for p in pods if not _alive(p) or p.where not in keep_nodes
            )
        else:
            deletes.extend(gone(p, "Rescheduled") for p in pods)
            try:
                creates.extend(
                    _gang(job, r, pl, sol, view, group=group, gpu_type=gpu_type, round_no=round_no)
                )
            except (TypeError, ValueError, AttributeError) as exc:
                # A template the shape checks let through but that cannot become a pod: this
                # job alone is left out (its old pods are deleted above).
                reason = f"cannot build its pods: {type(exc).__name__}: {exc}"
                jobs[job.key] = JobRound(job.key, "", "", (), False, False, reason)
                continue
        bound = (
            sum(1 for p in pods if _alive(p) and p.node and p.node in node_names) if pl.kept else 0
        )
        jobs[job.key] = JobRound(
            job.key, group, gpu_type, node_pods, pl.kept, False, "", bound, bool(held[r])
        )
    live_jobs = {j.key for j in snap.jobs if not j.finished}
    finished = {j.key for j in snap.jobs if j.finished}
    defects = {d.key for d in snap.defects}
    for key, others in pods_by_job.items():
        if key in solved:
            continue
        if key in finished:
            reason = "JobFinished"
        elif key in live_jobs or key in defects:
            reason = "NotSchedulable"
        else:
            reason = "JobGone"
        deletes.extend(gone(p, reason) for p in others if not p.terminating)
    # Pods stuck terminating on a node that is gone: only a forced delete removes them.
    deletes.extend(
        PodDelete(p, "NodeGone")
        for p in snap.pods
        if p.terminating and p.node and p.node not in known_nodes
    )
    return Realisation(creates=tuple(creates), deletes=tuple(deletes), jobs=jobs)


def _gang(
    job: model.JobSpec,
    r: int,
    pl: rounds.JobPlacement,
    sol: policies.Solution,
    view: snapshot.ClusterView,
    *,
    group: str,
    gpu_type: str,
    round_no: int,
) -> list[PodCreate]:
    """The pods of one placed gang, replica numbers in node order."""
    out: list[PodCreate] = []
    replica = 0
    gpus = int(sol.gpus_per_pod[r])
    for k, count in pl.nodes:
        node = view.nodes[k].name
        for _ in range(count):
            name = pod_name(job.name, round_no, replica)
            build = partial(
                pod_manifest,
                job,
                name=name,
                replica=replica,
                node=node,
                group=group,
                gpu_type=gpu_type,
                resource_name=view.node_pool[k].resource_name,
                gpus=gpus,
                round_no=round_no,
                fraction=float(sol.targets[r, pl.group]),
                price=float(sol.prices.get(gpu_type, 0.0)),
            )
            out.append(PodCreate(job, name, replica, node, gpus, group, round_no, build))
            replica += 1
    return out


class _NodeUse:
    """Per-node use of every resource while placements are accepted (foreign pods' first)."""

    def __init__(self, sol: policies.Solution, view: snapshot.ClusterView) -> None:
        self.sol, self.view = sol, view
        self.capacity = Capacity.of(view)
        self.used: dict[int, dict[str, float]] = {}
        # Placements taken but not yet added to their node's usage, in the order taken: most
        # nodes of a large cluster are never asked about again in the round (every kept gang is
        # taken), so each is added when its node's usage is read, in the same order (the same
        # float sums).
        self.pending: dict[int, list[tuple[model.JobSpec, int]]] = {}

    def usage(self, k: int) -> dict[str, float]:
        used = self.used.get(k)
        if used is None:
            foreign = self.view.node_foreign_use
            used = self.used[k] = dict(foreign[k]) if foreign else {}
        todo = self.pending.pop(k, None)
        if todo:
            resource = self.view.node_pool[k].resource_name
            for job, n in todo:
                filters.add_usage(used, job.pod_requests(resource), n)
        return used

    def room(self, job: model.JobSpec, k: int) -> int:
        """Pods of ``job`` node ``k`` still holds (every resource, pod count included)."""
        requests = job.pod_requests(self.view.node_pool[k].resource_name)
        return filters.max_pods(requests, self.view.nodes[k].allocatable, self.usage(k))

    def pack(
        self, job: model.JobSpec, group: int, prefer: set[int]
    ) -> list[tuple[int, int]] | None:
        """The gang on the group's eligible nodes with room (``prefer`` first, then those holding
        the most pods), or None when it does not fit."""
        fit = self.capacity.type_fit(job, self.sol.group_type[group])
        nodes = [k for k in fit.nodes.tolist() if int(self.sol.node_group[k]) == group]
        rooms = {k: self.room(job, k) for k in nodes}
        chosen, left = [], job.replicas
        for k in sorted(nodes, key=lambda k: (k not in prefer, -rooms[k], k)):
            take = min(rooms[k], left)
            if take > 0:
                chosen.append((k, take))
                left -= take
            if left == 0:
                return sorted(chosen)
        return None

    def take(self, job: model.JobSpec, nodes: Sequence[tuple[int, int]]) -> None:
        for k, n in nodes:
            self.pending.setdefault(k, []).append((job, n))


class _Maximums:
    """GPUs per (tenant, GPU type) accepted so far this round, against the tenants' maximums
    (a tenant's maximum covers its descendants: ``walras.core.governance``)."""

    def __init__(self, sol: policies.Solution, snap: snapshot.Snapshot) -> None:
        self._sol = sol
        self._tenants = snap.tenants
        self._used: dict[tuple[str, str], float] = {}
        self._chains: dict[int, list[str]] = {}
        self._configs: dict[str, governance.TenantSpec] = {}
        # No Tenant object sets a maximum (the common case): no placement is ever refused here,
        # and a job's tenant chain need not be walked at all.
        self._none = not any(
            q.maximum is not None for spec in snap.tenants.values() for q in spec.quotas.values()
        )

    def _chain(self, r: int) -> list[str]:
        if r not in self._chains:
            t = self._sol.jobs[r].tenant
            self._chains[r] = [t, *governance.ancestors(t, self._tenants)]
        return self._chains[r]

    def _config(self, t: str) -> governance.TenantSpec:
        # Looked up once per tenant and round (every placement asks it of its whole chain).
        found = self._configs.get(t)
        if found is None:
            found = self._configs[t] = governance.config(t, self._tenants)
        return found

    def _gpus(self, r: int) -> float:
        return float(self._sol.jobs[r].replicas * int(self._sol.gpus_per_pod[r]))

    def full(self, r: int, gpu_type: str) -> str:
        """Why job ``r``'s gang may not take ``gpu_type`` this round ("" if it may)."""
        if self._none:
            return ""
        for t in self._chain(r):
            q = self._config(t).quotas.get(gpu_type)
            if q is None or q.maximum is None:
                continue
            used = self._used.get((t, gpu_type), 0.0)
            if used + self._gpus(r) > q.maximum:
                return (
                    f"tenant {t} holds {used:g} of its maximum of {q.maximum:g} {gpu_type} "
                    f"GPUs this round; the gang needs {self._gpus(r):g}"
                )
        return ""

    def take(self, r: int, gpu_type: str) -> None:
        if self._none:
            return
        for t in self._chain(r):
            self._used[(t, gpu_type)] = self._used.get((t, gpu_type), 0.0) + self._gpus(r)


class _Completions:
    """Run-to-completion gangs against their tenants' guarantees (``walras.core.priorities``):
    every such gang accepted counts, and one that is not running yet starts only where it fits."""

    def __init__(
        self,
        complete: npt.NDArray[np.bool_],
        guarantees: priorities.Guarantees,
        sol: policies.Solution,
    ) -> None:
        self._complete, self._guarantees, self._sol = complete, guarantees, sol

    def _gpus(self, r: int) -> float:
        return float(self._sol.jobs[r].replicas * int(self._sol.gpus_per_pod[r]))

    def full(self, r: int, gpu_type: str, kept: bool) -> str:
        """Why job ``r``'s gang may not start on ``gpu_type`` ("" if it may, or is kept)."""
        if kept or not self._complete[r]:
            return ""
        return self._guarantees.room(r, gpu_type, self._gpus(r))

    def take(self, r: int, gpu_type: str) -> None:
        if self._complete[r]:
            self._guarantees.take(r, gpu_type, self._gpus(r))


def _ranks(sol: policies.Solution, classes: Sequence[priorities.Effective]) -> dict[str, Any]:
    """``plan_round``'s ``rank`` (class values) and ``rank_group`` (tenants), or nothing when
    every job has the same value."""
    values = [c.value for c in classes]
    if len(set(values)) < 2:
        return {}
    index: dict[str, int] = {}
    groups = [index.setdefault(job.tenant, len(index)) for job in sol.jobs]
    return {
        "rank": np.array(values, dtype=np.float64),
        "rank_group": np.array(groups, dtype=np.int64),
    }


def _guaranteed(
    sol: policies.Solution,
    snap: snapshot.Snapshot,
    targets: npt.NDArray[np.float64],
    deficit: npt.NDArray[np.float64],
    node_free: npt.NDArray[np.int64],
    current: npt.NDArray[np.int64],
    frozen: Sequence[rounds.JobPlacement],
) -> list[rounds.JobPlacement]:
    """Gangs placed first because a guarantee entitles them to run now (reclaim within a round).

    A policy with quotas gives a tenant's jobs their carve-out as targets (long-run fractions);
    the plan alone would serve a job that just arrived after the borrowers it owes, so the owner
    would wait rounds for GPUs it is guaranteed. Here, per tenant ``u`` with ``guaranteed`` of a
    type, the jobs of its subtree that can run on that type (those the policy gives time there
    first, by largest ``deficit``, the time the plan owes them there: the owner's jobs take
    turns; then the others, as the guarantee is the tenant's whatever the policy's targets) take
    whole gangs on the group of their largest target while their gang fits in what ``u`` is
    still owed (``guaranteed`` minus its gangs already fixed: the minimum-run ones). The
    borrowers' gangs are then stopped by the plan as any slice that ends (their pods deleted, the
    workload's grace period); a gang inside its minimum run time is fixed before this and keeps
    its GPUs. No gang is split: one that does not fit whole on the group's free GPUs waits.
    """
    if not any(q.guaranteed for spec in snap.tenants.values() for q in spec.quotas.values()):
        return []  # the common case, at no cost per job
    chains = {
        r: [j.tenant, *governance.ancestors(j.tenant, snap.tenants)] for r, j in enumerate(sol.jobs)
    }
    owed: dict[tuple[str, str], float] = {}
    for u in {u for chain in chains.values() for u in chain}:
        for gpu_type, q in governance.config(u, snap.tenants).quotas.items():
            if q.guaranteed:
                owed[(u, gpu_type)] = float(q.guaranteed)
    if not owed:
        return []
    gang = np.array([j.replicas for j in sol.jobs]) * sol.gpus_per_pod

    def take(r: int, gpu_type: str) -> None:
        for u in chains[r]:
            if (u, gpu_type) in owed:
                owed[(u, gpu_type)] -= float(gang[r])

    for fixed in frozen:
        take(fixed.job, sol.group_type[fixed.group])
    done = {fixed.job for fixed in frozen}
    out: list[rounds.JobPlacement] = []
    group_type = np.array(sol.group_type, dtype=object)
    free = node_free.copy()  # the caller subtracts the gangs returned from its own
    # Deepest tenants first: a child's guarantee lies inside its parent's.
    depth = {u: len(governance.ancestors(u, snap.tenants)) for u, _ in owed}
    for u, gpu_type in sorted(owed, key=lambda pair: (-depth[pair[0]], pair)):
        cols = np.flatnonzero(group_type == gpu_type)
        if cols.size == 0:
            continue
        rows = [
            r
            for r in range(len(sol.jobs))
            if r not in done
            and u in chains[r]
            and sol.jobs[r].throughput.get(gpu_type, 0.0) > 0
            and not _served_elsewhere(targets[r], group_type, gpu_type)
        ]
        # Jobs the policy gives time on the type first, by what the plan owes them there.
        rows.sort(
            key=lambda r: (
                not float(targets[r, cols].max()) > 0,
                -float(deficit[r, cols].sum()),
                r,
            )
        )
        for r in rows:
            if gang[r] > owed[(u, gpu_type)] + 1e-9:
                continue
            nodes = None
            for g in sorted(cols.tolist(), key=lambda c: (-float(targets[r, c]), c)):
                nodes = _fit_gang(
                    int(sol.jobs[r].replicas), int(sol.gpus_per_pod[r]), g, sol, free, current[r]
                )
                if nodes is not None:
                    break
            if nodes is None:
                continue
            for k, n in nodes:
                free[k] -= n * int(sol.gpus_per_pod[r])
            kept = (
                all(current[r, k] == n for k, n in nodes)
                and current[r].sum() == sol.jobs[r].replicas
            )
            out.append(rounds.JobPlacement(job=r, group=g, nodes=nodes, kept=kept))
            done.add(r)
            take(r, gpu_type)
    return out


# Time fraction: targets adding up to within this of 1 give a job all its time (solver round-off).
_SATURATED = 1e-6


def _served_elsewhere(
    target: npt.NDArray[np.float64], group_type: npt.NDArray[Any], gpu_type: str
) -> bool:
    """Whether the policy gives the job all its time (``Σ targets = 1``) with its largest share on
    another type: then it is not the guarantee's demand (as in the quota layer, which never
    forces a saturated job onto a type), and pulling it onto ``gpu_type`` would slow it down
    (a job at home on V100s run on a guaranteed K80 every round)."""
    total = float(target.sum())
    if total < 1.0 - _SATURATED:
        return False
    per_type: dict[str, float] = {}
    for c, t in enumerate(group_type.tolist()):
        per_type[t] = per_type.get(t, 0.0) + float(target[c])
    return max(per_type, key=lambda t: (per_type[t], t == gpu_type)) != gpu_type


def _fit_gang(
    replicas: int,
    gpp: int,
    group: int,
    sol: policies.Solution,
    node_free: npt.NDArray[np.int64],
    current: npt.NDArray[np.int64],
) -> tuple[tuple[int, int], ...] | None:
    """``replicas`` pods of ``gpp`` GPUs on the group's nodes: where the job runs now if it runs
    there whole, else the fewest nodes (best fit, then largest first); ``None`` if they do not
    fit."""
    ks = np.flatnonzero(sol.node_group == group)
    if current[ks].sum() == replicas and all(node_free[k] >= current[k] * gpp for k in ks):
        return tuple((int(k), int(current[k])) for k in ks if current[k] > 0)
    room = {int(k): int(node_free[k]) // gpp for k in ks}
    single = [k for k, n in room.items() if n >= replicas]
    if single:
        k = min(single, key=lambda k: (room[k], k))
        return ((k, replicas),)
    chosen, left = [], replicas
    for k in sorted(room, key=lambda k: (-room[k], k)):
        take = min(room[k], left)
        if take > 0:
            chosen.append((k, take))
            left -= take
        if left == 0:
            return tuple(sorted(chosen))
    return None


def _enforce_filters(
    placements: Mapping[int, rounds.JobPlacement],
    sol: policies.Solution,
    view: snapshot.ClusterView,
    targets: npt.NDArray[np.float64],
    unplaced: Sequence[int],
    maximums: _Maximums,
    completions: _Completions,
) -> tuple[dict[int, rounds.JobPlacement], dict[int, str]]:
    """The placements that pass every filter, moved within their group where they must be.

    A placement that would take its tenant (or an ancestor) over its maximum of the group's
    GPU type is left out too (``_Maximums``): the rounds of free GPUs that time-sliced targets
    leave do not let a tenant exceed what its admin set. So is a run-to-completion gang that
    would start outside its tenant's guarantee (``_Completions``).

    Kept gangs go first and stay (their pods are on their nodes and hold what they use), then
    the others by job row. A placement is accepted as planned when each of its nodes passes the
    job's filters and holds its pods next to what is accounted on it so far (foreign pods'
    requests, then the accepted placements'); otherwise its pods are re-packed onto the group's
    eligible nodes with room (:meth:`_NodeUse.pack`); otherwise the job is left out of this
    round, with kube-scheduler's diagnosis as the reason. When some job was left out, it (in
    its other groups with a target) and the jobs the plan could not place (``unplaced``),
    largest target first, may use what that freed, so filters do not leave GPUs idle that the
    plan would have filled.
    """
    use = _NodeUse(sol, view)
    accepted: dict[int, rounds.JobPlacement] = {}
    why: dict[int, str] = {}
    for r in sorted(placements, key=lambda r: (not placements[r].kept, r)):
        pl = placements[r]
        job = sol.jobs[r]
        at_max = maximums.full(r, sol.group_type[pl.group]) or completions.full(
            r, sol.group_type[pl.group], pl.kept
        )
        if at_max:
            why[r] = at_max
            continue
        fit = use.capacity.type_fit(job, sol.group_type[pl.group])
        eligible = fit.node_set
        # A kept gang's pods are on their nodes already (they hold what they use): only count it.
        chosen: list[tuple[int, int]] | None = list(pl.nodes)
        if not pl.kept and not all(k in eligible and use.room(job, k) >= n for k, n in pl.nodes):
            chosen = use.pack(job, pl.group, {k for k, _ in pl.nodes})
        if chosen is None:
            why[r] = (
                f"the gang of {job.replicas} pods does not fit on {sol.group_type[pl.group]} "
                f"nodes that pass its filters this round ({fit.diagnosis.message()})"
            )
            continue
        use.take(job, chosen)
        maximums.take(r, sol.group_type[pl.group])
        completions.take(r, sol.group_type[pl.group])
        nodes = tuple((int(k), int(n)) for k, n in chosen)
        accepted[r] = rounds.JobPlacement(
            job=r, group=pl.group, nodes=nodes, kept=pl.kept and nodes == pl.nodes
        )
    if why:
        for r in sorted({*unplaced, *why}, key=lambda r: (-float(targets[r].max()), r)):
            job = sol.jobs[r]
            for g in np.argsort(-targets[r], kind="stable").tolist():
                if targets[r, g] <= 0:
                    break
                if r in placements and g == placements[r].group:
                    continue  # where it was just left out
                if maximums.full(r, sol.group_type[g]) or completions.full(
                    r, sol.group_type[g], False
                ):
                    continue
                chosen = use.pack(job, g, set())
                if chosen is not None:
                    use.take(job, chosen)
                    maximums.take(r, sol.group_type[g])
                    completions.take(r, sol.group_type[g])
                    nodes = tuple((int(k), int(n)) for k, n in chosen)
                    accepted[r] = rounds.JobPlacement(job=r, group=g, nodes=nodes, kept=False)
                    why.pop(r, None)
                    break
    return accepted, why


def _restart_costs(
    sol: policies.Solution, restart_s: float, measured: Mapping[model.JobKey, float] | None
) -> npt.NDArray[np.float64] | None:
    """Per job, its measured restart cost where known, else ``restart_s`` (None: all are
    ``restart_s``, or ``restart_s`` is 0 and Gavel's order prices nothing)."""
    if not measured or restart_s <= 0:
        return None
    costs = [measured.get(job.key, restart_s) for job in sol.jobs]
    return np.array([c if np.isfinite(c) and c >= 0 else restart_s for c in costs])


def _fit_credit(
    sol: policies.Solution,
    targets: npt.NDArray[np.float64],
    elapsed: npt.NDArray[np.float64],
    restart_s: float | npt.NDArray[np.float64],
    how: switching.Switching,
) -> npt.NDArray[np.float64] | None:
    """Per job, the credit when every job fits (``switching.fit_credit``), or None."""
    if not how.fit:
        return None
    return switching.fit_credit(targets, _group_rates(sol), elapsed, restart_s, floor=how.hold)


# The jobs and group types of the last ``_group_rates`` call and its answer (held, so the jobs'
# ids are never reused): a reused solution carries the same job objects round after round.
_LAST_RATES: list[tuple[Sequence[model.JobSpec], tuple[str, ...], npt.NDArray[np.float64]]] = []


def _group_rates(sol: policies.Solution) -> npt.NDArray[np.float64]:
    """``(J, G)``: each job's throughput on each group's GPU type (read-only)."""
    last = _LAST_RATES[0] if _LAST_RATES else None
    if (
        last is not None
        and last[1] == tuple(sol.group_type)
        and len(last[0]) == len(sol.jobs)
        and all(map(operator.is_, last[0], sol.jobs))
    ):
        return last[2]  # the same (immutable) jobs: the same throughputs
    types = sorted(set(sol.group_type))
    column = {t: c for c, t in enumerate(types)}
    by_type = np.array([[job.throughput.get(t, 0.0) for t in types] for job in sol.jobs])
    rates = by_type[:, [column[t] for t in sol.group_type]]
    rates.flags.writeable = False
    _LAST_RATES[:] = [(tuple(sol.jobs), tuple(sol.group_type), rates)]
    return rates


def _backfill_mask(
    sol: policies.Solution, view: snapshot.ClusterView, frozen: list[rounds.JobPlacement]
) -> npt.NDArray[np.bool_]:
    """Where each solved job could run: positive throughput on the group's GPU type and some
    node of the group passing the job's filters (kube-scheduler's, as ``_enforce_filters``
    applies them); jobs an incremental round keeps in place are left out."""
    capacity = Capacity.of(view)
    last = _LAST_MASK[0] if _LAST_MASK else None
    if last is not None and last[0] is sol.targets and last[1] is capacity:
        mask = last[2].copy()
    else:
        mask = _solution_mask(sol, capacity)
        _LAST_MASK[:] = [(sol.targets, capacity, mask.copy())]
    for fixed in frozen:
        mask[fixed.job] = False
    return mask


# The last solve's backfill mask before frozen jobs are cleared, keyed by that solve's targets
# array and the capacity (view) it was built from, both held so that their ids are never reused.
# A policy reuses its last solution while its inputs (jobs' specs included) are unchanged, which
# is most rounds: the reused solution is a copy carrying the same targets array, and its jobs'
# throughputs and filter shapes, all the mask reads of them, are those of the solve.
_LAST_MASK: list[tuple[npt.NDArray[np.float64], Capacity, npt.NDArray[np.bool_]]] = []


def _solution_mask(sol: policies.Solution, capacity: Capacity) -> npt.NDArray[np.bool_]:
    """``_backfill_mask`` of every solved job, none frozen."""
    mask = np.zeros((len(sol.jobs), len(sol.group_type)), dtype=bool)
    types = sorted(set(sol.group_type))
    # A row depends on the job only through its shape and the types it has throughput on, so
    # jobs of one kind share it (most of a large queue).
    rows: dict[Hashable, npt.NDArray[np.bool_]] = {}
    for r, job in enumerate(sol.jobs):
        positive = tuple(t for t in types if job.throughput.get(t, 0.0) > 0)
        kind = (job_shape(job), positive)
        row = rows.get(kind)
        if row is None:
            row = np.zeros(len(sol.group_type), dtype=bool)
            for t in positive:
                row[sol.node_group[capacity.type_fit(job, t).nodes]] = True
            rows[kind] = row
        mask[r] = row
    return mask

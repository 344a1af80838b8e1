"""Realise a policy that chose its own placements (Hadar, HadarE) rather than time fractions.

Called by :func:`walras.core.cycle.plan` instead of ``walras.core.realise.realise`` when the
solution carries ``placements`` (job → ``(node, pods)``). The diff against the existing pods is the
realiser's: a job whose alive pods sit exactly on the planned nodes keeps them (no write, no
restart); any other planned job gets its old pods deleted and new ones created from its template
(named ``<job>-r<round>-<replica>``, as every pod Walras makes); a solved job without a placement
has its slice end; pods of finished, deleted or unschedulable jobs go.

A placement may span GPU types (a gang spread over types runs at its slowest member's rate) and, for
a forked job, hold more pods than ``replicas`` (one gang per node). The job's history records the
group of its first node and the solution's ``rates`` (work per second of all its pods).

Copies of a forked job (HadarE) get the environment a workload needs to cooperate
(``docs/forking.md``): ``WALRAS_FORK_INDEX`` (its copy, from 0), ``WALRAS_FORK_COUNT``,
``WALRAS_FORK_STEPS`` (the work assigned to it this round) and ``WALRAS_JOB_NAME``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from walras.core import crd, model, realise, snapshot
from walras.core.policies import Solution


def realise_placements(
    sol: Solution,
    snap: snapshot.Snapshot,
    view: snapshot.ClusterView,
    round_no: int,
) -> realise.Realisation:
    """Pods to create, keep and delete for ``sol.placements`` (see the module docstring)."""
    placements = sol.placements or {}
    node_index = view.node_index
    pods_by_job = snap.pods_by_job()
    known_nodes = {n.name for n in snap.nodes}
    creates: list[realise.PodCreate] = []
    deletes: list[realise.PodDelete] = []
    jobs: dict[model.JobKey, realise.JobRound] = {}

    def gone(pod: model.PodInfo, reason: str) -> realise.PodDelete:
        lost = bool(pod.node) and pod.node not in known_nodes
        return realise.PodDelete(pod, "NodeGone" if lost else reason)

    for r, job in enumerate(sol.jobs):
        pods = [p for p in pods_by_job.get(job.key, []) if not p.terminating]
        alive = [p for p in pods if p.phase != crd.PHASE_FAILED]
        where = tuple(placements.get(job.key, ()))
        if not where:
            preempted = any(p.phase != crd.PHASE_SUCCEEDED for p in pods)
            deletes.extend(gone(p, "SliceEnded") for p in pods)
            jobs[job.key] = realise.JobRound(job.key, "", "", (), False, preempted)
            continue
        first = node_index[where[0][0]]
        gpu_type = view.gpu_types[int(view.node_type[first])]
        group = gpu_type if gpu_type in sol.groups else where[0][0]
        now_on = Counter(p.where for p in alive)
        if now_on == Counter(dict(where)) and len(alive) == sum(n for _, n in where):
            bound = sum(1 for p in alive if p.node)
            jobs[job.key] = realise.JobRound(
                job.key, group, gpu_type, where, True, False, "", bound
            )
            continue
        deletes.extend(gone(p, "Rescheduled") for p in pods)
        replica = 0
        gpus = int(sol.gpus_per_pod[r])
        copies = sol.forks.get(job.key, ())
        # The copies (gangs) still to be given pods on each node: the placement lists nodes in
        # node order, the copies in their own order (the admitted gang first), so a pod's copy is
        # looked up by its node, never by its position.
        copy_slots: dict[str, list[int]] = {}
        for c, (nodes, _) in enumerate(copies):
            for node_name, n in nodes:
                copy_slots.setdefault(node_name, []).extend([c] * n)
        for node_name, count in where:
            k = node_index[node_name]
            pool = view.node_pool[k]
            node_type = view.gpu_types[int(view.node_type[k])]
            for _ in range(count):
                name = realise.pod_name(job.name, round_no, replica)
                build = partial(
                    realise.pod_manifest,
                    job,
                    name=name,
                    replica=replica,
                    node=node_name,
                    group=group,
                    gpu_type=node_type,
                    resource_name=pool.resource_name,
                    gpus=gpus,
                    round_no=round_no,
                    fraction=1.0,
                    price=float(sol.prices.get(node_type, 0.0)),
                )
                slots = copy_slots.get(node_name)
                if slots:
                    c = slots.pop(0)
                    build = partial(_forked, build, job, c, len(copies), copies[c][1])
                creates.append(
                    realise.PodCreate(job, name, replica, node_name, gpus, group, round_no, build)
                )
                replica += 1
        jobs[job.key] = realise.JobRound(job.key, group, gpu_type, where, False, False)
    solved = {j.key for j in sol.jobs}
    finished = {j.key for j in snap.jobs if j.finished}
    live = {j.key for j in snap.jobs if not j.finished} | {d.key for d in snap.defects}
    for key, others in pods_by_job.items():
        if key in solved:
            continue
        reason = (
            "JobFinished" if key in finished else "NotSchedulable" if key in live else "JobGone"
        )
        deletes.extend(gone(p, reason) for p in others if not p.terminating)
    deletes.extend(
        realise.PodDelete(p, "NodeGone")
        for p in snap.pods
        if p.terminating and p.node and p.node not in known_nodes
    )
    return realise.Realisation(creates=tuple(creates), deletes=tuple(deletes), jobs=jobs)


def _forked(
    build: Callable[[], Mapping[str, Any]],
    job: model.JobSpec,
    index: int,
    count: int,
    steps: float,
) -> dict[str, Any]:
    """The manifest ``build`` makes, with the fork environment (``fork_env``)."""
    return fork_env(build(), job, index, count, steps)


def fork_env(
    manifest: Mapping[str, Any], job: model.JobSpec, index: int, count: int, steps: float
) -> dict[str, Any]:
    """``manifest`` with the fork environment on every container (see the module docstring)."""
    env = [
        {"name": "WALRAS_FORK_INDEX", "value": str(index)},
        {"name": "WALRAS_FORK_COUNT", "value": str(count)},
        {"name": "WALRAS_FORK_STEPS", "value": f"{steps:.6g}"},
        {"name": "WALRAS_JOB_NAME", "value": job.name},
    ]
    names = {e["name"] for e in env}
    spec = dict(manifest.get("spec") or {})
    containers = []
    for container in spec.get("containers") or []:
        c = dict(container)
        kept = [
            e for e in c.get("env") or [] if not (isinstance(e, Mapping) and e.get("name") in names)
        ]
        c["env"] = [*kept, *env]
        containers.append(c)
    spec["containers"] = containers
    return {**manifest, "spec": spec}

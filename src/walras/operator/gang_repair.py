"""A new leader's first act: finish or undo every gang its predecessor left partially bound.

A gang is committed by creating its last member bound to its node and binding the others right
after (``walras.operator.binder``); an operator killed in between leaves some members running on
their nodes and the rest pending, a GPU held by a process that waits for peers which never come.
The next leader repairs that before it plans anything, so a gang is whole or absent within one
round of a leader starting:

- A **partial gang** is the live (neither terminating nor finished) pods Walras owns of one job
  and one round, at least one bound to a node and at least one not.
- It is **finished** (its unbound members bound to their planned nodes) when it is complete
  (as many members as the job's ``replicas``), every unbound member has a planned node, and
  every such node exists, is not cordoned and has room for the member next to all the pods on
  it (``walras.core.filters.resource_fit``, counting the members finished before it). A bind the
  API server answers 409 is already bound (the predecessor's answer was lost).
- Otherwise, or when a bind fails, it is **undone**: every member is deleted, and the next round
  places the job again as a whole.

The check is linear in the pods; the writes are fenced like every other (``kube.writes.Api``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from walras.core import filters, model, snapshot
from walras.kube import writes as kubeapi

logger = logging.getLogger("walras.operator.gang_repair")

Owns = Callable[[model.PodInfo, dict[model.JobKey, str]], bool]


@dataclass(slots=True)
class Repair:
    """What :func:`repair` did: the gangs finished and undone, by job and round."""

    finished: list[tuple[model.JobKey, int]] = field(default_factory=list)
    undone: list[tuple[model.JobKey, int]] = field(default_factory=list)


def partial_gangs(
    store: snapshot.Store, owns: Owns
) -> dict[tuple[model.JobKey, int], list[model.PodInfo]]:
    """The gangs with some live member bound and some not, by (job, round), members by name."""
    job_uids = {k: j.uid for k, j in store.jobs.items()}
    gangs: dict[tuple[model.JobKey, int], list[model.PodInfo]] = {}
    for pod in store.pods.values():
        if pod.terminating or pod.finished or not owns(pod, job_uids):
            continue
        gangs.setdefault((pod.job_key, pod.round), []).append(pod)
    return {
        key: sorted(members, key=lambda p: p.name)
        for key, members in sorted(gangs.items())
        if any(p.node for p in members) and any(not p.node for p in members)
    }


def _finishable(
    store: snapshot.Store, members: list[model.PodInfo], usage: dict[str, dict[str, float]]
) -> bool:
    """Whether the gang can be completed where it was planned (``usage`` then counts it)."""
    job = store.jobs.get(members[0].job_key)
    if not isinstance(job, model.JobSpec) or len(members) != job.replicas:
        return False
    trial: dict[str, dict[str, float]] = {}
    for pod in members:
        if pod.node:
            continue
        node = store.nodes.get(pod.planned_node)
        if node is None or not filters.unschedulable(node, ()).ok:
            return False
        used = trial.setdefault(node.name, dict(usage.get(node.name, {})))
        if not filters.resource_fit(pod.requests, node.allocatable, used).ok:
            return False
        filters.add_usage(used, pod.requests)
    usage.update(trial)
    return True


async def repair(store: snapshot.Store, api: kubeapi.Api, owns: Owns) -> Repair:
    """Finish or undo every partial gang in ``store`` (the module docstring's rule)."""
    done = Repair()
    gangs = partial_gangs(store, owns)
    if not gangs:
        return done
    usage = snapshot.node_usage([*store.pods.values(), *store.foreign.values()])
    finish = {key: members for key, members in gangs.items() if _finishable(store, members, usage)}
    undo = [key for key in gangs if key not in finish]
    for key, members in finish.items():
        unbound = [p for p in members if not p.node]
        results = await kubeapi.gather_limited(
            api.bind_pod(p.namespace, p.name, p.planned_node) for p in unbound
        )
        if any(r.outcome == kubeapi.Outcome.FENCED for r in results):
            return done  # we lost the Lease: the next leader repairs
        if all(r.outcome in (kubeapi.Outcome.OK, kubeapi.Outcome.CONFLICT) for r in results):
            done.finished.append(key)
        else:
            undo.append(key)
    for key in sorted(undo):
        await kubeapi.gather_limited(
            api.delete_pod(p.namespace, p.name, uid=p.uid) for p in gangs[key]
        )
        done.undone.append(key)
    for (job, round_no), members in gangs.items():
        what = "finished" if (job, round_no) in done.finished else "removed"
        bound = sum(bool(p.node) for p in members)
        logger.warning(
            "job %s/%s: gang of round %d left with %d of %d pods bound by the previous leader; %s",
            job[0],
            job[1],
            round_no,
            bound,
            len(members),
            what,
        )
    return done

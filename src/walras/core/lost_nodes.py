"""Lost nodes: which jobs had pods on a node that is gone, so the user is told which node.

A node can vanish under running gangs (deleted, or removed by its cloud's controller). The round
places those gangs again; without this the job's condition would read like an ordinary end of
its slice. Rule, checked once per round:

- ``ran``: for every node that exists, the jobs with a live (not finished) pod bound there, as of
  the previous round;
- a job is **affected** by node ``n`` when ``n`` was in ``ran`` for it and is gone now, or when a
  pod of it is still bound to ``n`` though ``n`` is gone (the pod garbage collector has not
  removed it yet, or the operator started after the node went);
- each affected job's ``Preempted`` condition becomes ``True`` with reason ``NodeLost`` and a
  message naming the node(s), for the round in which the loss is seen (while a pod lingers on
  the node, every round), and the job gets a Warning Event saying the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from walras.core import conditions as cond
from walras.core import model

REASON: Final = "NodeLost"


def message(nodes: Iterable[str]) -> str:
    """The condition's and the Event's text for a job that lost ``nodes``."""
    names = sorted(nodes)
    which = f"node {names[0]}" if len(names) == 1 else f"nodes {', '.join(names)}"
    return (
        f"{which}, which ran pods of this job, is gone; its pods there are removed and its gang "
        "is placed again as a whole"
    )


def mark(core: Mapping[str, Any], nodes: Iterable[str], generation: int) -> dict[str, Any]:
    """``core`` (a job's status) with its ``Preempted`` condition saying which nodes were lost."""
    lost = cond.condition(cond.PREEMPTED, True, REASON, message(nodes), generation)
    conditions = [c for c in core.get("conditions") or [] if c.get("type") != cond.PREEMPTED]
    return {**core, "conditions": [*conditions, lost]}


class LostNodes:
    """Remembers, round to round, the nodes that ran each job's pods (the module's rule)."""

    def __init__(self) -> None:
        self._ran: dict[str, set[model.JobKey]] = {}

    def observe(
        self, nodes: Iterable[str], pods: Iterable[model.PodInfo]
    ) -> dict[model.JobKey, list[str]]:
        """The affected jobs now, each with the lost nodes it had pods on (sorted)."""
        known = set(nodes)
        lost: dict[model.JobKey, set[str]] = {}
        for node, jobs in self._ran.items():
            if node not in known:
                for job in jobs:
                    lost.setdefault(job, set()).add(node)
        ran: dict[str, set[model.JobKey]] = {}
        for pod in pods:
            if not pod.job or not pod.node or pod.finished:
                continue
            if pod.node in known:
                ran.setdefault(pod.node, set()).add(pod.job_key)
            else:
                lost.setdefault(pod.job_key, set()).add(pod.node)
        self._ran = ran
        return {job: sorted(names) for job, names in sorted(lost.items())}

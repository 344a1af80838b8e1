"""The advance notice: which running gangs the next full round stops, and when.

After a round is planned, the realiser is run once more on the cluster as that plan leaves it —
its pods created and bound, its deletions gone, every history advanced by one round at the group
the plan gives it — at ``now + round_s`` with the same targets and options. A gang that runs
after this round and that the forecast does not keep where it is (stopped, or moved to other
nodes) gets a stop time ``now + round_s``: the start of the next full round, when its pods are
deleted and receive SIGTERM. The operator is to write it on the gang's pods as
``walras.dev/stop-at`` (RFC 3339) as soon as the round is planned, and remove it when a later
forecast keeps the gang; ``walras.workload`` checkpoints ahead when the time is near.

It is a forecast, not a promise: the next round solves again, so an arrival, a finished job or
new throughput measurements may change its targets. A gang is never stopped *earlier* than
announced (rounds keep their period; incremental rounds keep every running gang), but one
announced may be kept, and one not announced may still be stopped. The minimum run time holds
in the forecast as in the round (``min_run_s``). Policies that place gangs themselves (Hadar)
are not forecast: :func:`next_stops` returns nothing for them.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Final

from walras.core import cycle, model, realise
from walras.workload import identity

ANN_STOP_AT: Final = identity.ANN_STOP_AT


def _as_planned(plan: cycle.CyclePlan) -> tuple[model.PodInfo, ...]:
    """The Walras pods once the plan is carried out: deletions gone, creations bound."""
    deleted = {d.pod.key for d in plan.realisation.deletes}
    pods = [p for p in plan.snapshot.pods if p.key not in deleted and not p.terminating]
    for c in plan.realisation.creates:
        jr = plan.realisation.jobs.get(c.job.key)
        pods.append(
            model.PodInfo(
                namespace=c.job.namespace,
                name=c.name,
                uid=c.name,
                job=c.job.name,
                replica=c.replica,
                node=c.node,
                planned_node=c.node,
                group=jr.group if jr is not None else "",
                phase="Running",
                terminating=False,
                round=plan.round_no,
                requests={},
                created=plan.now,
            )
        )
    return tuple(sorted(pods, key=lambda p: p.key))


def next_stops(
    plan: cycle.CyclePlan,
    *,
    round_s: float,
    options: cycle.CycleOptions | None = None,
    restart_costs: Mapping[model.JobKey, float] | None = None,
) -> dict[model.JobKey, float]:
    """Job key → when its running gang is forecast to be stopped (epoch seconds; see above).

    ``round_s``: the period of full rounds; ``options`` and ``restart_costs``: what the round
    was planned with. Raises ValueError for a ``round_s`` that is not positive and finite.
    """
    if not (round_s > 0 and math.isfinite(round_s)):
        raise ValueError(f"round_s must be a positive number of seconds, got {round_s!r}")
    if plan.solution.placements is not None:
        return {}
    opts = options or cycle.CycleOptions()
    running = {k for k, jr in plan.realisation.jobs.items() if jr.group}
    if not running:
        return {}
    then = plan.now + round_s
    histories = {k: copy.deepcopy(h) for k, h in plan.histories.items()}
    for hist in histories.values():
        hist.advance(then, opts.history_half_life_s)
    snap = dataclasses.replace(plan.snapshot, pods=_as_planned(plan), taken_at=then)
    forecast = realise.realise(
        plan.solution,
        snap,
        plan.view,
        histories,
        plan.round_no + 1,
        hold=opts.hold_s,
        backfill=opts.backfill,
        restart_s=opts.restart_s,
        now=then,
        min_run_s=opts.min_run_s,
        restart_costs=restart_costs,
    )
    out: dict[model.JobKey, float] = {}
    for key in sorted(running):
        nxt = forecast.jobs.get(key)
        if nxt is None or not nxt.group or not nxt.kept:
            out[key] = then
    return out

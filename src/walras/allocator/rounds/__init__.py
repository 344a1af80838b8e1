"""Rounds realiser: fractional allocations to this round's gang placements.

The rule and its sources: docs/algorithms.md#round-realiser.

Both policies produce fractions: price discovery a time share ``X[j, g]`` of job ``j`` on GPU type
``g``; PS-DSF tasks per node, which the operator turns into a share per node. Kubernetes runs
whole pods, so Walras realises the fractions over rounds (default 360 s). The operator (every
policy) and the simulator call :func:`plan_round` once per round, then :func:`advance` to update
the history that it persists in ``FungibleJob.status.received``.

Priority (Gavel's round-based mechanism, as the Hadar paper describes it)::

    priority[j, g] = targets[j, g] / (received[j, g] / elapsed[j])
                   = targets[j, g] * elapsed[j] / received[j, g]      (+inf when received == 0)

``received[j, g]`` counts the rounds job ``j`` ran in group ``g`` and ``elapsed[j]`` the rounds it
was eligible, so ``received / elapsed`` is its realised share. A pair whose realised share lags its
target has priority > 1 and goes first. Pairs are visited by priority, descending, with explicit
tie-breaks so that the plan is a pure function of the input:

1. larger deficit ``targets * elapsed - received`` (rounds owed; orders the ``+inf`` pairs of
   jobs that have waited longest first),
2. larger target,
3. lower job index,
4. lower group index.

For each pair, if job ``j`` is not yet placed this round, the realiser tries to place its whole
gang (``replicas`` pods of ``gpus_per_pod`` GPUs, each pod on one node, all nodes in group ``g``);
it commits only if every pod fits (gang all-or-nothing), and a job is placed at most once per
round. Jobs with a positive target that end up nowhere are listed in ``RoundPlan.unplaced``.

Worked example: one group of one 2-GPU node, three 1-GPU jobs with target 2/3 each. Round 1: all
priorities are ``+inf``; the target ties, so jobs 0 and 1 run. Round 2: job 2 still has ``+inf``,
jobs 0 and 1 have ``(2/3) * 1 / 1 = 2/3``: jobs 2 and 0 run. Round 3: priorities 2/3 (job 0),
4/3 (job 1), 4/3 (job 2): jobs 1 and 2 run. After three rounds each job ran exactly twice.

Stickiness and preemption (how they interact, and why)
------------------------------------------------------
A pod restart costs about 10 s (Hadar's restart cost: checkpoint, reschedule, reload), small
against a 360 s round but not free, and repeated moves churn API writes. So the default is *keep*:

- A job that runs its full gang in group ``g`` (``current``) and is selected again in ``g`` keeps
  exactly the same nodes and pod counts (``kept=True``), provided those nodes still have room.
  The operator then leaves its pods alone.
- To make "still have room" the normal case, GPUs of running jobs are *reserved* until their own
  pair is visited: a job that is not kept is packed first onto GPUs that no running job holds, and
  only if that fails onto any free GPU. So a higher-priority job displaces a running job only when
  it cannot run otherwise; the displaced job is then packed elsewhere (``kept=False``) or, if
  nothing fits, is not placed.
- Preemption is the time slice ending: a running job that is not selected this round, because
  jobs further behind their targets filled the capacity, is simply absent from the plan, and the
  operator deletes its pods at the round boundary (the workload checkpoints). A running job whose
  top pair is now another group moves there (Gavel's migration across types); that is how its
  per-type shares converge.
- With Gavel's order (``order="gavel"``, ``hold = 0``) the realiser never trades a restart against
  priority: a job behind its target is not held back to spare a running job its 10 s. The
  deficit order below does trade, by a bounded credit, so the shares still converge.
- Consequence: a job whose share is well below 1 alternates by design (its priority drops each
  round it runs), so ``kept`` is common for jobs with shares near 1 and rare under heavy
  oversubscription. Stickiness saves restarts; it never changes who runs, only where.

Restart-priced blocks (``order="deficit"``, the operator's default through ``walras.core``)
-----------------------------------------------------------------------------------------
Gavel's order moves a job whose targets split over two groups between them every round (its
priority drops on the group it just used), so each such job restarts every round although, on a
cluster that is not oversubscribed, everything fits. With ``order="deficit"`` pairs are visited by
the deficit ``targets * elapsed - received`` (seconds owed) instead, and a running gang's own pair
gets the credit ``hold``::

    key[j, g] = targets[j, g] * elapsed[j] - received[j, g] + hold * [g is j's current group]

So a running gang switches only when a deficit elsewhere (its own on another group, or another
job's) exceeds its own by ``hold``: split shares are served in contiguous blocks, and a gang stays
wherever its share is not exhausted by more than ``hold``. For a job alone split ``(t, 1 − t)`` its
lead swings within ``±(hold/2 + one round)``: the share error is at most ``(hold/2 + 1) / R``
after ``R`` rounds, and switches are at least ``hold / max(t, 1 − t)`` rounds apart
(``tests/unit/test_rounds_blocks.py`` derives both). ``hold_fit`` (one or one per job) replaces
``hold`` when every job with a target fits at once. ``walras.core.switching`` prices both from the
restart cost. Once the visit has settled who runs in which group, the nodes are chosen again:
every gang that stays in its group keeps its nodes, the others are packed into what is left (a
running gang is never restarted only because a mover visited first took its GPUs).

Worked example: one job split 0.5/0.5 over two 1-GPU groups, ``hold = 2`` rounds. Gavel's order
alternates every round; here it runs ``000111110000011111…``: after a first block of 3, blocks of 5
rounds (it leaves a group once it leads there by about ``hold / 2``; ties go to the lower group),
a fifth of the switches, with the share error at most ``(hold/2 + 1) / R = 2 / R``.

Ranks inside a group of jobs (``rank``, ``rank_group``)
--------------------------------------------------------
Optional precedence inside a set of jobs (the operator: a tenant's PriorityClass values, see
``walras.core.priorities``): after the order above is fixed, the pairs of one rank group in one
group keep their positions in it but are handed out to that rank group's jobs by rank, highest
first (ties in the order above). Which rank group is served when is unchanged; inside it, the
higher ranks take its turns, so its lowest ranks are left out first when it gets fewer GPUs.

Work conservation and convergence
---------------------------------
Every positive-target pair is tried, so idle GPUs go to jobs that are ahead of their target rather
than stay idle: a job can receive more than its target when its group has room nobody behind
target can use. Under-delivery is the defect the tests bound. With 1-GPU gangs and targets that
fill each group, the error ``max |received / elapsed - targets|`` falls like 1/R; with larger gangs
the greedy packing is a heuristic and the targets must be realisable as a mix of packable rounds
(fractional feasibility is not enough: three jobs each needing 20 of 32 GPUs at 0.5 fit
fractionally, but only one can run at a time).

Capacity
--------
``node_free[k]`` is node ``k``'s GPUs usable by Walras this round: capacity minus non-Walras use.
GPUs of Walras's own running pods count as free here; the realiser decides afresh who keeps them.

Packing (a job that is not kept): fewest nodes first, then best fit. If one node can hold the
whole gang, take the one that leaves the fewest GPUs free (ties: lower node index). Otherwise fill
the nodes that hold the most pods (ties: lower node index) until the remainder fits on one more
node, and put the remainder on the best-fitting such node.

Tolerances: targets in ``[-1e-9, 0)`` are treated as 0 (solver noise); a targets row may sum to
``1 + 1e-6``. ``received`` rows are not required to sum to at most ``elapsed``: history persisted by
an operator across restarts may be slightly inconsistent, and the priority stays well defined.

Modules: ``planner`` (:func:`plan_round`, :func:`priorities`), ``packing`` (gang packing in one
group), ``history`` (:func:`advance`, :func:`as_current`, :func:`realised_share`), ``results``
(frozen :class:`RoundPlan`, :class:`JobPlacement`), ``validation`` (errors naming job or node).
"""

from __future__ import annotations

from walras.allocator.rounds.history import advance, as_current, realised_share
from walras.allocator.rounds.planner import plan_round, priorities
from walras.allocator.rounds.results import JobPlacement, RoundPlan
from walras.allocator.rounds.validation import NEG_TOL, ROW_SUM_TOL

__all__ = [
    "NEG_TOL",
    "ROW_SUM_TOL",
    "JobPlacement",
    "RoundPlan",
    "advance",
    "as_current",
    "plan_round",
    "priorities",
    "realised_share",
]

"""FungibleJob and ResourcePool status from one round's solution and realisation.

Called by the round loop after it planned the round. Builders return the *core* of a status
(everything but the persisted history and timestamps); :func:`changed` compares a core with the
status the watch last delivered, so the loop patches only when something a user can see changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from walras.core import conditions as cond
from walras.core import crd, model, policies, realise, snapshot
from walras.operator import visible

CORE_KEYS = (
    "phase",
    "tenant",
    "gpuType",
    "allocation",
    "expectedThroughput",
    "price",
    "cost",
    "fairShare",
    "tenantTasks",
    "runningGroup",
)


def _share_by_type(sol: policies.Solution, row: int) -> dict[str, float]:
    share: dict[str, float] = {}
    for g, gpu_type in enumerate(sol.group_type):
        share[gpu_type] = share.get(gpu_type, 0.0) + float(sol.targets[row, g])
    return share


def solved_job_status(
    job: model.JobSpec,
    row: int,
    sol: policies.Solution,
    jr: realise.JobRound,
    view: snapshot.ClusterView,
    has_run: bool,
    bound: int | None = None,
) -> dict[str, Any]:
    """Core status of a job the policy solved this round.

    ``bound``: how many of the job's pods are bound to their nodes now (the loop knows the
    bindings it just made); by default the pods the snapshot already showed bound
    (``JobRound.bound``). ``Bound`` is True only when the whole gang is.
    """
    share = _share_by_type(sol, row)
    fair = float(sol.targets[row].sum())
    main_type = max(sorted(share), key=lambda t: share[t]) if fair > 1e-3 else ""
    allocation = [
        {
            "gpuType": t,
            # Shares to two decimals, as every message shows them ("share of v100 is 0.52"):
            # a move in the third would rewrite statuses for nothing a user reads.
            "fraction": round(s, 2),
            "nodes": sorted(set(jr.nodes)) if jr.gpu_type == t else [],
        }
        for t, s in sorted(share.items())
        if round(s, 2) > 0 or jr.gpu_type == t
    ]
    gpp = int(sol.gpus_per_pod[row])
    resource = view.node_pool[0].resource_name if view.nodes else crd.DEFAULT_RESOURCE_NAME
    cost = sum(sol.prices.get(t, 0.0) * s * job.replicas * gpp for t, s in share.items())
    running = bool(jr.group)
    gen = job.generation
    conds = [
        cond.condition(
            cond.ADMITTED,
            True,
            cond.VALID,
            f"tenant {job.tenant}; gang of {job.replicas} pods x {gpp} {resource}",
            gen,
        )
    ]
    price_text = ""
    if main_type in sol.prices:
        price_text = f" at price {cond.fmt(sol.prices[main_type])}"
    if running:
        conds.append(
            cond.condition(
                cond.ALLOCATED,
                True,
                cond.ALLOCATED_REASON,
                f"share of {main_type or jr.gpu_type} is {share.get(main_type, 0.0):.2f}"
                f"{price_text}; expected throughput {cond.fmt(sol.expected_throughput[row])}",
                gen,
            )
        )
    elif fair >= 0.999 or jr.why:
        conds.append(
            cond.condition(
                cond.ALLOCATED,
                False,
                cond.WAITING_FOR_CAPACITY,
                f"share of {main_type} is {share.get(main_type, 0.0):.2f}{price_text}, but "
                + (jr.why or "the gang did not fit on free nodes this round"),
                gen,
            )
        )
    else:
        conds.append(
            cond.condition(
                cond.ALLOCATED,
                False,
                cond.INSUFFICIENT_SHARE,
                cond.insufficient_share_message(
                    share, sol.prices, sol.alternatives.get(job.key, {})
                ),
                gen,
            )
        )
    n_bound = jr.bound if bound is None else bound
    all_bound = running and n_bound >= job.replicas
    if all_bound:
        bound_text = f"{job.replicas} pods bound on {', '.join(sorted(set(jr.nodes)))}"
    elif running:
        bound_text = (
            f"{n_bound} of {job.replicas} pods bound; the gang binds as a whole once its nodes "
            f"({', '.join(sorted(set(jr.nodes)))}) have room"
        )
    else:
        bound_text = "no pods this round"
    conds.append(
        cond.condition(
            cond.BOUND,
            all_bound,
            cond.PODS_BOUND if all_bound else cond.BIND_PENDING if running else cond.NOT_RUNNING,
            bound_text,
            gen,
        )
    )
    sliced = 1e-3 < fair < 0.999
    conds.append(
        cond.condition(
            cond.TIME_SLICED,
            sliced,
            cond.SLICED if sliced else (cond.FULL_SHARE if fair >= 0.999 else cond.NO_SHARE),
            f"runs {fair:.2f} of the time in rounds" if sliced else f"share {fair:.2f}",
            gen,
        )
    )
    preempted = has_run and not running
    conds.append(
        cond.condition(
            cond.PREEMPTED,
            preempted,
            cond.SLICE_ENDED if preempted else cond.RUNNING if running else cond.NOT_RUNNING,
            "its slice ended; it runs again when its share of rounds falls behind its target"
            if preempted
            else "not preempted",
            gen,
        )
    )
    out: dict[str, Any] = {
        "phase": crd.PHASE_RUNNING if running else crd.PHASE_PENDING,
        "tenant": job.tenant,
        "gpuType": jr.gpu_type or main_type,
        "allocation": allocation,
        "expectedThroughput": cond.num(float(sol.expected_throughput[row])),
        "price": cond.num(sol.prices.get(jr.gpu_type or main_type, 0.0)),
        # Two significant digits: the shares it is made of are shown to two decimals.
        "cost": float(f"{cost:.2g}"),
        "fairShare": round(fair, 2),
        "conditions": conds,
        "runningGroup": jr.group,
    }
    if sol.tenant_tasks:
        out["tenantTasks"] = cond.num(sol.tenant_tasks.get(job.tenant, 0.0))
    return out


def issue_status(
    job: model.JobSpec | model.JobDefect, tenant: str, field: str, reason: str, message: str
) -> dict[str, Any]:
    """Core status of a job that cannot be scheduled (never blocks the others)."""
    return {
        "phase": crd.PHASE_PENDING,
        "tenant": tenant,
        "gpuType": "",
        "allocation": [],
        "expectedThroughput": 0.0,
        "price": 0.0,
        "cost": 0.0,
        "fairShare": 0.0,
        "runningGroup": "",
        "conditions": [
            cond.condition(
                cond.ADMITTED, False, reason, cond.issue_message(field, message), job.generation
            )
        ],
    }


def finished_status(job: model.JobSpec, phase: str, reason: str, message: str) -> dict[str, Any]:
    """Core status of a job that just finished (Succeeded or Failed)."""
    return {
        "phase": phase,
        "tenant": job.tenant,
        "allocation": [],
        "expectedThroughput": 0.0,
        "fairShare": 0.0,
        "runningGroup": "",
        "conditions": [
            cond.condition(cond.ADMITTED, True, cond.VALID, "admitted", job.generation),
            cond.condition(
                cond.ALLOCATED, phase == crd.PHASE_SUCCEEDED, reason, message, job.generation
            ),
        ],
    }


def changed(core: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether patching ``core`` over ``old`` would change anything a user sees, at the
    precision each value is shown (``walras.operator.visible``: a move within one unit of a
    value's last shown digit is not a change; conditions' transition times are derived)."""

    def bare(conditions: Any) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in conditions or []
            if isinstance(c, Mapping)
        ]

    for key, value in core.items():
        prev = old.get(key)
        if key == "conditions":
            if not visible.same(bare(value), bare(prev)):
                return True
        elif prev in (None, "") and value in ("", None):
            continue
        elif not visible.same(value, prev, key):
            return True
    return False


def pool_statuses(
    snap: snapshot.Snapshot,
    view: snapshot.ClusterView,
    sol: policies.Solution | None,
    jobs_round: Mapping[model.JobKey, realise.JobRound],
    gpus_per_job: Mapping[model.JobKey, int],
) -> dict[str, dict[str, Any]]:
    """Core status per ResourcePool: nodes, capacity, allocated GPUs this round, price."""
    node_pool = {n.name: p.name for n, p in zip(view.nodes, view.node_pool, strict=True)}
    node_gpus = {n.name: int(g) for n, g in zip(view.nodes, view.node_gpus, strict=True)}
    allocated: dict[str, float] = {p.name: 0.0 for p in snap.pools}
    for key, jr in jobs_round.items():
        for node, count in jr.node_pods:
            owner = node_pool.get(node)
            if owner is not None:
                allocated[owner] += count * gpus_per_job.get(key, 1)
    out: dict[str, dict[str, Any]] = {}
    for pool in snap.pools:
        state = view.pools.get(pool.name)
        names = view.pool_nodes.get(pool.name, ())
        if state is not None:
            capacity = state.capacity
        elif pool.capacity_override is not None:
            capacity = pool.capacity_override
        else:
            capacity = sum(node_gpus.get(n, 0) for n in names)
        alloc = allocated.get(pool.name, 0.0)
        price = sol.prices.get(pool.gpu_type, 0.0) if sol is not None else 0.0
        ready = capacity > 0 and bool(names or pool.capacity_override)
        if ready:
            reason, message = cond.NODES_READY, f"{len(names)} ready nodes with {capacity} GPUs"
        elif not names:
            reason = cond.NO_NODES
            message = "empty: " + (
                state.why_empty(pool)
                if state is not None
                else f"no ready, schedulable node matches {dict(pool.node_selector)}"
            )
            message += "; left out of the solve until it has capacity"
        else:
            reason = cond.NO_CAPACITY
            message = (
                f"empty: {state.why_empty(pool) if state is not None else 'no free GPUs'}; "
                "left out of the solve until it has capacity"
            )
        out[pool.name] = {
            "nodes": len(names),
            "capacity": int(capacity),
            "allocated": round(alloc, 3),
            "price": cond.num(price),
            "utilisation": round(alloc / capacity, 3) if capacity else 0.0,
            "conditions": [cond.condition(cond.READY, ready, reason, message, pool.generation)],
        }
    return out

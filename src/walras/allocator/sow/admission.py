"""Admission of a SoW at its birth: post the menu and ``q̂``, choose the plan (Algorithms 1-2).

``admit(ledger, sow)`` at round ``t = sow.birth = ledger.time`` (before round ``t`` is played):

1. validate the SoW and the market bounds (``k ≤ K``, on-type durations ≤ ``D``, values ≤ ``V``);
2. draw ``M`` Monte Carlo samples of the committed load of the jobs born before it (seed:
   ``(params.seed, number of SoWs admitted so far)``; nothing about the new SoW enters the draw,
   so every report faces the same samples);
3. for each instance in order: post the price menu from the current expected usage ``y`` and the
   failure table ``q̂`` from the samples; choose the plan (:mod:`.plan`); add the plan's expected
   usage to ``y`` (the relaxed problem, where allocations are fractional and never evicted); add
   the instance to the samples as the newest earlier-born job for the next instance.

Nothing already in the ledger changes: earlier jobs' plans, menus and ``q̂`` are fixed at their
birth (and their true failure probabilities cannot depend on this SoW, by LIFO).
"""

from __future__ import annotations

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow import cancellation, failure, plan, prices
from walras.allocator.sow.ledger import Admission, JobState, Ledger, frozen
from walras.allocator.sow.model import Instance, StatementOfWork, instances, validate


def admit(ledger: Ledger, sow: StatementOfWork) -> tuple[Ledger, tuple[Admission, ...]]:
    """Admit ``sow`` at its birth; return the next ledger and one admission per instance."""
    validate(sow, ledger.gpu_types)
    _check_bounds(ledger, sow)
    t = ledger.time
    insts = instances(sow)
    params = ledger.params
    caps = np.array([c for _, c in ledger.capacities], dtype=np.int64)
    active = [j for j in ledger.jobs if j.phase.active]
    horizon = max(
        [t + 1]
        + [_job_end(j.admission.instance) for j in active]
        + [_job_end(i) for i in insts]
        + [plan.last_start(i) + _max_on_type(i) + 1 for i in insts]
    )
    pairs = max(_pairs(i, t) for i in insts)
    rng = np.random.default_rng([params.seed, len(ledger.sows)])
    samples = failure.empty_samples(caps, t, horizon, params.sample_count(pairs))
    for j in active:
        probs = failure.conditional_probabilities(j, t)
        samples = failure.add_job(
            samples, j.admission, probs, ledger.gpu_types, rng, j, params.cancel_unprofitable
        )
    usage = [np.array(u) for u in ledger.usage]
    new_jobs: list[JobState] = []
    admissions: list[Admission] = []
    for inst in insts:
        menus, tables = [], []
        n_starts = max(1, plan.last_start(inst) - t + 1)
        for dem in inst.demands:
            gi = ledger.type_index(dem.gpu_type)
            cap = ledger.capacities[gi][1]
            menus.append(prices.menu(dem.gpu_type, usage[gi], 0, t, cap, params))
            durs = [dem.duration_on(d) for d in inst.durations]
            tables.append(
                failure.failure_table(
                    samples, dem.gpu_type, gi, dem.concurrency, t, n_starts, durs, params.threshold
                )
            )
        chosen = plan.best_plan(inst, menus, tables, params.cancel_unprofitable)
        adm = Admission(inst, len(ledger.jobs) + len(new_jobs), tuple(menus), tuple(tables), chosen)
        add_expected_usage(usage, ledger, adm)
        probs = np.asarray(inst.probabilities, dtype=np.float64)
        samples = failure.add_job(
            samples, adm, probs, ledger.gpu_types, rng, cancel=params.cancel_unprofitable
        )
        admissions.append(adm)
        new_jobs.append(JobState(adm))
    nxt = Ledger(
        params,
        ledger.capacities,
        t,
        ledger.jobs + tuple(new_jobs),
        tuple(frozen(u) for u in usage),
        (*ledger.sows, sow.name),
    )
    return nxt, tuple(admissions)


def _check_bounds(ledger: Ledger, sow: StatementOfWork) -> None:
    p = ledger.params
    if sow.name in ledger.sows:
        raise InvalidProblem(f"SoW {sow.name!r}: name: already admitted", field="name")
    if ledger.round_open:
        raise InvalidProblem(
            f"SoW {sow.name!r}: birth: round {ledger.time} is being played; admit before it",
            field="birth",
        )
    if sow.birth != ledger.time:
        raise InvalidProblem(
            f"SoW {sow.name!r}: birth: {sow.birth} is not the ledger's round {ledger.time}",
            field="birth",
        )
    for dem in sow.demands:
        if dem.concurrency > p.max_concurrency:
            raise InvalidProblem(
                f"SoW {sow.name!r}: concurrency: {dem.concurrency} > K = {p.max_concurrency}",
                field="concurrency",
            )
        longest = max(dem.duration_on(d) for d in sow.distribution.durations)
        if longest > p.max_duration:
            raise InvalidProblem(
                f"SoW {sow.name!r}: distribution.durations: {longest} on {dem.gpu_type} "
                f"> D = {p.max_duration}",
                field="distribution.durations",
            )
    if sow.value.max_value > p.max_value:
        raise InvalidProblem(
            f"SoW {sow.name!r}: value_function: {sow.value.max_value} > V = {p.max_value}",
            field="value_function",
        )


def _max_on_type(inst: Instance) -> int:
    return max(dem.duration_on(d) for dem in inst.demands for d in inst.durations)


def _job_end(inst: Instance) -> int:
    """Latest round + 1 the job can occupy under any plan."""
    return max(max(inst.arrivals), plan.last_start(inst)) + _max_on_type(inst) + 1


def _pairs(inst: Instance, t: int) -> int:
    n_starts = max(1, plan.last_start(inst) - t + 1)
    return sum(n_starts * len({dem.duration_on(d) for d in inst.durations}) for dem in inst.demands)


def add_expected_usage(usage: list[np.ndarray], ledger: Ledger, adm: Admission) -> None:
    """``y_g(τ) += f·k`` over each support point's planned run.

    With ``cancel_unprofitable`` a run stops where the rule would cancel it
    (:func:`.cancellation.run_end`): the plan commits no usage beyond that round.
    """
    inst, chosen = adm.instance, adm.plan
    cancel = ledger.params.cancel_unprofitable
    for a, d, f in zip(inst.arrivals, inst.durations, inst.probabilities, strict=True):
        entry = chosen.lookup(inst.key(a, d))
        if entry is None or entry.gpu_type is None or entry.start is None or f <= 0:
            continue
        gi = ledger.type_index(entry.gpu_type)
        di = [x.gpu_type for x in inst.demands].index(entry.gpu_type)
        dem = inst.demands[di]
        menu = adm.menus[di]
        end = cancellation.run_end(
            inst, menu, dem.concurrency, entry.start, dem.duration_on(d), cancel
        )
        if usage[gi].size < end:
            usage[gi] = np.concatenate((usage[gi], np.zeros(end - usage[gi].size)))
        usage[gi][entry.start : end] += f * dem.concurrency

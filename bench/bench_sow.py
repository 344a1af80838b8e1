"""Benchmark of the SoW mechanism (``walras.allocator.sow``, docs/algorithms.md#statements-of-work).

Prints one JSON line per case.

``welfare`` cases: generated workloads (seeded), ``R`` realisations each. Per realisation, the
mechanism's welfare (completed jobs' values, LIFO evictions included) is divided by the offline
optimum in hindsight (HiGHS MILP over start times with the realised arrivals and durations).
``cancel_unprofitable`` says whether running jobs that no completion can pay any more are
cancelled for free (:mod:`walras.allocator.sow.cancellation`, default on; ``-rule-off`` cases are
the paper's mechanism as written on the same workloads), ``unprofitable_rate`` how many were.
Reported: ``ratio_min/median/mean`` over realisations, ``ratio_of_means`` (the paper's
``E[ALG]/E[OPT]``), and ``log_kdv = ln(KDV)``: Theorem 5.1 guarantees ``E[ALG] ≥ E[OPT] /
O(log KDV)`` when ``C' ≥ K log₂ μ`` (``supply_sufficient``); the constant in the O is lost with
the paper's formulas, so ``ratio_x_log = ratio_of_means · ln(KDV)`` is the number to compare
(≥ a constant means the bound's shape holds). Also eviction/cancellation rates and revenue.
``time_s``/``cpu_s``: one realisation's mechanism run (median); ``opt_time_s``: MILP (median).

``workloads`` cases: the ratio's distribution over ``W`` generated workloads (one seed each, one
realisation each): ``ratio_p10/p50/p90``, ``ratio_min`` beside ``inv_log_kdv = 1/ln(KDV)``, the
bound's scale (``ratio_min_x_log`` ≥ a constant is the shape of Theorem 5.1's guarantee).
``sim`` case: the same through ``walras simulate --policy sow``'s module (:mod:`walras.sim.sow`)
on Walras's default three-type cluster, welfare, revenue and eviction/cancellation rates.

``admission`` cases: time of one ``admit`` (median and max over the run; Monte Carlo with the
Hoeffding sample count) at a few workload sizes.
"""

from __future__ import annotations

import json
import math
import resource
import statistics
import sys
import time

import numpy as np

from walras.allocator import sow


def welfare_case(
    name: str,
    spec: sow.WorkloadSpec,
    cap: int,
    realisations: int,
    seed: int = 0,
    cancel: bool = True,
) -> dict[str, object]:
    params = sow.MechanismParams(2, 4, 8.0, seed=seed, cancel_unprofitable=cancel)
    sows = sow.generate(spec, params, seed)
    rng = np.random.default_rng(seed)
    ratios, alg, opt, times, cpus, opt_times = [], [], [], [], [], []
    evicted = cancelled = jobs = completed = unprofitable = 0
    revenue = 0.0
    for _ in range(realisations):
        real = sow.sample_realisation(sows, rng)
        t0, c0 = time.perf_counter(), time.process_time()
        out = sow.run_market(params, {"gpu": cap}, sows, real)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        t1 = time.perf_counter()
        best = sow.offline_optimum({"gpu": cap}, sows, real)
        opt_times.append(time.perf_counter() - t1)
        alg.append(out.welfare)
        opt.append(best.welfare)
        ratios.append(out.welfare / best.welfare if best.welfare > 0 else 1.0)
        evicted += out.evicted
        cancelled += out.cancelled
        unprofitable += out.unprofitable
        completed += out.completed
        jobs += len(out.ledger.jobs)
        revenue += out.revenue
    ratio_of_means = sum(alg) / sum(opt) if sum(opt) > 0 else 1.0
    lkdv = sow.log_kdv(params)
    return {
        "bench": "sow",
        "case": f"welfare-{name}",
        "sows": spec.sows,
        "capacity": cap,
        "supply_sufficient": params.supply_sufficient(cap),
        "duration_revealed": spec.duration_revealed,
        "cancel_unprofitable": cancel,
        "realisations": realisations,
        "ratio_min": round(min(ratios), 4),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_mean": round(statistics.fmean(ratios), 4),
        "ratio_of_means": round(ratio_of_means, 4),
        "log_kdv": round(lkdv, 4),
        "ratio_x_log": round(ratio_of_means * lkdv, 4),
        "log2_mu": round(math.log2(params.price_base), 4),
        "completed_rate": round(completed / jobs, 4),
        "evicted_rate": round(evicted / jobs, 4),
        "cancelled_rate": round(cancelled / jobs, 4),
        "unprofitable_rate": round(unprofitable / jobs, 4),
        "revenue_over_welfare": round(revenue / max(sum(alg), 1e-12), 4),
        "time_s": round(statistics.median(times), 4),
        "cpu_s": round(statistics.median(cpus), 4),
        "opt_time_s": round(statistics.median(opt_times), 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 4)


def workloads_case(
    name: str, spec: sow.WorkloadSpec, cap: int, workloads: int
) -> dict[str, object]:
    ratios, times, cpus = [], [], []
    evicted = cancelled = jobs = 0
    lkdv = 0.0
    for seed in range(workloads):
        params = sow.MechanismParams(2, 4, 8.0, seed=seed)
        lkdv = sow.log_kdv(params)
        sows = sow.generate(spec, params, seed)
        real = sow.sample_realisation(sows, np.random.default_rng(seed))
        t0, c0 = time.perf_counter(), time.process_time()
        out = sow.run_market(params, {"gpu": cap}, sows, real)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        best = sow.offline_optimum({"gpu": cap}, sows, real).welfare
        ratios.append(out.welfare / best if best > 0 else 1.0)
        evicted += out.evicted
        cancelled += out.cancelled
        jobs += len(out.ledger.jobs)
    return {
        "bench": "sow",
        "case": f"workloads-{name}",
        "sows": spec.sows,
        "capacity": cap,
        "workloads": workloads,
        "ratio_min": round(min(ratios), 4),
        "ratio_p10": _pct(ratios, 10),
        "ratio_p50": _pct(ratios, 50),
        "ratio_p90": _pct(ratios, 90),
        "ratio_max": round(max(ratios), 4),
        "log_kdv": round(lkdv, 4),
        "inv_log_kdv": round(1 / lkdv, 4),
        "ratio_min_x_log": round(min(ratios) * lkdv, 4),
        "evicted_rate": round(evicted / jobs, 4),
        "cancelled_rate": round(cancelled / jobs, 4),
        "time_s": round(statistics.median(times), 4),
        "cpu_s": round(statistics.median(cpus), 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def sim_case(n_sows: int, realisations: int) -> dict[str, object]:
    from walras.sim import sow as sim_sow

    counts = {"k80": 20, "p100": 20, "v100": 20}
    workload = sim_sow.generated_workload(n_sows, counts, seed=0)
    s = sim_sow.run(workload, realisations=realisations, seed=0, offline="on").summary()
    keep = (
        "welfare_mean",
        "revenue_mean",
        "offline_welfare_mean",
        "ratio_of_means",
        "ratio_min",
        "ratio_x_log",
        "completed_rate",
        "evicted_rate",
        "cancelled_rate",
        "not_run_rate",
        "unprofitable_rate",
        "supply_sufficient",
    )
    return {
        "bench": "sow",
        "case": f"sim-{n_sows}sows-3types",
        "sows": n_sows,
        "realisations": realisations,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in s.items() if k in keep},
        "time_s": round(s["wall_s"] / realisations, 4),
        "cpu_s": round(s["cpu_s"] / realisations, 4),
        "opt_time_s": round(s["offline_s"] / realisations, 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def admission_case(n_sows: int, births: int, cap: int, seed: int = 0) -> dict[str, object]:
    params = sow.MechanismParams(2, 4, 8.0, seed=seed)
    spec = sow.WorkloadSpec(sows=n_sows, births=births)
    sows = sow.generate(spec, params, seed)
    real = sow.sample_realisation(sows, np.random.default_rng(seed))
    # The same deterministic run twice: once timed by the wall clock, once by process CPU time.
    wall = sow.run_market(params, {"gpu": cap}, sows, real, clock=time.perf_counter)
    cpu = sow.run_market(params, {"gpu": cap}, sows, real, clock=time.process_time)
    return {
        "bench": "sow",
        "case": f"admission-{n_sows}sows-C{cap}",
        "sows": n_sows,
        "births": births,
        "capacity": cap,
        "time_s": round(statistics.median(wall.admit_seconds), 5),
        "time_max_s": round(max(wall.admit_seconds), 5),
        "cpu_s": round(statistics.median(cpu.admit_seconds), 5),
        "cpu_max_s": round(max(cpu.admit_seconds), 5),
        "admissions": len(wall.admit_seconds),
        "welfare": round(wall.welfare, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> int:
    cases = (
        ("C20-120sows", sow.WorkloadSpec(sows=120, births=20), 20, 8),
        ("C20-240sows", sow.WorkloadSpec(sows=240, births=20), 20, 5),
        ("C20-120sows-revealed", sow.WorkloadSpec(120, 20, duration_revealed=True), 20, 8),
        ("C4-30sows-undersupplied", sow.WorkloadSpec(sows=30, births=20), 4, 20),
    )
    for name, spec, cap, reps in cases:
        print(json.dumps(welfare_case(name, spec, cap, reps)), flush=True)
    # Unprofitable cancellation off (the paper's mechanism as written), beside the lines above:
    # the rule's welfare cost or gain on the same workloads and realisations.
    for name, spec, cap, reps in (cases[0], cases[3]):
        row = welfare_case(f"{name}-rule-off", spec, cap, reps, cancel=False)
        print(json.dumps(row), flush=True)
    for name, spec, cap, count in (
        ("C20-60sows", sow.WorkloadSpec(sows=60, births=10), 20, 20),
        ("C4-30sows-undersupplied", sow.WorkloadSpec(sows=30, births=20), 4, 30),
    ):
        print(json.dumps(workloads_case(name, spec, cap, count)), flush=True)
    print(json.dumps(sim_case(120, 4)), flush=True)
    for n, births, cap in ((50, 20, 20), (200, 40, 20), (800, 80, 40)):
        print(json.dumps(admission_case(n, births, cap)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

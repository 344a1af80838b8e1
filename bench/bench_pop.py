"""Benchmark POP (``walras.allocator.pop``) against the exact solvers; one JSON line per case.

Cases (issue 12's acceptance numbers):

- ``gavel``: Gavel's heterogeneity-aware max-min fairness LP (``max_min_fairness_perf``),
  2,048 single-GPU jobs on 512 GPUs of each of k80/p100/v100, throughputs of Gavel's table
  (``walras.data.gavel``; a seeded synthetic table if it is missing), job types uniform. Exact,
  then k = 2, 4, 8, 16 with the paper's equal capacity split and with ``balance="demand"``.
  ``optimum="central"`` is the policy as shipped (the analytic center of the optimal face,
  Gavel's ECOS answer); ``"vertex"`` is HiGHS's vertex alone (timing only: a vertex is one of
  many optima). ``speedup`` is exact wall time over POP wall time (``cpu_speedup`` the same in
  CPU seconds); ``mean_ratio``/``min_ratio`` are per-job effective throughput
  ``Σ_t thr_jt x_jt`` of POP over exact; ``objective_ratio`` is POP's max-min value (smallest
  normalised throughput) over the exact one. ``gavel_large``: the same at 8,192 jobs on
  3 × 2,048 GPUs, k = 8 and 32 (where the vertex LP's super-linear cost shows).
- ``pricing``: price discovery on paper 000's §6.2 data (log utility), n = 10⁶ and 10⁷ (the
  latter when memory allows), exact vs k = 8 without and with the price-spread repair:
  ``loss_per_job = (U_exact − U_POP)/n`` (negative: POP above the exact solver's ε-optimal
  answer), the merged certificate ``gap_per_job`` and the repair's recovered utility (repair
  tolerance ``REPAIR_TOL`` on the relative price spread).
- ``psdsf``: PS-DSF RDM, K = N = 1,000 (``bench_fairness.instance``), exact vs k = 8: wall time
  of a solve with a sweep budget of about ``RDM_BUDGET_S`` seconds and the certificate reached
  (the exact solver's Theorem 1 violation on the full problem; POP's largest per-shard
  violation, each shard on its own sub-problem, and the merged violation on the full problem).

``time_s`` is wall time, ``cpu_s`` the CPU time of the calling process plus, for POP, the
shard solves' CPU time in worker processes (``shard_cpu_s``). Each case runs in its own
interpreter (``peak_rss_mb`` is its own). Run: ``python bench/bench_pop.py [gavel|pricing|psdsf]``.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

HERE = pathlib.Path(__file__).parent
GAVEL_KS = (2, 4, 8, 16)
PRICING_NS = (1_000_000, 10_000_000)
BIG_NEEDS_GB = 8.0
RDM_BUDGET_S = 60.0
REPAIR_TOL = 1e-3  # relative price spread the repair aims for (plain POP at 10⁷: about 3e-3)
RDM_TOL = 1e-6


def _rss() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _shard_cpu(run: Any) -> float:
    return float(sum(s.cpu_s for s in run.shards)) if run.workers > 1 else 0.0


def gavel_table() -> tuple[np.ndarray[Any, Any], str]:
    """(job types × [k80, p100, v100]) single-GPU throughputs, and where they came from."""
    types = ("k80", "p100", "v100")
    try:
        from walras.data.gavel import open_throughputs

        with open_throughputs() as f:
            data = json.load(f)
    except (ImportError, OSError):
        rng = np.random.default_rng(0)
        base = rng.uniform(1.0, 20.0, size=(26, 1))
        return base * np.array([1.0, 2.5, 4.0]) * rng.uniform(0.7, 1.3, (26, 3)), "synthetic"
    keys = sorted(k for k in data["v100"] if k.endswith(", 1)"))
    table = np.array([[data[t][k]["null"] for t in types] for k in keys])
    return table, "walras.data.gavel"


def run_gavel(J: int = 2048, per_type: int = 512, ks: tuple[int, ...] = GAVEL_KS,
              optima: tuple[str, ...] = ("central", "vertex")) -> list[dict[str, Any]]:  # fmt: skip
    from walras.allocator import gavel, pop
    from walras.allocator.gavel.max_min_fairness import MaxMinFairness, coefficients

    table, source = gavel_table()
    rng = np.random.default_rng(0)
    thr = table[rng.integers(0, len(table), J)]
    inputs = gavel.GavelInputs(
        throughputs=thr,
        scale_factors=np.ones(J, dtype=np.int64),
        capacity=np.full(3, float(per_type)),
        job_ids=np.arange(J),
    )
    # The max-min objective's per-job value (Gavel's normalised effective throughput).
    coef = coefficients(inputs, thr)
    lines = []
    for optimum in optima:
        policy = MaxMinFairness(aware=True, central=optimum == "central")
        wall, cpu = time.perf_counter(), time.process_time()
        exact = policy.allocate(inputs)
        t_exact, c_exact = time.perf_counter() - wall, time.process_time() - cpu
        eff_exact = (thr * exact).sum(axis=1)
        s_exact = float((coef * exact).sum(axis=1).min())
        common = {"bench": "pop", "problem": "gavel_max_min_fairness_perf", "jobs": J,
                  "optimum": optimum}  # fmt: skip
        lines.append({**common, "case": "exact", "gpus": 3 * per_type, "source": source,
                      "time_s": round(t_exact, 4), "cpu_s": round(c_exact, 4)})  # fmt: skip
        for balance in ("equal", "demand") if optimum == "central" else ("demand",):
            for k in ks:
                wall, cpu = time.perf_counter(), time.process_time()
                res = pop.solve_gavel(inputs, k, policy, balance=balance)  # type: ignore[arg-type]
                t, c = time.perf_counter() - wall, time.process_time() - cpu
                x = np.asarray(res.allocation)
                ratio = (thr * x).sum(axis=1) / eff_exact
                line = {
                    **common,
                    "case": f"k={k}",
                    "balance": balance,
                    "workers": res.run.workers,
                    "time_s": round(t, 4),
                    "cpu_s": round(c + _shard_cpu(res.run), 4),
                    "speedup": round(t_exact / t, 3),
                    "cpu_speedup": round(c_exact / (c + _shard_cpu(res.run)), 3),
                    "objective_ratio": round(float((coef * x).sum(axis=1).min()) / s_exact, 5),
                    "max_shard_s": round(max(s.wall_s for s in res.run.shards), 4),
                }
                if optimum == "central":  # a vertex is one of many optima: no per-job ratio
                    line["mean_ratio"] = round(float(ratio.mean()), 5)
                    line["min_ratio"] = round(float(ratio.min()), 5)
                lines.append(line)
    return lines


def run_pricing(n: int) -> list[dict[str, Any]]:
    from walras.allocator import pop, pricing
    from walras.allocator.pricing.instances import paper_problem

    problem = paper_problem(n, seed=0)
    common = {"bench": "pop", "problem": "pricing_log", "n": n, "m": problem.m}
    wall, cpu = time.perf_counter(), time.process_time()
    exact = pricing.solve(problem)
    t_exact, c_exact = time.perf_counter() - wall, time.process_time() - cpu
    lines = [
        {**common, "case": "exact", "time_s": round(t_exact, 3), "cpu_s": round(c_exact, 3),
         "gap_per_job": exact.gap / n, "iterations": exact.iterations, "peak_rss_mb": _rss()}
    ]  # fmt: skip
    for repair in (False, True):
        wall, cpu = time.perf_counter(), time.process_time()
        res = pop.solve_pricing(problem, 8, repair=repair, spread_tol=REPAIR_TOL)
        t, c = time.perf_counter() - wall, time.process_time() - cpu
        line: dict[str, Any] = {
            **common,
            "case": "k=8+repair" if repair else "k=8",
            "workers": res.run.workers,
            "time_s": round(t, 3),
            "cpu_s": round(c + _shard_cpu(res.run), 3),
            "speedup": round(t_exact / t, 3),
            "loss_per_job": (exact.utility - res.utility) / n,
            "gap_per_job": res.gap / n,
            "max_shard_gap_per_job": max(s.certificate / max(s.rows, 1) for s in res.run.shards),
            "peak_rss_mb": _rss(),
        }
        if res.repair is not None:
            r = res.repair
            line.update(
                recovered_per_job=r.recovered / n,
                repair_rounds=r.rounds,
                resolves=r.resolves,
                spread_before=round(r.spread_before, 6),
                spread_after=round(r.spread_after, 6),
                within_tolerance=r.within_tolerance,
            )
        lines.append(line)
    return lines


def run_psdsf() -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    from bench_fairness import instance
    from walras.allocator import fairness, pop

    K = N = 1000
    problem: Any = instance(K, N)
    common = {"bench": "pop", "problem": "psdsf_rdm", "K": K, "N": N, "target": RDM_TOL}
    start = time.perf_counter()
    fairness.solve(problem, mode="rdm", max_sweeps=0, method="sweeps")
    budget = max(1, int(RDM_BUDGET_S / max(time.perf_counter() - start, 1e-6)))
    wall, cpu = time.perf_counter(), time.process_time()
    exact = fairness.solve(problem, mode="rdm", tol=1e-9, max_sweeps=budget)
    t, c = time.perf_counter() - wall, time.process_time() - cpu
    lines = [
        {**common, "case": "exact", "time_s": round(t, 3), "cpu_s": round(c, 3),
         "sweeps": exact.sweeps, "budget_sweeps": budget, "converged": exact.converged,
         "certificate": exact.certificate_violation,
         "reached_target": exact.certificate_violation <= RDM_TOL}
    ]  # fmt: skip
    wall, cpu = time.perf_counter(), time.process_time()
    res = pop.solve_fairness(problem, 8, mode="rdm", tol=1e-9, max_sweeps=budget)
    t, c = time.perf_counter() - wall, time.process_time() - cpu
    lines.append(
        {**common, "case": "k=8", "workers": res.run.workers, "time_s": round(t, 3),
         "cpu_s": round(c + _shard_cpu(res.run), 3), "budget_sweeps": budget,
         "converged": res.converged, "shard_certificate": res.shard_violation,
         "merged_certificate": res.certificate_violation,
         "reached_target": res.shard_violation <= RDM_TOL,
         "max_shard_s": round(max(s.wall_s for s in res.run.shards), 3)}
    )  # fmt: skip
    return lines


def main(argv: list[str]) -> int:
    from bench_pricing import available_gb  # same directory: bench/ is on sys.path

    if argv[:1] == ["--case"]:
        name = argv[1]
        if name == "gavel":
            lines = run_gavel()
        elif name == "gavel_large":
            lines = run_gavel(8192, 2048, (8, 32))
        elif name == "pricing":
            lines = run_pricing(int(argv[2]))
        else:
            lines = run_psdsf()
        for line in lines:
            print(json.dumps(line), flush=True)
        return 0
    wanted = set(argv) or {"gavel", "pricing", "psdsf"}
    cases: list[list[str]] = []
    if "gavel" in wanted:
        cases += [["gavel"], ["gavel_large"]]
    if "pricing" in wanted:
        cases += [["pricing", str(n)] for n in PRICING_NS]
    if "psdsf" in wanted:
        cases.append(["psdsf"])
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    failed = 0
    for case in cases:
        if case[0] == "pricing" and int(case[1]) >= 10_000_000 and available_gb() < BIG_NEEDS_GB:
            skip = {"bench": "pop", "problem": "pricing_log", "n": int(case[1]),
                    "skipped": f"needs {BIG_NEEDS_GB} GB free"}  # fmt: skip
            print(json.dumps(skip), flush=True)
            continue
        rc = subprocess.run(
            [sys.executable, __file__, "--case", *case], check=False, env=env
        ).returncode
        if rc != 0:
            print(json.dumps({"bench": "pop", "case": case, "error": f"exit code {rc}"}))
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

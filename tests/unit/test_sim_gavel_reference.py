"""``walras simulate --semantics gavel`` with Walras's Gavel policies against Gavel's own records.

Oracle: ``tests/data/gavel/gavel_results.json``, the makespan, average JCT and utilisation that
Gavel's simulator printed for cases D1–D4 (a peer's own outputs). The mechanics are checked
exactly elsewhere (``test_sim_gavel_replay``). With the default ``--lp-solver highs`` the policies
are ours (HiGHS LPs) where Gavel used ECOS, and an LP with several optima may be solved to a
different one, so the issue's acceptance bounds apply: makespan and average JCT within ±3 %,
utilisation within 0.02; two records miss them (:data:`NOISE_DECIDED`, run as xfail). With
``--lp-solver ecos`` (Gavel's own solver in Gavel's problem shape,
``walras.allocator.gavel.ecos``) every record, those two included, is held to the same bounds
(measured: all equal to Gavel's printed digits; per-solve allocations are compared with Gavel's
in ``test_ecos_lp``).
"""

from __future__ import annotations

from typing import Any

import pytest
from sim_helpers import DATA, TRACES, gavel_records

from walras.allocator import gavel
from walras.sim import engine
from walras.sim.config import SimConfig
from walras.sim.policies import GavelPolicy
from walras.sim.scenario import load_scenario

NOISE_DECIDED = {
    ("D1", "max_min_fairness"): (
        "decided by ECOS's 1e-11 perturbations of a symmetric optimum (rounding Gavel's own "
        "allocations to 9 decimals moves its makespan > 3 %: "
        "test_sim_gavel_replay::test_d1_agnostic_max_min_is_decided_by_solver_noise)"
    ),
    ("D4", "min_total_duration_perf"): (
        "measured: makespan +0.2 %, utilisation −0.010, average JCT −4.4 %. The policy's LP is a "
        "feasibility problem (maximise 1) with a whole polytope of optima; which point ECOS stops "
        "at is not reproduced by walras.allocator.gavel. With Gavel's own allocations the "
        "mechanics are exact (test_sim_gavel_replay, D3 min_total_duration_perf)"
    ),
}
"""Records the HiGHS policies do not reproduce to ±3 % (each reason says why and by how much):
run, not held to the band, and reported in docs/simulate.md. ``--lp-solver ecos`` reproduces
them (:func:`test_matches_gavel_record_with_ecos`)."""

TRACES_ALL = {**TRACES, "D3": DATA / "minimize_makespan.trace"}

ECOS_CASES = ("D1", "D2", "D3", "D4")
"""Records run with ``--lp-solver ecos`` (D5's take minutes: ``bench``)."""


def _params() -> list[Any]:
    out = []
    for r in gavel_records("D1", "D2", "D4"):
        marks: list[Any] = [] if r["case"] == "D1" else [pytest.mark.slow]
        reason = NOISE_DECIDED.get((r["case"], r["policy"]))
        if reason is not None:
            marks.append(pytest.mark.xfail(reason=reason, strict=False))
        out.append(pytest.param(r, id=f"{r['case']}-{r['policy']}", marks=marks))
    return out


@pytest.mark.parametrize("record", _params())
def test_matches_gavel_record(record: dict[str, Any]) -> None:
    if record["policy"] not in gavel.POLICY_NAMES:
        pytest.skip(f"{record['policy']} is not in walras.allocator.gavel yet")
    _check(record, "highs")


def _ecos_params() -> list[Any]:
    return [
        pytest.param(
            r,
            id=f"{r['case']}-{r['policy']}",
            marks=[] if r["case"] == "D1" else [pytest.mark.slow],
        )
        for r in gavel_records(*ECOS_CASES)
    ]


@pytest.mark.parametrize("record", _ecos_params())
def test_matches_gavel_record_with_ecos(record: dict[str, Any]) -> None:
    _check(record, "ecos")


def _check(record: dict[str, Any], lp_solver: str) -> None:
    scenario = load_scenario(
        TRACES_ALL[record["case"]],
        cluster=record["cluster"],
        gpus_per_node=record["gpus_per_server"],
    )
    config = SimConfig(
        round_s=float(record["round_seconds"]),
        restart_s=float(record["restart_seconds"]),
        seed=record["seed"],
        lp_solver=lp_solver,
    )
    policy = GavelPolicy(record["policy"], seed=record["seed"], lp_solver=lp_solver)
    summary = engine.run(scenario.workload, scenario.cluster, policy, config).summary()
    assert summary["jobs"] == record["n_jobs"]
    assert summary["makespan_s"] == pytest.approx(record["makespan_s"], rel=0.03)
    assert summary["avg_jct_s"] == pytest.approx(record["avg_jct_s"], rel=0.03)
    assert summary["utilization"] == pytest.approx(record["utilization"], abs=0.02)

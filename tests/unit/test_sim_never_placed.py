"""A production-path simulation that cannot end says so, naming the jobs and the policy's reason.

Case worked out by hand: two 1-GPU nodes of ``v100``; job 0 a gang of one pod (400 steps at
2 steps/s), job 1 a gang of two. Under PS-DSF a gang runs on one node, so job 1 fits nowhere
(``GangTooLarge``) while job 0 runs and finishes. From then on nothing runs, nothing is left to
arrive and job 1 waits: before this guard the run went on until its cycle cap (20,000 cycles per
job). Under max-min fairness the same trace finishes (job 1 spans both nodes), the control case.
"""

from __future__ import annotations

import types

import pytest
from sim_helpers import TOY_TABLE, TRACES, toy_trace

from walras.sim import engine
from walras.sim.config import SimConfig
from walras.sim.errors import SimulationStuckError
from walras.sim.scenario import load_scenario
from walras.sim.trace import parse_trace

TRACE = toy_trace((400, 1, 0), (400, 2, 0))


def _run(policy: str) -> engine.SimResult:
    scenario = load_scenario(
        parse_trace(TRACE, source="toy.trace"),
        cluster="v100=2",
        gpus_per_node="1",
        throughputs=TOY_TABLE,
    )
    config = SimConfig(round_s=360.0, semantics="walras")
    return engine.run(
        scenario.workload, scenario.cluster, types.SimpleNamespace(name=policy), config
    )


def test_a_gang_no_node_holds_ends_the_run_with_the_policys_reason() -> None:
    with pytest.raises(SimulationStuckError) as raised:
        _run("psdsf")
    text = str(raised.value)
    assert "1 jobs wait with every GPU idle" in text, text
    # The job's name (walras_mechanics.job_name of index 1) and PS-DSF's own reason.
    assert "job job-00001: GangTooLarge: under PS-DSF a gang runs on one node; 2 pods" in text


def test_the_same_trace_ends_under_a_policy_that_spans_nodes() -> None:
    # The jobs cannot run at once (1 + 2 GPUs > 2) and each needs 200 s alone (400 steps at
    # 2 steps/s), less than a 360 s round, so one runs to its end, then the other: done at 200 s
    # and 400 s, whichever goes first (no restart cost, and the cycle starts the second at the
    # first's completion).
    summary = _run("max-min-fairness").summary()
    assert (summary["jobs"], summary["makespan_s"], summary["avg_jct_s"]) == (2, 400.0, 300.0)


def test_the_cli_names_the_waiting_jobs_and_exits_2() -> None:
    from typer.testing import CliRunner

    from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
    from walras.cli.app import app

    # D4 (100 jobs of Gavel's seed-0 stream) has 8-GPU gangs; under PS-DSF none fits a 4-GPU node.
    args = ["simulate", str(TRACES["D4"]), "--semantics", "walras", "--cluster", "8:8:8"]
    args += ["--gpus-per-node", "4", "--policy", "psdsf", "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and "jobs wait with every GPU idle" in res.output, res.output
    assert "GangTooLarge: under PS-DSF a gang runs on one node; 8 pods" in res.output
    assert "Traceback" not in res.output

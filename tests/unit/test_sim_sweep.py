"""Sweeps: Gavel's arrival stream, and a tiny sweep through the CLI in worker processes."""

from __future__ import annotations

import csv
import json
import pathlib

import numpy as np
import pytest
from sim_helpers import DATA, TRACES
from typer.testing import CliRunner

from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app
from walras.sim.arrivals import poisson_arrivals


def test_poisson_arrivals_are_gavels_stream() -> None:
    # Oracle: Gavel's own generator output for seed 0 (arrival_unit = cumulative unit-mean gaps,
    # written with 6 decimals). At 3600 jobs/hour the mean gap is 1 s, so arrivals in seconds
    # equal arrival_unit up to that rounding (5e-7) plus float summation noise.
    with (DATA / "gavel_continuous_multi_seed0_first200.csv").open() as fh:
        expected = np.array([float(r["arrival_unit"]) for r in csv.DictReader(fh)])
    ours = poisson_arrivals(len(expected), 3600.0, seed=0)
    assert np.abs(ours - expected).max() <= 5e-7 + 1e-9


@pytest.mark.slow  # four runs in worker processes, and matplotlib
def test_sweep_runs_every_combination(tmp_path: pathlib.Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"trace: {TRACES['D1']}\ncluster: '4:4:4'\npolicies: [max_min_fairness_perf]\n"
        "seeds: [0, 1]\narrival_rates: [null, 30]\nrestart_seconds: 0\n"
    )
    res = CliRunner().invoke(
        app, ["simulate", "sweep", str(spec), "--json", "--out", str(tmp_path / "out")]
    )
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    assert [(r["seed"], r["arrival_rate"]) for r in rows] == [
        (0, None),
        (0, 30.0),
        (1, None),
        (1, 30.0),
    ]
    # With the trace's own arrivals (all at 0) the seed only drives the type shuffle, which a
    # _perf policy does not use: both seeds give the same run.
    assert rows[0]["makespan_s"] == rows[2]["makespan_s"]
    assert (tmp_path / "out" / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    with (tmp_path / "out" / "sweep.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 4


def test_sweep_spec_lp_solver_reaches_the_policy(tmp_path: pathlib.Path) -> None:
    # Oracle: Gavel's own D1 max_min_fairness record. The HiGHS path misses its makespan by
    # 7.09 % (test_sim_gavel_reference's SOLVER_DECIDED); only ECOS in Gavel's problem shape
    # lands within the issue's ±3 %, so meeting the band shows the spec's key reached the LP.
    from sim_helpers import gavel_records

    from walras.sim.sweep import load_spec, run_sweep

    (record,) = (r for r in gavel_records("D1") if r["policy"] == "max_min_fairness")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"trace: {TRACES['D1']}\ncluster: '{record['cluster']}'\n"
        f"gpus_per_node: '{record['gpus_per_server']}'\npolicies: [max_min_fairness]\n"
        "lp_solver: ecos\n"
    )
    (row,) = run_sweep(load_spec(spec), workers=1)
    assert row["makespan_s"] == pytest.approx(record["makespan_s"], rel=0.03)
    assert row["avg_jct_s"] == pytest.approx(record["avg_jct_s"], rel=0.03)


def test_sweep_spec_rejects_an_unknown_lp_solver(tmp_path: pathlib.Path) -> None:
    from walras.sim.errors import SimInputError
    from walras.sim.sweep import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"trace: {TRACES['D1']}\npolicies: [fifo]\nlp_solver: gurobi\n")
    with pytest.raises(SimInputError, match=r"lp_solver: expected one of highs, ecos.*'gurobi'"):
        load_spec(spec)

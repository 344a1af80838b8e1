"""``walras generate`` and ``walras solve`` through Typer's CliRunner (no subprocess)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
from pricing_helpers import assert_feasible
from typer.testing import CliRunner

from walras.allocator import pricing
from walras.cli import solve as _solve  # noqa: F401  (registers the commands on app)
from walras.cli.app import app

runner = CliRunner()


def test_generate_then_solve_json(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "p.npz"
    gen = runner.invoke(app, ["generate", str(path), "--n", "3000", "--seed", "4"])
    assert gen.exit_code == 0, gen.output
    res = runner.invoke(app, ["solve", str(path), "--json", "--out", str(tmp_path / "x.npz")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) >= {
        "avg_utility",
        "dual_bound",
        "gap",
        "iterations",
        "converged",
        "prices",
        "time_s",
    }
    assert out["converged"] and out["gap"] <= 1e-3
    assert out["avg_utility"] <= out["dual_bound"]
    assert len(out["prices"]) == 4
    # The written allocation is the solver's, feasible for the generated problem.
    with np.load(path) as data:
        problem = pricing.PricingProblem(data["throughput"], data["capacity"], kind="log")
    with np.load(tmp_path / "x.npz") as sol:
        assert_feasible(problem, sol["allocation"])
        np.testing.assert_allclose(sol["prices"], out["prices"])
        avg_log = float(np.mean(np.log(sol["throughput"])))
        assert abs(avg_log - out["avg_utility"]) < 1e-9


def test_solve_human_output_target(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.npz"
    gen = runner.invoke(app, ["generate", str(path), "--n", "2000", "--utility", "target"])
    assert gen.exit_code == 0, gen.output
    res = runner.invoke(app, ["solve", str(path)])
    assert res.exit_code == 0, res.output
    assert "iteration   0 | utility=" in res.output
    assert "GPU types" in res.output and "utilisation" in res.output
    assert "use 2 types" in res.output and "throughput p50" in res.output
    assert "meet target" in res.output  # the file says target; the summary follows it


def test_solve_on_handmade_npz_with_demand_and_bad_input(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "g.npz"
    np.savez(
        good,
        throughput=np.array([[1.0, 2.0], [0.5, 0.1], [0.3, 0.3]]),
        capacity=np.array([2.0, 1.0]),
        demand=np.array([1.0, 1.0, 0.5]),
        weight=np.array([1.0, 2.0, 1.0]),
    )
    res = runner.invoke(app, ["solve", str(good), "--utility", "alpha", "--alpha", "0.5", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["converged"]
    bad = tmp_path / "b.npz"
    np.savez(bad, throughput=np.array([[1.0, np.nan]]), capacity=np.array([1.0, 1.0]))
    res = runner.invoke(app, ["solve", str(bad)])
    assert res.exit_code == 2
    assert "job 0" in res.output
    missing = tmp_path / "m.npz"
    np.savez(missing, throughput=np.ones((2, 2)))
    res = runner.invoke(app, ["solve", str(missing)])
    assert res.exit_code == 2 and "capacity" in res.output
    res = runner.invoke(app, ["solve", str(good), "--utility", "cubic"])
    assert res.exit_code == 2

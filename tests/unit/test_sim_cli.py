"""``walras simulate`` through Typer's CliRunner: JSON contract, outputs, and one-line errors."""

from __future__ import annotations

import csv
import json
import pathlib

import pytest
from sim_helpers import TRACES, gavel_records
from typer.testing import CliRunner

from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app

runner = CliRunner()

KEYS = {
    "makespan_s",
    "avg_jct_s",
    "jct_p50_s",
    "jct_p95_s",
    "jct_p99_s",
    "utilization",
    "jobs",
    "rounds",
    "restarts",
    "solve_s_mean",
    "solve_s_p95",
    "solve_s_max",
    "wall_s",
}


def _d1(*extra: str) -> list[str]:
    return ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", *extra]


def test_json_is_last_line_with_exact_keys() -> None:
    res = runner.invoke(app, _d1("--json", "--window", "0:10"))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(out) == KEYS | {"avg_jct_window_s"}
    (record,) = [r for r in gavel_records("D1") if r["policy"] == "max_min_fairness_perf"]
    # D1 with Gavel's default policy: Gavel printed these to 3 decimals (see the reference test
    # for the tolerance; the mechanics alone are exact in test_sim_gavel_replay).
    assert out["jobs"] == record["n_jobs"]
    assert out["makespan_s"] == pytest.approx(record["makespan_s"], rel=0.03)
    # The window mean averages jobs 0..9 only; every JCT is at most the makespan (all arrive at 0).
    assert 0 < out["avg_jct_window_s"] <= out["makespan_s"]


@pytest.mark.slow  # matplotlib renders three plots
def test_out_dir_has_csv_and_plots(tmp_path: pathlib.Path) -> None:
    res = runner.invoke(app, _d1("--out", str(tmp_path / "run")))
    assert res.exit_code == 0, res.output
    assert "makespan" in res.stdout
    with (tmp_path / "run" / "jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 20
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    jcts = [float(r["jct_s"]) for r in rows]
    assert summary["avg_jct_s"] == pytest.approx(sum(jcts) / len(jcts), abs=1e-3)
    for name in ("jct_cdf.png", "gpus_busy.png", "queue.png"):
        assert (tmp_path / "run" / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--cluster", "4:4"], "Gavel's form has 3 counts"),
        (["--cluster", "4:4:4", "--policy", "nope"], "unknown policy 'nope'"),
        (["--cluster", "a100=4"], "GPU type 'a100' is not in the throughputs file"),
        (["--cluster", "4:4:4", "--restart-seconds", "400"], "--restart-seconds must be in"),
        (["--cluster", "4:4:4", "--window", "5"], "--window: expected A:B"),
        (["--cluster", "4:4:4", "--semantics", "nope"], "--semantics: 'nope' is not available"),
        (["--cluster", "4:4:4", "--min-run-seconds", "-1"], "--min-run-seconds must be >= 0"),
    ],
)
def test_bad_options_exit_2_with_one_line(args: list[str], expected: str) -> None:
    res = runner.invoke(app, ["simulate", str(TRACES["D1"]), *args])
    assert res.exit_code == 2
    assert expected in res.output
    assert "Traceback" not in res.output


def test_malformed_trace_line_exit_2(tmp_path: pathlib.Path) -> None:
    lines = TRACES["D1"].read_text().splitlines(keepends=True)
    fields = lines[16].split("\t")
    fields[6] = "x"
    lines[16] = "\t".join(fields)
    bad = tmp_path / "trace.trace"
    bad.write_text("".join(lines))
    res = runner.invoke(app, ["simulate", str(bad), "--cluster", "4:4:4"])
    assert res.exit_code == 2
    assert "trace.trace:17: field 7 (scale_factor): expected a positive integer, got 'x'" in (
        " ".join(res.output.split())
    )


def test_missing_trace_exit_2(tmp_path: pathlib.Path) -> None:
    res = runner.invoke(app, ["simulate", str(tmp_path / "none.trace")])
    assert res.exit_code == 2
    assert "cannot read trace" in res.output

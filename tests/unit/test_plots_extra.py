"""Without the ``plots`` extra (matplotlib), plotting commands stop at once with one clear line.

matplotlib is hidden by a ``None`` entry in ``sys.modules``: Python's import system then raises
ImportError for it and ``importlib.util.find_spec`` reports it missing, as for an absent package.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import typer
from sim_helpers import TRACES
from typer.testing import CliRunner

from walras import plotting
from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app
from walras.demo.__main__ import main as demo_main

runner = CliRunner()
HINT = "pip install 'walras[plots]'"


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def _one_clear_line(res: object, exit_code: int = 2) -> None:
    output = res.output  # type: ignore[attr-defined]  # click's Result
    assert res.exit_code == exit_code, output  # type: ignore[attr-defined]
    assert HINT in " ".join(output.split())
    assert "Traceback" not in output


@pytest.mark.usefixtures("no_matplotlib")
def test_pyplot_names_the_extra() -> None:
    assert not plotting.available()
    with pytest.raises(plotting.PlotsUnavailableError, match=r"walras\[plots\]"):
        plotting.pyplot()


@pytest.mark.usefixtures("no_matplotlib")
def test_simulate_out_fails_before_running(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "run"
    res = runner.invoke(
        app, ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", "--out", str(out)]
    )
    _one_clear_line(res)
    assert not out.exists()  # nothing ran, nothing was written


@pytest.mark.usefixtures("no_matplotlib")
def test_simulate_without_out_needs_no_plots() -> None:
    res = runner.invoke(app, ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", "--json"])
    assert res.exit_code == 0, res.output


@pytest.mark.usefixtures("no_matplotlib")
def test_sweep_out_fails_before_running(tmp_path: pathlib.Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"trace: {TRACES['D1']}\ncluster: '4:4:4'\npolicies: [max_min_fairness_perf]\n")
    out = tmp_path / "out"
    res = runner.invoke(app, ["simulate", "sweep", str(spec), "--out", str(out)])
    _one_clear_line(res)
    assert not out.exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_demo_fails_before_starting_a_cluster(tmp_path: pathlib.Path) -> None:
    demo = typer.Typer()
    demo.command()(demo_main)
    res = runner.invoke(demo, ["--out", str(tmp_path / "demo")])
    _one_clear_line(res)
    assert not (tmp_path / "demo").exists()

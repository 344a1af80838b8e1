"""``walras simulate``'s progress bar: when it shows, and that it leaves stdout alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sim_helpers import TRACES
from typer.testing import CliRunner

from walras.cli import sim_progress
from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("json_output", "quiet", "tty", "shown"),
    [
        (False, False, True, True),
        (True, False, True, False),
        (False, True, True, False),
        (False, False, False, False),
        (True, True, False, False),
    ],
)
def test_shown_only_on_a_terminal_without_json_or_quiet(
    json_output: bool, quiet: bool, tty: bool, shown: bool
) -> None:
    assert sim_progress.wanted(json_output=json_output, quiet=quiet, stderr_is_tty=tty) is shown


def _summary(res: Any) -> dict[str, Any]:
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout  # the bar writes to stderr, never to stdout
    out: dict[str, Any] = json.loads(lines[0])
    # Wall-clock measurements of the run itself, the only fields allowed to differ.
    for key in ("wall_s", "solve_s_mean", "solve_s_p95", "solve_s_max"):
        out.pop(key)
    return out


def test_json_output_is_the_same_with_the_bar_running(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", "--json"]
    plain = _summary(runner.invoke(app, args))
    # Force the bar on from the first round, as on a terminal, and record that it really ran.
    started: list[int] = []
    real_update = sim_progress.SimProgress.update

    def update(self: sim_progress.SimProgress, done: int, total: int) -> None:
        real_update(self, done, total)
        if self.bar is not None:
            started.append(done)

    monkeypatch.setattr(sim_progress, "wanted", lambda **_: True)
    monkeypatch.setattr(sim_progress.SimProgress, "DELAY_S", 0.0)
    monkeypatch.setattr(sim_progress.SimProgress, "update", update)
    with_bar = _summary(runner.invoke(app, args))
    assert started, "the bar never started"
    assert started[-1] == plain["jobs"]  # it ends at every job done
    assert with_bar == plain


def test_quiet_is_accepted_and_prints_the_summary() -> None:
    res = runner.invoke(app, ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "makespan" in res.stdout

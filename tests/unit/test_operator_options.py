"""Both entry points of the operator start from the same defaults.

``walras operator`` (Typer flags) and ``kopf run -m walras.operator.kopf_entry`` (``WALRAS_*``
variables over :class:`walras.operator.main.Options`' field defaults) must schedule alike when
nothing is set: the Options the CLI builds from its own defaults equal ``Options()``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from walras.cli.app import app
from walras.operator import main


def test_cli_defaults_are_the_options_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[main.Options] = []

    async def fake_run(options: main.Options) -> None:
        seen.append(options)

    monkeypatch.setattr(main, "run", fake_run)
    monkeypatch.setattr(main, "configure_logging", lambda _fmt: None)
    for field in dataclasses.fields(main.Options):
        monkeypatch.delenv(f"WALRAS_{field.name.upper()}", raising=False)
    result = CliRunner().invoke(app, ["operator"])
    assert result.exit_code == 0, result.output
    (built,) = seen
    defaults = main.Options()
    differ: dict[str, Any] = {
        f.name: (getattr(built, f.name), getattr(defaults, f.name))
        for f in dataclasses.fields(main.Options)
        if getattr(built, f.name) != getattr(defaults, f.name)
    }
    assert differ == {}


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_min_run_seconds_reaches_the_cycle_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--min-run-seconds`` (or ``WALRAS_MIN_RUN_SECONDS``) is the realiser's ``min_run_s``."""
    seen: list[main.Options] = []

    async def fake_run(options: main.Options) -> None:
        seen.append(options)

    monkeypatch.setattr(main, "run", fake_run)
    monkeypatch.setattr(main, "configure_logging", lambda _fmt: None)
    monkeypatch.setenv("WALRAS_MIN_RUN_SECONDS", "45")
    result = CliRunner().invoke(app, ["operator"])
    assert result.exit_code == 0, result.output
    assert seen[-1].min_run_seconds == 45.0
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)  # nothing is contacted: build only makes the client
    built = main.build(
        dataclasses.replace(seen[-1], leader_elect=False, kubeconfig=str(kubeconfig))
    )
    assert built.rounds.config.cycle_options.min_run_s == 45.0
    built.api.close()


def test_negative_min_run_seconds_is_bad_input() -> None:
    result = CliRunner().invoke(app, ["operator", "--min-run-seconds", "-1"])
    assert result.exit_code == 2
    assert "--min-run-seconds" in result.output

"""Both entry points of the operator start from the same defaults.

``walras operator`` (Typer flags) and ``kopf run -m walras.operator.kopf_entry`` (``WALRAS_*``
variables over :class:`walras.operator.main.Options`' field defaults) must schedule alike when
nothing is set: the Options the CLI builds from its own defaults equal ``Options()``.
"""

from __future__ import annotations

import dataclasses
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

"""``walras agent`` command line: flags, environment variables and defaults (no cluster)."""

from __future__ import annotations

import inspect
import re

from typer.testing import CliRunner

from walras.agent import runner as runner_module
from walras.agent import simulate, steps
from walras.cli import agent_cmd, app

runner = CliRunner()


def _help() -> str:
    result = runner.invoke(app, ["agent", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.output)


def test_every_flag_has_its_environment_variable() -> None:
    text = _help()
    for flag in (
        "node-name",
        "aggregate",
        "tau",
        "jitter",
        "damping",
        "mode",
        "kubeconfig",
        "stale-after",
        "aggregate-period",
        "write-tolerance",
        "pace",
        "back-off",
    ):
        env = "WALRAS_" + flag.upper().replace("-", "_")
        assert f"--{flag}" in text, flag
        assert env in text, env


def test_cli_defaults_are_the_simulated_defaults() -> None:
    params = inspect.signature(agent_cmd.agent_command).parameters
    assert params["damping"].default == steps.DEFAULT_DAMPING
    assert params["jitter"].default == steps.DEFAULT_JITTER
    assert params["aggregate_period"].default == simulate.SimConfig().aggregate_period
    assert params["tau"].default == simulate.SimConfig().tau
    # The write rule and the adaptive pace/back-off: the runner's own defaults.
    defaults = runner_module.AgentConfig(node_name="n")
    assert params["write_tolerance"].default == steps.WRITE_TOLERANCE == defaults.write_tolerance
    assert params["pace"].default is defaults.pace is True
    assert params["back_off"].default is defaults.back_off is True


def test_node_name_is_required_without_aggregate() -> None:
    result = runner.invoke(app, ["agent"], env={"WALRAS_NODE_NAME": ""})
    assert result.exit_code != 0
    assert "--node-name is required" in result.output

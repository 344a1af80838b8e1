"""One policy contract: a policy's own arguments reach it from every shell through one builder.

A test policy with one argument (``knob``) is registered the way a new policy would be (its
module's ``@register`` line); with nothing else changed it is reachable from ``walras operator``
flags, ``walras simulate`` and the chart's values schema. The oracle is the policy object the
shell ends up building: the argument it was given, or the error naming it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from sim_helpers import TRACES
from typer.testing import CliRunner

from walras.cli import operator_cmd as _operator_cmd  # noqa: F401  (registers the command)
from walras.cli import simulate as _simulate  # noqa: F401  (registers the command)
from walras.cli.app import app
from walras.core import policies
from walras.core.policies import registry
from walras.core.policies.fifo import FifoAware
from walras.operator import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "charts" / "walras" / "values.schema.json"
runner = CliRunner()


@dataclasses.dataclass(frozen=True, slots=True)
class KnobArgs(policies.PolicyArgs):
    knob: int = dataclasses.field(default=1, metadata={"minimum": 1, "description": "a knob"})


BUILT: list[Any] = []


class KnobPolicy(FifoAware):
    """Gavel's FIFO with a knob it records (what the shells handed it)."""

    name = "knob-test"

    def __init__(self, args: KnobArgs, handle: policies.Handle) -> None:
        super().__init__(args, handle)
        self.knob = args.knob
        BUILT.append(self)


@pytest.fixture
def knob_policy() -> Iterator[str]:
    """The test policy registered as a policy module registers itself, removed afterwards."""
    policies.register("knob-test", summary="a test policy", args=KnobArgs, aliases=("knob_t",))(
        KnobPolicy
    )
    BUILT.clear()
    yield "knob-test"
    registry.unregister("knob-test")
    BUILT.clear()


def _operator(monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[Any, list[main.Options]]:
    seen: list[main.Options] = []

    async def fake_run(options: main.Options) -> None:
        seen.append(options)

    monkeypatch.setattr(main, "run", fake_run)
    monkeypatch.setattr(main, "configure_logging", lambda _fmt: None)
    for field in dataclasses.fields(main.Options):
        monkeypatch.delenv(f"WALRAS_{field.name.upper()}", raising=False)
    return runner.invoke(app, ["operator", *flags]), seen


def test_operator_flags_reach_the_policy(monkeypatch: pytest.MonkeyPatch, knob_policy: str) -> None:
    result, seen = _operator(
        monkeypatch, "--policy", knob_policy, "--policy-arg", f"{knob_policy}.knob=3"
    )
    assert result.exit_code == 0, result.output
    policy = policies.build(main.policy_config(seen[0]))
    assert isinstance(policy, KnobPolicy) and policy.knob == 3


def test_operator_alias_spelling_reaches_the_policy(
    monkeypatch: pytest.MonkeyPatch, knob_policy: str
) -> None:
    result, seen = _operator(monkeypatch, "--policy", "knob_t", "--policy-arg", "knob_t.knob=4")
    assert result.exit_code == 0, result.output
    policy = policies.build(main.policy_config(seen[0]))
    assert policy.name == knob_policy and isinstance(policy, KnobPolicy) and policy.knob == 4


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("knob-test.knob=0", "knob-test.knob: must be >= 1, got 0"),
        ("knob-test.knob=many", "knob-test.knob: 'many' is not an integer"),
        ("knob-test.dial=2", "knob-test.dial: unknown argument (knob-test takes knob)"),
        ("psdsf.mode=both", "psdsf.mode: 'both' is not one of tdm, rdm"),
        ("nope.knob=1", "unknown policy 'nope'"),
        ("knob=1", "expected POLICY.FIELD=VALUE"),
    ],
)
def test_operator_rejects_bad_arguments_in_one_line(
    monkeypatch: pytest.MonkeyPatch, knob_policy: str, item: str, message: str
) -> None:
    result, seen = _operator(monkeypatch, "--policy", knob_policy, "--policy-arg", item)
    assert result.exit_code == 2 and seen == []
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_simulate_reaches_the_policy(knob_policy: str) -> None:
    args = ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", "--json", "--policy", knob_policy]
    result = runner.invoke(app, [*args, "--policy-arg", f"{knob_policy}.knob=5"])
    assert result.exit_code == 0, result.output
    assert [p.knob for p in BUILT] == [5]
    bad = runner.invoke(app, [*args, "--policy-arg", f"{knob_policy}.knob=0"])
    assert bad.exit_code == 2
    assert "knob-test.knob: must be >= 1, got 0" in " ".join(bad.output.split())


def test_chart_values_schema_holds_every_policy_argument(knob_policy: str) -> None:
    """The registry's schema has the new policy's argument; the chart's file is that schema for
    the built-in policies (hack/policy_args_schema.py --write regenerates it)."""
    generated = registry.values_schema()
    assert generated["properties"][knob_policy]["properties"]["knob"] == {
        "type": "integer",
        "minimum": 1,
        "description": "a knob",
        "default": 1,
    }
    jsonschema.validate({knob_policy: {"knob": 3}}, generated)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({knob_policy: {"knob": 0}}, generated)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({knob_policy: {"dial": 3}}, generated)
    chart = json.loads(SCHEMA.read_text())["properties"]["policyArgs"]
    del generated["properties"][knob_policy]
    assert {k: v for k, v in chart.items() if k != "description"} == generated


def test_simulate_psdsf_takes_the_operators_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """``walras simulate --policy psdsf`` runs PS-DSF in the mode the operator's flag names."""
    built: list[Any] = []
    build = policies.build

    def spy(config: policies.PolicyConfig, handle: policies.Handle | None = None) -> Any:
        built.append(build(config, handle))
        return built[-1]

    monkeypatch.setattr(policies, "build", spy)
    args = ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", "--gpus-per-node", "4"]
    result = runner.invoke(
        app, [*args, "--json", "--policy", "psdsf", "--policy-arg", "psdsf.mode=rdm"]
    )
    assert result.exit_code == 0, result.output
    assert [p.mode for p in built] == ["rdm"]
    bad = runner.invoke(app, [*args, "--policy", "psdsf", "--policy-arg", "psdsf.mode=both"])
    assert bad.exit_code == 2
    assert "psdsf.mode: 'both' is not one of tdm, rdm" in " ".join(bad.output.split())


def test_policy_args_need_the_walras_semantics() -> None:
    result = runner.invoke(
        app,
        ["simulate", str(TRACES["D1"]), "--semantics", "gavel", "--policy-arg", "psdsf.mode=rdm"],
    )
    assert result.exit_code == 2
    assert "needs --semantics walras" in " ".join(result.output.split())


def test_every_builtin_argument_default_decodes_to_itself() -> None:
    """``encode`` (what `walras policies` prints) and ``decode`` agree for every policy."""
    for name in policies.names():
        args_type = registry.args_type(name)
        defaults = args_type()
        assert args_type.decode(defaults.encode(), prefix=name) == defaults


def test_kopf_entry_reads_policy_args_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``kopf run -m walras.operator.kopf_entry`` reads WALRAS_POLICY_ARGS as the CLI does
    (whitespace-separated items, as click splits a repeated option's variable)."""
    from walras.operator import kopf_entry

    for field in dataclasses.fields(main.Options):
        monkeypatch.delenv(f"WALRAS_{field.name.upper()}", raising=False)
    monkeypatch.setenv("WALRAS_POLICY", "psdsf")
    monkeypatch.setenv("WALRAS_POLICY_ARGS", "psdsf.mode=rdm price-discovery.backend=numpy")
    options = kopf_entry.options_from_env()
    assert options.policy_args == ("psdsf.mode=rdm", "price-discovery.backend=numpy")
    policy = policies.build(main.policy_config(options))
    assert policy.name == "psdsf" and getattr(policy, "mode", None) == "rdm"


@dataclasses.dataclass(frozen=True, slots=True)
class EveryKind(policies.PolicyArgs):
    flag: bool = False
    count: int = 2
    rate: float = dataclasses.field(default=0.5, metadata={"exclusiveMinimum": 0, "maximum": 1})
    label: str = "x"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, EveryKind()),
        ({"flag": "true", "count": "7", "rate": "1", "label": "y"}, EveryKind(True, 7, 1.0, "y")),
        ({"flag": "off", "rate": "1e-3"}, EveryKind(flag=False, rate=0.001)),
        ({"flag": True, "count": 3, "rate": 0.25}, EveryKind(True, 3, 0.25)),  # YAML values
    ],
)
def test_arguments_decode_from_text_and_values(
    values: dict[str, object], expected: EveryKind
) -> None:
    assert EveryKind.decode(values, prefix="p") == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"flag": "maybe"}, "p.flag: 'maybe' is not a boolean"),
        ({"count": "2.5"}, "p.count: '2.5' is not an integer"),
        ({"count": True}, "p.count: True is not an integer"),
        ({"rate": "nan"}, "p.rate: NaN"),
        ({"rate": "0"}, "p.rate: must be > 0, got 0.0"),
        ({"rate": 1.5}, "p.rate: must be <= 1, got 1.5"),
    ],
)
def test_bad_argument_values_name_the_argument(values: dict[str, object], message: str) -> None:
    with pytest.raises(policies.PolicyArgError) as err:
        EveryKind.decode(values, prefix="p")
    assert message in str(err.value)


def test_the_same_argument_twice_under_two_spellings_is_refused(knob_policy: str) -> None:
    config = policies.PolicyConfig(knob_policy, {knob_policy: {"knob": 2}, "knob_t": {"knob": 3}})
    with pytest.raises(policies.PolicyArgError, match=r"knob-test\.knob: given twice"):
        policies.build(config)

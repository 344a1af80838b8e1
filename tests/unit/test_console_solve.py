"""The console script's Typer-free ``walras solve`` parses exactly as the Typer command does.

Oracle: Typer itself. The Typer command is invoked (CliRunner) with ``run_solve`` replaced by a
recorder; whenever the fast parser accepts a command line, Typer must accept it too and pass the
same keyword arguments. When the fast parser declines, the console script hands the line to
Typer, so nothing is asserted about the value then (only that common forms are accepted).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from walras import console
from walras.cli import solve as cli_solve
from walras.cli.app import app
from walras.solve_command import SOLVE_PARAMS

runner = CliRunner()


def typer_parse(args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments Typer passes to ``run_solve`` for ``walras solve ARGS``, or None
    if Typer rejects the line."""
    seen: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli_solve, "run_solve", lambda **kw: seen.append(kw))
        result = runner.invoke(app, ["solve", *args])
    if result.exit_code != 0:
        return None
    assert len(seen) == 1  # exit 0 means the command ran once
    return seen[0]


FLAGS = [p.flag for p in SOLVE_PARAMS if p.flag is not None]
VALUES = ["p.npz", "log", "1e-3", "2", "-1", "+.5", "0.25", "1_0", "abc", "", "-", "--", "007"]
NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1.", ".5", "-.5e-3", "1E+2", "+3", "1e", "0x10", " 1", "inf", "nan", "1,5"]),
)
TEXT = ["log", "target", "numpy", "cpu", "x.npz", "a b", "é"]
JUNK = st.sampled_from(["--help", "-h", "--max_iter", "--jso", "--json=1", "--", "-", "", "q.npz"])


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """Mostly well-formed ``walras solve`` arguments: the file, options with values of their
    kind (sometimes of another, or malformed), ``--opt=value`` forms, in any order; now and then
    a token only Typer knows what to do with."""
    tokens: list[list[str]] = [[draw(st.sampled_from(["p.npz", "dir/x.npz", "x"]))]]
    for param in draw(st.lists(st.sampled_from(SOLVE_PARAMS[1:]), max_size=6)):
        assert param.flag is not None
        if param.kind is bool:
            tokens.append([param.flag])
            continue
        numeric = param.kind in (int, float)
        if draw(st.integers(0, 3)) == 0:  # a value of another kind, or malformed
            value = draw(st.sampled_from(VALUES) if numeric else NUMBERS)
        else:
            value = draw(NUMBERS if numeric else st.sampled_from(TEXT))
        tokens.append([f"{param.flag}={value}"] if draw(st.booleans()) else [param.flag, value])
    if draw(st.integers(0, 4)) == 0:
        tokens.append([draw(JUNK)])
    order = draw(st.permutations(range(len(tokens))))
    return [token for i in order for token in tokens[i]]


@settings(max_examples=150, deadline=None)
@given(command_lines())
def test_fast_parser_accepts_only_what_typer_accepts_with_the_same_values(
    args: list[str],
) -> None:
    fast = console.parse_args(SOLVE_PARAMS, args)
    if fast is not None:
        assert typer_parse(args) == fast


@pytest.mark.parametrize(
    "args",
    [
        ["p.npz", "--json"],
        ["--json", "p.npz"],
        ["p.npz", "--utility", "target", "--eps=1e-4", "--max-iter", "50"],
        ["p.npz", "--alpha", "-0.5", "--backend", "numpy", "--out", "x.npz"],
        ["p.npz", "--eps", "1e-3", "--eps", "2E-2", "--device", "cpu"],
    ],
)
def test_common_command_lines_take_the_fast_path(args: list[str]) -> None:
    fast = console.parse_args(SOLVE_PARAMS, args)
    assert fast is not None
    assert fast == typer_parse(args)


def test_every_parameter_reaches_the_typer_command() -> None:
    # The Typer command's parameters are the table's, with the table's defaults.
    parsed = typer_parse(["p.npz"])
    assert parsed is not None
    assert set(parsed) == {p.name for p in SOLVE_PARAMS}
    assert parsed == {**{p.name: p.default for p in SOLVE_PARAMS}, "problem": pathlib.Path("p.npz")}

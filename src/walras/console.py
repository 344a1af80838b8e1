"""The ``walras`` console script: a plain ``walras solve FILE [OPTIONS]`` runs without Typer.

A user times the whole ``walras solve`` command, and Typer's start-up is a large part of it:
importing Typer and registering every command costs about 0.1 s of CPU, and Typer 0.29 validates
every parameter that is not a boolean flag with a pydantic ``TypeAdapter`` (importing pydantic and
building the adapters: about 0.15 s more), whatever the parameter's type (``str``, ``int``,
``Path`` alike). So ``main`` parses ``solve``'s arguments itself, from the same table that declares
the Typer command (``walras.solve_command.SOLVE_PARAMS``), and hands everything it does not
recognise to Typer: ``--help``, unknown or misspelt options, a missing or second positional
argument, ``--``, values that start with ``-``, numbers outside the plain decimal forms below,
empty values. Typer then prints its usual help or error, so the fast path only ever accepts
command lines that Typer accepts too, and gives them the same values.

Accepted forms: ``--opt VALUE``, ``--opt=VALUE``, a flag (``--json``) without a value, options
before or after the argument, a repeated option's last value wins (as in click). Integers match
``[+-]?[0-9]+`` and floats ``[+-]?(digits[.digits]|.digits)[e[+-]digits]``, e.g.
``walras solve p.npz --eps=1e-4 --max-iter 50 --json`` gives eps = 0.0001, max_iter = 50.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walras.solve_command import Param

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _convert(param: Param, raw: str) -> tuple[bool, Any]:
    """``(True, value)`` for a value the fast path converts exactly as Typer does, else ``(False,
    None)`` (Typer decides: it may accept forms we leave to it, or print its error)."""
    if raw == "" or (raw.startswith("-") and param.kind not in (int, float)):
        return False, None
    if param.kind is int:
        return (True, int(raw)) if _INT.fullmatch(raw) else (False, None)
    if param.kind is float:
        return (True, float(raw)) if _FLOAT.fullmatch(raw) else (False, None)
    return True, param.kind(raw)


def parse_args(params: tuple[Param, ...], args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of a command line that needs no more than plain parsing, or ``None``
    if Typer must look at it."""
    by_flag = {p.flag: p for p in params if p.flag is not None}
    positional = [p for p in params if p.flag is None]
    values: dict[str, Any] = {p.name: p.default for p in params if p.flag is not None}
    given: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            given.append(token)
            continue
        flag, has_value, inline = token.partition("=")
        param = by_flag.get(flag)
        if param is None:  # --help, -h, --, -, an unknown option: Typer's answer
            return None
        if param.kind is bool:
            if has_value:
                return None
            values[param.name] = True
            continue
        if not has_value:
            if i == len(args):
                return None
            inline = args[i]
            i += 1
        # Click takes the next token as the value even if it looks like an option; numbers
        # aside, such values go to Typer.
        ok, value = _convert(param, inline)
        if not ok:
            return None
        values[param.name] = value
    if len(given) != len(positional):
        return None
    for param, raw in zip(positional, given, strict=True):
        ok, value = _convert(param, raw)
        if not ok:
            return None
        values[param.name] = value
    return values


def _exit_now() -> None:
    """End the process with status 0 without the interpreter's teardown.

    ``walras solve`` is done once its output is flushed; tearing the interpreter down (freeing
    about 300 MB of arrays and every module's objects one by one at n = 10⁶) cost about 0.04 s of
    CPU, 8 % of the whole command. Nothing registered with ``atexit`` matters by then: the output
    file, if any, was closed by ``numpy.savez``. If flushing fails (a closed pipe), the exception
    ends the process the ordinary way.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    """Entry point of the ``walras`` console script."""
    args = sys.argv[1:]
    if args[:2] == ["simulate", "generate"]:
        from walras.cli.simulate_generate import main as generate_main

        sys.exit(generate_main(args[2:]))
    if args[:1] == ["solve"]:
        from walras.solve_command import SOLVE_PARAMS, run_solve

        options = parse_args(SOLVE_PARAMS, args[1:])
        if options is not None:
            run_solve(**options)
            _exit_now()
    from walras.cli import main as typer_main

    try:
        typer_main()
    except Exception as exc:
        # A kubeconfig or cluster that cannot be used: one line and exit 1, no traceback.
        from walras.cli import errors

        line = errors.describe(exc)
        if line is None:
            raise
        print(f"walras: {line}", file=sys.stderr)
        sys.exit(1)

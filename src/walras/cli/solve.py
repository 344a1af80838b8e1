"""``walras solve PROBLEM.npz`` and ``walras generate OUT.npz``: price discovery from the shell.

``solve``'s parameters and work live in ``walras.solve_command`` (``SOLVE_PARAMS``, ``run_solve``),
so that the console script can run a plain ``walras solve`` without Typer; this module declares
the Typer command from that same table (its signature is built from it), so ``walras solve
--help``, option errors and Typer's CliRunner see exactly the parameters the fast path parses.
``generate`` writes the synthetic instances of §6.2 of "Allocation of fungible resources via a
fast, scalable price discovery method" (Agrawal, Boyd et al.;
``walras.allocator.pricing.instances``). Used by ``make demo`` and by people trying Walras out;
numpy, rich, the allocator (and torch) are imported inside the commands so that ``walras --help``
and every other command start fast.
"""

from __future__ import annotations

import inspect
import pathlib
from typing import Annotated, Any

import typer

from walras.cli.app import app
from walras.solve_command import REQUIRED, SOLVE_PARAMS, UTILITIES, Param, fail, run_solve


def _typer_parameter(param: Param) -> inspect.Parameter:
    """``param`` as a keyword parameter Typer reads: ``Annotated[type, typer.Option(...)]``."""
    info: Any = (
        typer.Argument(help=param.help)
        if param.flag is None
        else typer.Option(param.flag, help=param.help)
    )
    kind: Any = param.kind | None if param.optional else param.kind
    return inspect.Parameter(
        param.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=inspect.Parameter.empty if param.default is REQUIRED else param.default,
        annotation=Annotated[kind, info],
    )


def solve_command(**options: Any) -> None:
    """Solve a price-discovery problem stored in an .npz file."""
    run_solve(**options)


# Typer reads a command's parameters from its signature and type hints: both come from the table.
_SIGNATURE = inspect.Signature([_typer_parameter(p) for p in SOLVE_PARAMS])
solve_command.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # inspect.signature reads it
solve_command.__annotations__ = {p.name: p.annotation for p in _SIGNATURE.parameters.values()}
app.command("solve")(solve_command)


@app.command("generate")
def generate_command(
    out: Annotated[pathlib.Path, typer.Argument(help="Where to write the .npz file.")],
    n: Annotated[int, typer.Option(help="Number of jobs.")] = 100_000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    utility: Annotated[str, typer.Option(help="log or target (T = 0.2, w ∈ {1, 2}).")] = "log",
) -> None:
    """Write a synthetic instance of the price-discovery paper's §6.2 (4 GPU types)."""
    import numpy as np
    from rich.console import Console

    from walras.allocator.pricing.instances import paper_arrays

    if n < 1:
        raise fail(f"--n must be ≥ 1, got {n}")
    if utility not in UTILITIES:
        raise fail(f"--utility must be one of {', '.join(UTILITIES)}, got {utility!r}")
    arrays = paper_arrays(n, seed=seed, utility=utility)
    np.savez(out, utility=np.array(utility), **arrays)
    Console(stderr=True).print(f"wrote {out} ({n} jobs, 4 types, {utility} utility)")

"""The shared Typer application; command modules register themselves on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="walras",
    help="Walras: price discovery and PS-DSF fairness for heterogeneous GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"walras {version('walras')}")
        raise typer.Exit()


@app.callback()
def main(
    show_version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="Print the version and exit."
    ),
) -> None:
    """Walras: price discovery and PS-DSF fairness for heterogeneous GPU clusters."""

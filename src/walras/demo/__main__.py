"""``python -m walras.demo [--rounds 10] [--round-seconds 3] [--jobs 30] [--waves 3] [--out DIR]
[--no-real-nodes]``.

Options are documented in docs/demo.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from walras import plotting
from walras.demo import runner


def main(
    rounds: Annotated[int, typer.Option(min=1, help="Scheduling rounds to watch.")] = 10,
    round_seconds: Annotated[float, typer.Option(min=0.5, help="Operator round length.")] = 3.0,
    jobs: Annotated[int, typer.Option(min=1, help="FungibleJobs to submit.")] = 30,
    out: Annotated[Path, typer.Option(help="Directory for demo.png and operator.log.")] = Path(
        "out"
    ),
    policy: Annotated[str, typer.Option(help="Operator policy.")] = "price-discovery",
    waves: Annotated[
        int, typer.Option(min=1, help="Submit the jobs in this many waves, spread over rounds.")
    ] = 3,
    real_nodes: Annotated[
        bool,
        typer.Option(
            help="Also run real training processes on two real nodes when this machine can "
            "(root on Linux, `make tools`); --no-real-nodes: kwok nodes only."
        ),
    ] = True,
) -> None:
    """Run the full Walras demo on a throw-away local control plane."""
    console = Console()
    if not plotting.available():  # the demo ends with a plot: say so before starting a cluster
        Console(stderr=True).print(f"[red]demo:[/red] {escape(plotting.MISSING)}", highlight=False)
        raise typer.Exit(2)
    options = runner.Options(
        rounds=rounds,
        round_seconds=round_seconds,
        jobs=jobs,
        out=out,
        policy=policy,
        waves=waves,
        real_nodes=None if real_nodes else False,
    )
    try:
        runner.run(options, console)
    except runner.DemoError as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; everything was torn down[/yellow]")
        raise typer.Exit(130) from None


if __name__ == "__main__":
    typer.run(main)

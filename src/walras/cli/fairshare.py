"""``walras fairshare PROBLEM.json --mode tdm|rdm [--json]``: solve a PS-DSF instance from a file.

The JSON file has keys ``capacity`` (K×M), ``demand`` (N×M) and optionally ``weight``,
``eligible``, ``cap`` (``null`` entries mean no cap), ``throughput``, ``tenant_names``,
``node_names``, ``resource_names`` (see ``examples/fairshare-paper.json``). The command prints a
table of tasks per tenant per node with each tenant's total, VDS and dominant resource per node,
or with ``--json`` one object ``{tasks, totals, levels, sweeps, certificate_violation}`` (plus
``converged``, ``ineligible`` and names). JSON has no infinity, so an infinite level (a node
with no open tenant) is written as ``null``. Bad input exits with code 2 and the allocator's
message, which names the tenant/node/resource.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Annotated, Any

import typer

from walras.cli.app import app


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _load(path: pathlib.Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        typer.echo(f"error: cannot read {path}: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    if not isinstance(data, dict):
        typer.echo(f"error: {path} must hold a JSON object", err=True)
        raise typer.Exit(code=2)
    return data


@app.command()
def fairshare(
    problem_file: Annotated[pathlib.Path, typer.Argument(help="PS-DSF problem as JSON.")],
    mode: Annotated[str, typer.Option(help="tdm (time-shared nodes) or rdm.")] = "tdm",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    strict: Annotated[
        bool, typer.Option(help="Reject tenants with no eligible node instead of giving 0.")
    ] = True,
) -> None:
    """Compute the PS-DSF allocation (Khamse-Ashari et al. 2017) of a problem file."""
    import numpy as np

    from walras.allocator.errors import InvalidProblem
    from walras.allocator.fairness import FairnessProblem, solve

    if mode not in ("tdm", "rdm"):
        typer.echo(f"error: --mode must be tdm or rdm, got {mode!r}", err=True)
        raise typer.Exit(code=2)
    data = _load(problem_file)
    try:
        raw_cap = data.get("cap")
        cap = (
            None
            if raw_cap is None
            else np.array([math.inf if c is None else c for c in raw_cap], dtype=np.float64)
        )
        problem = FairnessProblem(
            capacity=np.asarray(data.get("capacity"), dtype=np.float64),
            demand=np.asarray(data.get("demand"), dtype=np.float64),
            weight=data.get("weight"),
            eligible=data.get("eligible"),
            cap=cap,
            throughput=data.get("throughput"),
            tenant_names=data.get("tenant_names"),
            node_names=data.get("node_names"),
            resource_names=data.get("resource_names"),
        )
        result = solve(problem, mode="tdm" if mode == "tdm" else "rdm", strict=strict)
    except (InvalidProblem, ValueError, TypeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc

    if as_json:
        out = {
            "tasks": result.tasks.tolist(),
            "totals": result.totals.tolist(),
            "levels": [_finite_or_none(float(v)) for v in result.levels],
            "sweeps": result.sweeps,
            "certificate_violation": result.certificate_violation,
            "converged": result.converged,
            "ineligible": [
                {"tenant": problem.tenants[n], "reason": why} for n, why in result.ineligible
            ],
            "tenant_names": list(problem.tenants),
            "node_names": list(problem.nodes),
        }
        typer.echo(json.dumps(out))
        return

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"PS-DSF ({mode.upper()}): tasks per tenant per node")
    table.add_column("tenant")
    for node in problem.nodes:
        table.add_column(node, justify="right")
    table.add_column("total", justify="right")
    for n, tenant in enumerate(problem.tenants):
        cells = []
        for i in range(len(problem.nodes)):
            dom = int(result.dominant[n, i])
            if dom < 0:
                cells.append("–")
                continue
            cells.append(
                f"{result.tasks[n, i]:.4g}\n[dim]vds {result.vds[n, i]:.3g} "
                f"{problem.resources[dom]}[/dim]"
            )
        table.add_row(tenant, *cells, f"{result.totals[n]:.6g}")
    table.add_row(
        "[bold]level[/bold]",
        *[f"{v:.4g}" if math.isfinite(v) else "∞" for v in result.levels],
        "",
    )
    console = Console()
    console.print(table)
    console.print(
        f"sweeps {result.sweeps}, converged {result.converged}, "
        f"certificate violation {result.certificate_violation:.3g}"
    )
    for n, why in result.ineligible:
        console.print(f"ineligible: {problem.tenants[n]}: {why}")

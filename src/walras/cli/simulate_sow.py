"""``walras simulate --policy sow``: play statements of work on a simulated cluster.

Inputs: the word ``sow`` with ``--sow-workload N`` (N generated SoWs, seeded by ``--seed``), a
SoW workload YAML file, or StatementOfWork manifests (one or more documents, a ``List`` as
``kubectl get sow -o yaml`` prints it): :func:`walras.sim.sow.load_workload`, which reads each SoW
as the operator does. Prints a table (or with
``--json`` one JSON object as the last stdout line: :meth:`walras.sim.sow.SowSimResult.summary`);
``--out DIR`` writes ``jobs.csv`` (one row per realisation and job) and ``summary.json``. Bad
input exits with code 2 and one line naming the file, the SoW and its field, or the option.
"""

from __future__ import annotations

import csv
import json
import pathlib
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

GENERATED = "sow"
"""The positional word that asks for a generated workload instead of a file."""

DEFAULT_SOWS = 20


def simulate_sow(
    source: pathlib.Path,
    *,
    cluster: str,
    seed: int,
    sow_workload: int | None,
    realisations: int,
    offline: str,
    json_output: bool,
    out: pathlib.Path | None,
) -> None:
    """Run the ``sow`` policy on ``source`` (see the module docstring); exit 2 on bad input."""
    from walras.sim import sow as sim_sow
    from walras.sim.cluster import parse_cluster
    from walras.sim.errors import SimInputError

    try:
        counts = parse_cluster(cluster)
        if source.exists():
            if sow_workload is not None:
                raise SimInputError("--sow-workload: not with a workload file (it lists the SoWs)")
            workload = sim_sow.load_workload(source, counts, seed)
        elif str(source) == GENERATED:
            n = DEFAULT_SOWS if sow_workload is None else sow_workload
            workload = sim_sow.generated_workload(n, counts, seed)
        else:
            raise SimInputError(
                f"{source}: no such file (give a SoW workload YAML, StatementOfWork manifests, "
                f"or `{GENERATED}` with --sow-workload N)"
            )
        if workload.skipped:
            names = ", ".join(workload.skipped)
            Console(stderr=True).print(f"skipped (not a StatementOfWork): {escape(names)}")
        result = sim_sow.run(workload, realisations=realisations, seed=seed, offline=offline)
    except SimInputError as exc:
        # escape: the message quotes the user's own text (a "[0]" in a field path is no markup).
        message = f"[bold red]error:[/] {escape(str(exc))}"
        Console(stderr=True).print(message, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    summary = result.summary()
    if out is not None:
        _write(out, summary, result.job_rows())
        Console(stderr=True).print(f"wrote 2 files to {out}")
    if json_output:
        print(json.dumps(summary))
        return
    _print(summary)


def _write(out: pathlib.Path, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    with (out / "jobs.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["job"])
        writer.writeheader()
        writer.writerows(rows)


def _print(s: dict[str, Any]) -> None:
    caps = ", ".join(f"{g}={c}" for g, c in s["capacity"].items())
    table = Table(title=f"{s['source']} · sow · {caps}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("SoWs / jobs", f"{s['sows']} / {s['jobs']}")
    table.add_row("realisations", f"{s['realisations']}")
    table.add_row("K, D, V", f"{s['K']}, {s['D']}, {s['V']:g}")
    table.add_row("supply sufficient (C' ≥ K log₂ μ)", "yes" if s["supply_sufficient"] else "no")
    table.add_row("welfare (mean)", f"{s['welfare_mean']:.3f}")
    table.add_row("revenue (mean)", f"{s['revenue_mean']:.3f}")
    for key in ("completed", "evicted", "cancelled", "unprofitable", "not_run"):
        table.add_row(f"{key.replace('_', ' ')} rate", f"{s[key + '_rate']:.3f}")
    if s["offline_welfare_mean"] is None:
        table.add_row("offline optimum", "not solved (--offline on to force)")
    else:
        table.add_row("offline optimum (mean)", f"{s['offline_welfare_mean']:.3f}")
        table.add_row(
            "welfare ratio",
            f"{s['ratio_of_means']:.3f} of means; min {s['ratio_min']:.3f}, "
            f"median {s['ratio_median']:.3f}",
        )
        table.add_row("ratio × ln(KDV)", f"{s['ratio_x_log']:.3f} (ln KDV = {s['log_kdv']:.3f})")
    table.add_row("mechanism time", f"{s['wall_s']:.2f} s wall, {s['cpu_s']:.2f} s cpu")
    Console().print(table)

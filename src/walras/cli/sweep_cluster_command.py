"""The command side of ``walras simulate sweep SPEC.yaml --on-cluster``: options checked, the
Job run (:mod:`walras.cli.sweep_cluster`) with a progress bar of completed indexes, then the local
sweep's own table, JSON lines, ``sweep.csv`` and ``sweep.png`` from the collected rows.

Exit status: 2 for a bad spec or option (before anything is created), 1 for a cluster that cannot
be used (the console script's one line, :mod:`walras.cli.errors`), for a cell whose pod cannot
start (a wrong image, say), or for failed cells, each named by its index and the reason its pod
gave; 0 when every cell returned its row.
"""

from __future__ import annotations

import json
import pathlib
import secrets
import sys
from typing import Any

import typer

from walras import __version__, plotting

DEFAULT_IMAGE = f"ghcr.io/walras/walras:{__version__}"


def _error(message: str, code: int) -> typer.Exit:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code=code)


class _Bar:
    """A line once the Job exists, then a rich bar of completed indexes (stderr; the bar on a
    terminal only)."""

    def __init__(self, name: str, header: str, enabled: bool) -> None:
        self.name = name
        self.header = header
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def update(self, done: int, failed: int, total: int) -> None:
        if self.header:
            from rich.console import Console

            Console(stderr=True).print(self.header, highlight=False)
            self.header = ""
        if not self.enabled:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                f"job {self.name}: cells done",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=total)
        self.bar.update(self.task, completed=done + failed)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def sweep_on_cluster(
    spec_path: pathlib.Path,
    *,
    out: pathlib.Path | None,
    json_output: bool,
    image: str | None,
    namespace: str,
    kubeconfig: str | None,
    parallelism: int | None,
    cpu: str,
) -> None:
    from rich.console import Console
    from rich.markup import escape

    from walras.cli import sweep_cluster
    from walras.kube.client import api_client
    from walras.sim import sweep
    from walras.sim.errors import SimInputError

    if out is not None and not plotting.available():  # before the runs, not after them
        raise _error(plotting.MISSING, 2)
    if parallelism is not None and parallelism < 1:
        raise _error(f"--parallelism must be >= 1, got {parallelism}", 2)
    try:
        spec, data = sweep_cluster.bundle(spec_path)
    except SimInputError as exc:
        raise _error(str(exc), 2) from exc
    cells = len(sweep.runs(spec))
    name = f"walras-sweep-{secrets.token_hex(3)}"
    options = sweep_cluster.Options(
        name=name,
        namespace=namespace,
        image=image or DEFAULT_IMAGE,
        parallelism=parallelism or cells,
        cpu=cpu,
    )
    api = sweep_cluster.KubeSweepApi(api_client(kubeconfig))
    err = Console(stderr=True)
    header = f"job {namespace}/{name}: {cells} cells in {options.image}"
    bar = _Bar(name, header, enabled=sys.stderr.isatty())
    try:
        rows, failures = sweep_cluster.run_on_cluster(
            api, options, data, cells, progress=bar.update
        )
    except sweep_cluster.ClusterSweepError as exc:
        bar.stop()
        raise _error(str(exc), 1) from exc
    finally:
        bar.stop()
    if out is not None and rows:
        sweep.write_sweep(rows, out)
    if json_output:
        for row in rows:
            print(json.dumps(row))
    elif rows:
        sweep.print_table(rows, Console())
    for failure in failures:
        err.print(f"[red]cell {failure.index} failed:[/] {escape(failure.reason)}", highlight=False)
    if failures:
        raise typer.Exit(code=1)

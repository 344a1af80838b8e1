"""``walras solve PROBLEM.npz`` and ``walras generate OUT.npz``: price discovery from the shell.

``solve`` reads ``throughput`` (n×m) and ``capacity`` (m), optionally ``demand`` (n or n×m),
``weight`` (n), ``target`` (n) and ``utility`` (a string), runs
``walras.allocator.pricing.solve`` and prints one progress line per iteration (average utility,
average dual bound, gap per job) and a summary table, or with ``--json`` one JSON object
(``time_s`` and ``cpu_s``: wall and CPU time of building the problem and solving it).
``generate`` writes the synthetic instances of paper 000 §6.2
(``walras.allocator.pricing.instances``). Used by ``make demo`` and by people trying Walras out;
numpy, rich, the allocator (and torch) are imported inside the commands so that ``walras --help``
and every other command start fast.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Annotated, Any

import typer

from walras.cli.app import app

UTILITIES = ("linear", "log", "alpha", "target")
OPTIONAL = ("demand", "weight", "target")


def _fail(message: str) -> typer.Exit:
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]error:[/] {message}")
    return typer.Exit(code=2)


def _load(path: pathlib.Path) -> dict[str, Any]:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read {path}: {exc}") from exc
    for a in arrays.values():
        # Nobody writes them: read-only arrays (and the arrays they view) are shared by
        # ``PricingProblem``, not copied (32 MB of throughputs at n = 1e6).
        x: Any = a
        while isinstance(x, np.ndarray):
            x.setflags(write=False)
            x = x.base
    missing = [k for k in ("throughput", "capacity") if k not in arrays]
    if missing:
        raise _fail(f"{path} lacks the array(s) {', '.join(missing)}")
    return arrays


@app.command("solve")
def solve_command(
    problem: Annotated[pathlib.Path, typer.Argument(help="An .npz file (see `walras generate`).")],
    utility: Annotated[
        str | None, typer.Option(help="linear, log, alpha or target (default: the file's, or log).")
    ] = None,
    alpha: Annotated[float, typer.Option(help="Exponent of the alpha-fair utility.")] = 2.0,
    eps: Annotated[float, typer.Option(help="Stop at gap ≤ eps per job.")] = 1e-3,
    backend: Annotated[
        str, typer.Option(help="numpy or torch (auto: numpy unless CUDA).")
    ] = "auto",
    device: Annotated[str | None, typer.Option(help="torch device, e.g. cuda:0.")] = None,
    max_iter: Annotated[int, typer.Option(help="Iteration cap.")] = 100,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    out: Annotated[
        pathlib.Path | None, typer.Option(help="Write allocation, prices, throughput to .npz.")
    ] = None,
) -> None:
    """Solve a price-discovery problem stored in an .npz file."""
    import numpy as np

    from walras.allocator.errors import InvalidProblem
    from walras.allocator.pricing import PricingProblem, solve
    from walras.cli import memory

    memory.keep_freed_memory()
    arrays = _load(problem)
    kind = utility or (str(arrays["utility"]) if "utility" in arrays else "log")
    if kind not in UTILITIES:
        raise _fail(f"--utility must be one of {', '.join(UTILITIES)}, got {kind!r}")
    started, started_cpu = time.perf_counter(), time.process_time()
    try:
        prob = PricingProblem(
            throughput=arrays["throughput"],
            capacity=arrays["capacity"],
            kind=kind,
            alpha=alpha,
            **{k: arrays[k] for k in OPTIONAL if k in arrays},
        )
        result = solve(prob, eps=eps, max_iter=max_iter, backend=backend, device=device)
    except InvalidProblem as exc:
        raise _fail(str(exc)) from exc
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    n = prob.n
    if out is not None:
        np.savez(
            out,
            allocation=result.allocation,
            prices=result.prices,
            throughput=result.throughput,
        )
    if json_output:
        print(
            json.dumps(
                {
                    "n": n,
                    "m": prob.m,
                    "utility": kind,
                    "backend": result.backend,
                    "avg_utility": result.utility / n,
                    "dual_bound": result.dual_bound / n,
                    "gap": result.gap / n,
                    "iterations": result.iterations,
                    "converged": result.converged,
                    "prices": [float(p) for p in result.prices],
                    "time_s": elapsed,
                    "cpu_s": cpu,
                }
            )
        )
        return
    _print_human(prob, result, kind, elapsed)


def _print_human(prob: Any, result: Any, kind: str, elapsed: float) -> None:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    console = Console()
    n = prob.n
    for k, (dual, primal) in enumerate(result.history):
        console.print(
            f"iteration {k:3d} | utility={primal / n: .6f} | dual={dual / n: .6f} "
            f"| gap={(dual - primal) / n:.2e}"
        )
    status = "converged" if result.converged else "NOT converged"
    console.print(
        f"{status} in {result.iterations} iterations, gap {result.gap / n:.2e} per job, "
        f"{elapsed:.3f} s ({result.backend})"
    )
    X = np.asarray(result.allocation)
    used = (prob.demand_matrix() * X).sum(axis=0)
    types = Table(title="GPU types")
    for col in ("type", "price", "capacity", "used", "utilisation"):
        types.add_column(col, justify="right")
    for j in range(prob.m):
        cap = float(prob.capacity[j])
        types.add_row(
            str(j), f"{result.prices[j]:.4f}", f"{cap:g}", f"{used[j]:.1f}", f"{used[j] / cap:.1%}"
        )
    console.print(types)
    shape = Table(title="Jobs")
    shape.add_column("statistic")
    shape.add_column("value", justify="right")
    counts = (X > 1e-9).sum(axis=1)
    for k in (0, 1, 2):
        shape.add_row(f"use {k} type{'s' if k != 1 else ''}", f"{(counts == k).mean():.1%}")
    shape.add_row("idle time > 0", f"{(X.sum(axis=1) < 1 - 1e-6).mean():.1%}")
    t = np.asarray(result.throughput)
    for q in (0, 10, 50, 90, 100):
        shape.add_row(f"throughput p{q}", f"{np.percentile(t, q):.4f}")
    shape.add_row("throughput mean", f"{t.mean():.4f}")
    if kind == "target":
        shape.add_row("meet target", f"{(t >= np.asarray(prob.target) * (1 - 1e-3)).mean():.1%}")
    console.print(shape)


@app.command("generate")
def generate_command(
    out: Annotated[pathlib.Path, typer.Argument(help="Where to write the .npz file.")],
    n: Annotated[int, typer.Option(help="Number of jobs.")] = 100_000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    utility: Annotated[str, typer.Option(help="log or target (T = 0.2, w ∈ {1, 2}).")] = "log",
) -> None:
    """Write a synthetic instance of paper 000 §6.2 (4 GPU types)."""
    import numpy as np
    from rich.console import Console

    from walras.allocator.pricing.instances import paper_arrays

    if n < 1:
        raise _fail(f"--n must be ≥ 1, got {n}")
    if utility not in UTILITIES:
        raise _fail(f"--utility must be one of {', '.join(UTILITIES)}, got {utility!r}")
    arrays = paper_arrays(n, seed=seed, utility=utility)
    np.savez(out, utility=np.array(utility), **arrays)
    Console(stderr=True).print(f"wrote {out} ({n} jobs, 4 types, {utility} utility)")

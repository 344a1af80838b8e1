"""``walras solve PROBLEM.npz``'s options and work, without a command-line framework.

``SOLVE_PARAMS`` is the one declaration of the command's argument and options: the Typer
command (``walras.cli.solve``) builds its signature from it, and the console script
(``walras.console``) parses a plain ``walras solve FILE [OPTIONS]`` with it directly, without
importing Typer: about 0.2 s less CPU per process (half of what the process spends outside
the solve at n = 10⁶), since Typer 0.29 validates every parameter that is not a boolean flag
with a pydantic ``TypeAdapter`` and importing pydantic alone costs about 0.15 s.

``run_solve`` reads ``throughput`` (n×m) and ``capacity`` (m), optionally ``demand`` (n or n×m),
``weight`` (n), ``target`` (n) and ``utility`` (a string), runs
``walras.allocator.pricing.solve`` and prints one progress line per iteration (average utility,
average dual bound, gap per job) and a summary table, or with ``--json`` one JSON object
(``time_s`` and ``cpu_s``: wall and CPU time of building the problem and solving it). Input
errors print ``error: ...`` on stderr and exit with status 2. numpy, rich and the allocator are
imported where used: this module is imported by every ``walras`` process.
"""

from __future__ import annotations

import json
import pathlib
import time
from dataclasses import dataclass
from typing import Any

UTILITIES = ("linear", "log", "alpha", "target")
OPTIONAL = ("demand", "weight", "target")
REQUIRED = object()  # the default of a parameter the user must give


@dataclass(frozen=True)
class Param:
    """One parameter of ``walras solve``.

    ``flag`` is the option's name (``--eps``), or ``None`` for the positional argument;
    ``kind`` is the type a value converts to (``str``, ``int``, ``float``, ``bool`` for a flag
    that takes no value, ``pathlib.Path``); ``optional`` allows ``None`` (the default).
    """

    name: str
    flag: str | None
    kind: type
    default: Any
    help: str
    optional: bool = False


SOLVE_PARAMS = (
    Param("problem", None, pathlib.Path, REQUIRED, "An .npz file (see `walras generate`)."),
    Param(
        "utility",
        "--utility",
        str,
        None,
        "linear, log, alpha or target (default: the file's, or log).",
        optional=True,
    ),
    Param("alpha", "--alpha", float, 2.0, "Exponent of the alpha-fair utility."),
    Param("eps", "--eps", float, 1e-3, "Stop at gap ≤ eps per job."),
    Param("backend", "--backend", str, "auto", "numpy or torch (auto: numpy unless CUDA)."),
    Param("device", "--device", str, None, "torch device, e.g. cuda:0.", optional=True),
    Param("max_iter", "--max-iter", int, 100, "Iteration cap."),
    Param("json_output", "--json", bool, False, "Print one JSON object."),
    Param(
        "out",
        "--out",
        pathlib.Path,
        None,
        "Write allocation, prices, throughput to .npz.",
        optional=True,
    ),
)


def fail(message: str) -> SystemExit:
    """Print ``error: message`` on stderr; the exit (status 2) for the caller to raise."""
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]error:[/] {message}")
    return SystemExit(2)


def _keep_freed_memory() -> None:
    """:func:`walras.memory.keep_freed_memory` (outside ``walras.cli``, whose ``__init__`` imports
    Typer and registers every command: the start-up this module exists to avoid)."""
    from walras import memory

    memory.keep_freed_memory()


def load(path: pathlib.Path) -> dict[str, Any]:
    """The arrays of an .npz file, read-only; exits with status 2 if unusable."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise fail(f"cannot read {path}: {exc}") from exc
    for a in arrays.values():
        # Nobody writes them: read-only arrays (and the arrays they view) are shared by
        # ``PricingProblem``, not copied (32 MB of throughputs at n = 1e6).
        x: Any = a
        while isinstance(x, np.ndarray):
            x.setflags(write=False)
            x = x.base
    missing = [k for k in ("throughput", "capacity") if k not in arrays]
    if missing:
        raise fail(f"{path} lacks the array(s) {', '.join(missing)}")
    return arrays


def run_solve(
    *,
    problem: pathlib.Path,
    utility: str | None,
    alpha: float,
    eps: float,
    backend: str,
    device: str | None,
    max_iter: int,
    json_output: bool,
    out: pathlib.Path | None,
) -> None:
    """Solve the price-discovery problem stored in ``problem`` and print the result."""
    from walras import memory

    memory.small_pages_for_numpy()  # before numpy's import, which reads the setting
    import numpy as np

    from walras.allocator.errors import InvalidProblem
    from walras.allocator.pricing import PricingProblem, solve

    _keep_freed_memory()
    arrays = load(problem)
    kind = utility or (str(arrays["utility"]) if "utility" in arrays else "log")
    if kind not in UTILITIES:
        raise fail(f"--utility must be one of {', '.join(UTILITIES)}, got {kind!r}")
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
        raise fail(str(exc)) from exc
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

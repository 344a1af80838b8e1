"""``import walras.cli`` (what every ``walras`` command and ``walras --help`` pay) stays light.

Heavy libraries are imported inside the commands that need them: a fresh
interpreter that imports the CLI, which registers every command on the Typer app, must not have
loaded any of them. The console script (``walras.console``) runs a plain ``walras solve`` without
Typer, pydantic or rich, and hands ``--help`` and malformed options to Typer.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np

from walras.allocator.pricing.instances import paper_arrays

HEAVY = (
    "numpy",
    "scipy",
    "torch",
    "kopf",
    "kubernetes",
    "matplotlib",
    "rich.table",
    "rich.console",
    "asyncio",
    "walras.allocator",
    "walras.sim",
    "walras.operator",
)


def test_import_cli_loads_no_heavy_library() -> None:
    code = (
        "import json, sys\n"
        "import walras.cli\n"
        "names = {c.name for c in walras.cli.app.registered_commands}\n"
        "print(json.dumps([sorted(sys.modules), sorted(n for n in names if n)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    modules, commands = json.loads(out)
    loaded = [h for h in HEAVY if h in modules]
    assert loaded == []
    assert {"solve", "generate", "simulate", "operator"} <= set(commands)


# Runs the console script's ``main`` with ``argv`` and reports, on stderr, which of ``WATCH`` the
# process imported, however ``main`` ends: returning, SystemExit, or ``os._exit`` (the fast path
# skips the interpreter's teardown, so the report is printed by a wrapper of ``os._exit``).
WATCH = ("typer", "pydantic", "rich", "walras.cli")
CONSOLE = (
    "import json, os, sys\n"
    "sys.argv = ['walras', *json.loads(sys.argv[1])]\n"
    "def report():\n"
    f"    print(json.dumps([m for m in {WATCH!r} if m in sys.modules]), file=sys.stderr)\n"
    "    sys.stderr.flush()\n"
    "real_exit = os._exit\n"
    "os._exit = lambda code: (report(), real_exit(code))\n"
    "try:\n"
    "    from walras.console import main\n"
    "    main()\n"
    "finally:\n"
    "    report()\n"
)


def run_console(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", CONSOLE, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, json.loads(proc.stderr.strip().splitlines()[-1])


def test_console_solve_runs_without_typer_or_pydantic(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "p.npz"
    np.savez(path, utility=np.array("log"), **paper_arrays(3000, seed=2, utility="log"))
    sol = tmp_path / "x.npz"
    proc, loaded = run_console(["solve", str(path), "--eps", "1e-4", "--json", "--out", str(sol)])
    assert proc.returncode == 0, proc.stderr
    assert loaded == []
    out = json.loads(proc.stdout)
    assert out["n"] == 3000 and out["converged"] and out["gap"] <= 1e-4
    # The process skipped the interpreter's teardown: the output file is complete all the same.
    with np.load(sol) as data:
        np.testing.assert_array_equal(data["prices"], out["prices"])
        assert data["allocation"].shape == (3000, 4)
    # Without --json, rich prints the tables; the output is flushed before the process ends.
    proc, loaded = run_console(["solve", str(path)])
    assert proc.returncode == 0 and "GPU types" in proc.stdout and "typer" not in loaded


def test_console_hands_help_and_bad_options_to_typer(tmp_path: pathlib.Path) -> None:
    proc, loaded = run_console(["solve", "--help"])
    assert proc.returncode == 0 and "--max-iter" in proc.stdout and "typer" in loaded
    proc, loaded = run_console(["solve", str(tmp_path / "p.npz"), "--alpha", "abc"])
    assert proc.returncode == 2 and "--alpha" in proc.stderr and "typer" in loaded
    # Input errors found by the command itself: same message and status on the fast path.
    proc, loaded = run_console(["solve", str(tmp_path / "missing.npz"), "--json"])
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "typer" not in loaded

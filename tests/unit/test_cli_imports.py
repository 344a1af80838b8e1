"""``import walras.cli`` (what every ``walras`` command and ``walras --help`` pay) stays light.

Heavy libraries are imported inside the commands that need them (issue 15 item 7): a fresh
interpreter that imports the CLI, which registers every command on the Typer app, must not have
loaded any of them.
"""

from __future__ import annotations

import json
import subprocess
import sys

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

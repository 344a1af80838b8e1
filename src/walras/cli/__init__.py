"""The ``walras`` console script.

Each command lives in its own module and registers itself on ``walras.cli.app.app``. Heavy imports
(kopf, kubernetes, torch) happen inside the command functions so that ``walras --help`` stays fast.
"""

from __future__ import annotations

from walras.cli import (  # noqa: F401  (imported for their @app.command side effect)
    agent_cmd,
    fairshare,
    inspect_cmd,
    operator_cmd,
    simulate,
    solve,
)
from walras.cli.app import app


def main() -> None:
    """Entry point of the console script."""
    app()

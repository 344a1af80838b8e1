"""The allocator is pure: importing it must not pull in Kubernetes, kopf or the upper layers.

Checked two ways: statically (every import statement in the package's source) and dynamically
(a fresh interpreter imports every allocator module and we inspect ``sys.modules``).
"""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import walras.allocator

FORBIDDEN = (
    "kopf",
    "kubernetes",
    "kubernetes_asyncio",
    "aiohttp",
    "prometheus_client",
    "walras.operator",
    "walras.agent",
    "walras.sim",
    "walras.cli",
)
ALLOCATOR_DIR = pathlib.Path(walras.allocator.__file__).parent


def _imported_names(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _is_forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def test_allocator_source_imports_nothing_forbidden() -> None:
    sources = sorted(ALLOCATOR_DIR.rglob("*.py"))
    assert sources, "allocator package has no sources"
    offenders = {
        str(p.relative_to(ALLOCATOR_DIR)): [n for n in _imported_names(p) if _is_forbidden(n)]
        for p in sources
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}


def test_importing_allocator_loads_no_forbidden_module() -> None:
    modules = sorted(
        "walras.allocator." + ".".join(p.relative_to(ALLOCATOR_DIR).with_suffix("").parts)
        for p in ALLOCATOR_DIR.rglob("*.py")
        if p.name != "__init__.py"
    )
    script = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    loaded = json.loads(out)
    assert [m for m in loaded if _is_forbidden(m)] == []

"""Test infrastructure: the local control plane (``devcluster``) used by tests, benches and the
demo. Product code never imports it (an import contract in ``pyproject.toml`` enforces it)."""

"""The simulated cluster: GPU types, counts and nodes (Gavel's "servers").

Spec forms accepted by :func:`parse_cluster`: ``v100=20,p100=20,k80=20`` or Gavel's ``-c 20:20:20``
(V100 : P100 : K80). GPUs per node (:func:`parse_gpus_per_node`): one number for every type
(``4``), per type (``v100=4,p100=4,k80=8``) or Gavel's ``4:4:8``.

Numbering follows Gavel's ``simulate()`` so placements can be compared GPU by GPU: types in sorted
name order (``k80``, ``p100``, ``v100``), each type's nodes in turn, GPU ids 0, 1, 2, … across
them. Types with 0 GPUs are left out (Gavel registers no worker for them). A count must be a
multiple of its node size (Gavel silently drops the remainder; we refuse it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from walras.sim.errors import SimInputError

GAVEL_TYPES = ("v100", "p100", "k80")
"""The order of Gavel's colon form, and of its worker-type walk for ``_perf`` policies."""


@dataclass(frozen=True, slots=True)
class Node:
    """One server: its name, GPU type and the global ids of its GPUs."""

    name: str
    gpu_type: str
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cluster:
    """GPU types in column order (sorted names), GPUs per type, and nodes."""

    gpu_types: tuple[str, ...]
    counts: tuple[int, ...]
    nodes: tuple[Node, ...]

    @property
    def n_gpus(self) -> int:
        return sum(self.counts)

    def gpu_type_of(self) -> tuple[int, ...]:
        """Column index of every GPU id's type."""
        out = [0] * self.n_gpus
        for node in self.nodes:
            col = self.gpu_types.index(node.gpu_type)
            for g in node.gpu_ids:
                out[g] = col
        return tuple(out)

    def describe(self) -> str:
        return ", ".join(f"{t}={c}" for t, c in zip(self.gpu_types, self.counts, strict=True))


def parse_cluster(spec: str) -> dict[str, int]:
    """``v100=20,p100=20,k80=20`` or ``20:20:20`` → ``{type: count}``."""
    text = spec.strip()
    if not text:
        raise SimInputError("--cluster: empty spec")
    if "=" not in text:
        parts = text.split(":")
        if len(parts) != len(GAVEL_TYPES):
            raise SimInputError(
                f"--cluster: {spec!r}: Gavel's form has 3 counts V100:P100:K80, "
                f"or use v100=20,p100=20,k80=20"
            )
        return {
            t: _count(p, f"--cluster: {t}", zero_ok=True)
            for t, p in zip(GAVEL_TYPES, parts, strict=True)
        }
    out = _pairs(text, "--cluster", zero_ok=True)
    if sum(out.values()) == 0:
        raise SimInputError(f"--cluster: {spec!r} has no GPUs")
    return out


def parse_gpus_per_node(spec: str, gpu_types: tuple[str, ...] | list[str]) -> dict[str, int]:
    """``4``, ``4:4:8`` (V100:P100:K80) or ``v100=4,p100=4,k80=8`` → ``{type: gpus per node}``."""
    text = spec.strip()
    if "=" in text:
        given = _pairs(text, "--gpus-per-node", zero_ok=False)
        missing = [t for t in gpu_types if t not in given]
        if missing:
            raise SimInputError(
                f"--gpus-per-node: no node size for GPU type(s) {', '.join(missing)}"
            )
        return {t: given[t] for t in gpu_types}
    if ":" in text:
        parts = text.split(":")
        if len(parts) != len(GAVEL_TYPES):
            raise SimInputError(
                f"--gpus-per-node: {spec!r}: Gavel's form has 3 sizes V100:P100:K80"
            )
        sizes = {
            t: _count(p, f"--gpus-per-node: {t}", zero_ok=False)
            for t, p in zip(GAVEL_TYPES, parts, strict=True)
        }
        other = [t for t in gpu_types if t not in sizes]
        if other:
            raise SimInputError(
                f"--gpus-per-node: the colon form has no size for {', '.join(other)}"
            )
        return {t: sizes[t] for t in gpu_types}
    size = _count(text, "--gpus-per-node", zero_ok=False)
    return {t: size for t in gpu_types}


def build_cluster(counts: Mapping[str, int], gpus_per_node: Mapping[str, int]) -> Cluster:
    """Nodes and GPU ids in Gavel's registration order (see the module docstring)."""
    types = tuple(sorted(t for t, c in counts.items() if c > 0))
    if not types:
        raise SimInputError("--cluster: no GPUs")
    nodes: list[Node] = []
    gpu = 0
    for t in types:
        size = gpus_per_node.get(t, 1)
        if counts[t] % size:
            raise SimInputError(
                f"--gpus-per-node: {t} has {counts[t]} GPUs, not a multiple of {size} per node"
            )
        for n in range(counts[t] // size):
            nodes.append(Node(f"{t}-{n}", t, tuple(range(gpu, gpu + size))))
            gpu += size
    return Cluster(gpu_types=types, counts=tuple(counts[t] for t in types), nodes=tuple(nodes))


def _pairs(text: str, option: str, *, zero_ok: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or not name:
            raise SimInputError(f"{option}: {item.strip()!r} is not of the form TYPE=COUNT")
        if name in out:
            raise SimInputError(f"{option}: GPU type {name!r} given twice")
        out[name] = _count(value, f"{option}: {name}", zero_ok=zero_ok)
    return out


def _count(text: str, what: str, *, zero_ok: bool) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not zero_ok):
        kind = "a non-negative integer" if zero_ok else "a positive integer"
        raise SimInputError(f"{what}: expected {kind}, got {text.strip()!r}")
    return value

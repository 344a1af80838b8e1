"""The policy registry: name → constructor, one line per policy.

Like kube-scheduler's ``plugins/registry.go``: a policy is one module under
``walras.core.policies`` that decorates its class with :func:`register`, plus one import line in
``walras.core.policies.__init__``. The operator's ``--policy`` choices, the chart's
``values.schema.json`` enum (checked by a test) and ``walras simulate --policy`` all come from
:func:`names`, so adding a policy touches nothing else.

Aliases let users type another scheduler's spelling (Gavel's ``max_min_fairness_perf``) for the
same policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from walras.core.policies.base import Policy, PolicyOptions

Factory = Callable[[PolicyOptions], Policy]
F = TypeVar("F", bound=Factory)


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    factory: Factory
    summary: str
    aliases: tuple[str, ...]


_ENTRIES: dict[str, Entry] = {}
_ALIASES: dict[str, str] = {}


class UnknownPolicyError(ValueError):
    """A policy name that is neither registered nor an alias; the message lists the names."""


def register(name: str, *, summary: str, aliases: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Class decorator: register ``factory(options) -> Policy`` under ``name`` (and aliases)."""

    def add(factory: F) -> F:
        for key in (name, *aliases):
            if key in _ENTRIES or key in _ALIASES:
                raise ValueError(f"policy name {key!r} registered twice")
        _ENTRIES[name] = Entry(name, factory, summary, aliases)
        for alias in aliases:
            _ALIASES[alias] = name
        return factory

    return add


def canonical(name: str) -> str:
    """The registered name of ``name`` (itself, or the policy an alias stands for)."""
    if name in _ENTRIES:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    raise UnknownPolicyError(f"unknown policy {name!r}; choose one of {', '.join(names())}")


def create(name: str, options: PolicyOptions | None = None) -> Policy:
    """A new policy object (fresh warm-start state) for ``name`` or one of its aliases.

    With ``options.pop_shards = k > 1`` it is POP over ``k`` instances of the policy
    (:mod:`walras.core.policies.sharded`).
    """
    opts = options or PolicyOptions()
    entry = _ENTRIES[canonical(name)]
    if opts.pop_shards > 1:
        from walras.core.policies.sharded import Sharded

        return Sharded(entry.name, opts.pop_shards, lambda: entry.factory(opts))
    return entry.factory(opts)


def names() -> tuple[str, ...]:
    """Registered policy names, sorted (aliases not included)."""
    return tuple(sorted(_ENTRIES))


def aliases() -> dict[str, str]:
    """Alias → registered name."""
    return dict(sorted(_ALIASES.items()))


def summary(name: str) -> str:
    """One line describing a policy (for ``--help`` and docs)."""
    return _ENTRIES[canonical(name)].summary

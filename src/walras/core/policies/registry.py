"""The policy registry and the one builder every shell uses: name + arguments + handle → policy.

Like kube-scheduler's ``plugins/registry.go``: a policy is one module under
``walras.core.policies`` whose class is decorated with :func:`register` (its name, a summary, its
arguments dataclass, and aliases), plus one import line in ``walras.core.policies.__init__``.

The shells never name a policy or one of its knobs. ``walras operator`` and ``walras simulate``
take ``--policy NAME`` and any number of ``--policy-arg POLICY.FIELD=VALUE``; the chart's
``policyArgs`` map (``{policy: {field: value}}``) renders to the same flags, and its
``values.schema.json`` holds :func:`values_schema`. All of them end in one :class:`PolicyConfig`
that :func:`build` turns into a policy, so a new knob is a field of the policy's arguments and
nothing else.

Arguments given for a policy other than the chosen one are checked too (a typo fails at start,
not when someone switches policy) and then unused. Aliases let users type another scheduler's
spelling (Gavel's ``max_min_fairness_perf``) for the same policy, in ``--policy`` and in
``--policy-arg`` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from walras.core.policies.args import PolicyArgError, PolicyArgs
from walras.core.policies.base import Handle, Policy

Factory = Callable[[Any, Handle], Policy]
F = TypeVar("F", bound=Factory)


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    factory: Factory
    args: type[PolicyArgs]
    summary: str
    aliases: tuple[str, ...]


_ENTRIES: dict[str, Entry] = {}
_ALIASES: dict[str, str] = {}


class UnknownPolicyError(ValueError):
    """A policy name that is neither registered nor an alias; the message lists the names."""


def register(
    name: str,
    *,
    summary: str,
    args: type[PolicyArgs] = PolicyArgs,
    aliases: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Class decorator: register ``factory(args, handle) -> Policy`` under ``name`` (and aliases);
    ``args`` is the dataclass its arguments decode into (no knobs: :class:`PolicyArgs`)."""

    def add(factory: F) -> F:
        for key in (name, *aliases):
            if key in _ENTRIES or key in _ALIASES:
                raise ValueError(f"policy name {key!r} registered twice")
        _ENTRIES[name] = Entry(name, factory, args, summary, aliases)
        for alias in aliases:
            _ALIASES[alias] = name
        return factory

    return add


def unregister(name: str) -> None:
    """Remove ``name`` and its aliases (tests that register a policy of their own clean up)."""
    entry = _ENTRIES.pop(name)
    for alias in entry.aliases:
        del _ALIASES[alias]


def canonical(name: str) -> str:
    """The registered name of ``name`` (itself, or the policy an alias stands for)."""
    if name in _ENTRIES:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    raise UnknownPolicyError(f"unknown policy {name!r}; choose one of {', '.join(names())}")


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """What a shell configures: which policy, every policy's arguments, and POP shards.

    ``args`` maps a policy name (or alias) to its fields' values, as text (flags) or values
    (YAML, Python). ``pop_shards = k > 1`` runs POP over ``k`` instances of the policy
    (:mod:`walras.core.policies.sharded`), whichever the policy.
    """

    name: str = "price-discovery"
    args: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    pop_shards: int = 1


def parse_arg_flags(
    items: Iterable[str], *, flag: str = "--policy-arg"
) -> dict[str, dict[str, str]]:
    """``["psdsf.mode=rdm", …]`` as ``{"psdsf": {"mode": "rdm"}}``; bad items name ``flag``."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        policy, dot, name = key.strip().rpartition(".")
        if not sep or not dot or not policy or not name:
            raise PolicyArgError(
                f"{flag} {item!r}: expected POLICY.FIELD=VALUE, e.g. psdsf.mode=rdm"
            )
        out.setdefault(policy, {})[name] = value.strip()
    return out


def decode_args(name: str, args: Mapping[str, Mapping[str, object]]) -> PolicyArgs:
    """The arguments of policy ``name`` (or alias) from ``args``, entries under any of its
    spellings merged; defaults where nothing is given."""
    entry = _ENTRIES[canonical(name)]
    merged: dict[str, object] = {}
    for key, values in args.items():
        if canonical(key) != entry.name:
            continue
        for arg, value in values.items():
            if arg in merged and merged[arg] != value:
                raise PolicyArgError(
                    f"{entry.name}.{arg}: given twice ({merged[arg]!r} and {value!r})"
                )
            merged[arg] = value
    return entry.args.decode(merged, prefix=entry.name)


def check(config: PolicyConfig) -> None:
    """Raise (:class:`UnknownPolicyError`, :class:`PolicyArgError`) unless ``config`` builds:
    the policy is known, every policy named in ``args`` is known and takes those values, and
    ``pop_shards >= 1``. No policy object is made (no solver is imported)."""
    canonical(config.name)
    for key in config.args:
        try:
            canonical(key)
        except UnknownPolicyError as exc:
            raise PolicyArgError(f"policy arguments for {exc}") from None
        decode_args(key, config.args)
    if config.pop_shards < 1:
        raise PolicyArgError(f"pop_shards must be >= 1, got {config.pop_shards}")


def build(config: PolicyConfig, handle: Handle | None = None) -> Policy:
    """A new policy object (fresh warm-start state) for ``config``, given the shell's ``handle``.

    The one place every shell (operator, simulator, tests) makes its policy.
    """
    check(config)
    entry = _ENTRIES[canonical(config.name)]
    args = decode_args(entry.name, config.args)
    shell = handle or Handle()
    if config.pop_shards > 1:
        from walras.core.policies.sharded import Sharded

        return Sharded(entry.name, config.pop_shards, lambda: entry.factory(args, shell))
    return entry.factory(args, shell)


def create(
    name: str,
    args: Mapping[str, object] | None = None,
    handle: Handle | None = None,
    *,
    pop_shards: int = 1,
) -> Policy:
    """:func:`build` for one policy and its own arguments (``{"mode": "rdm"}``)."""
    return build(PolicyConfig(name, {name: dict(args or {})}, pop_shards), handle)


def args_type(name: str) -> type[PolicyArgs]:
    """The arguments dataclass of ``name`` (or alias)."""
    return _ENTRIES[canonical(name)].args


def names() -> tuple[str, ...]:
    """Registered policy names, sorted (aliases not included)."""
    return tuple(sorted(_ENTRIES))


def aliases() -> dict[str, str]:
    """Alias → registered name."""
    return dict(sorted(_ALIASES.items()))


def summary(name: str) -> str:
    """One line describing a policy (for ``--help`` and docs)."""
    return _ENTRIES[canonical(name)].summary


def values_schema() -> dict[str, Any]:
    """JSON Schema of the chart's ``policyArgs``: one object per policy that takes arguments,
    with its fields (:meth:`~walras.core.policies.args.PolicyArgs.json_schema`)."""
    props = {
        name: _ENTRIES[name].args.json_schema()
        for name in names()
        if _ENTRIES[name].args.json_schema()["properties"]
    }
    return {"type": "object", "additionalProperties": False, "properties": props}

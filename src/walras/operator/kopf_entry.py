"""``kopf run -m walras.operator.kopf_entry``: the operator under kopf's own command line.

Same watchers, round loop and writes as ``walras operator`` (``walras.operator.main``); kopf's
CLI owns the event loop, logging, signals and its liveness endpoint (``--liveness``). Settings
come from the ``WALRAS_*`` environment variables of the ``walras operator`` flags (e.g.
``WALRAS_POLICY``, ``WALRAS_ROUND_SECONDS``, ``WALRAS_KUBECONFIG``, ``WALRAS_LEADER_ELECT``); the
health/metrics HTTP server of ``walras operator`` is not started here. Run it with
``--standalone`` (Walras elects its leader through a Lease, not kopf peering).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from typing import Any

import kopf

from walras.core import snapshot
from walras.operator import cache, handlers, kopf_storage, loop, main


def options_from_env() -> main.Options:
    """``main.Options`` from ``WALRAS_<FIELD>`` variables, defaults as ``walras operator``.

    Derived from the Options fields themselves (the names ``walras operator``'s flags read from
    the environment too), so a new option reaches both entry points without a second list.
    """
    values: dict[str, object] = {}
    for spec in dataclasses.fields(main.Options):
        raw = os.environ.get(f"WALRAS_{spec.name.upper()}")
        if raw is None:
            continue
        default = spec.default
        if isinstance(default, bool):
            values[spec.name] = raw.strip().lower() in ("1", "true", "yes")
        elif isinstance(default, int):
            values[spec.name] = int(raw)
        elif isinstance(default, float):
            values[spec.name] = float(raw)
        elif isinstance(default, tuple):  # repeated flags: whitespace-separated items
            values[spec.name] = tuple(raw.split())
        else:  # strings, and the optional ones (None by default): empty means unset
            values[spec.name] = raw or default
    return main.Options(**values)  # type: ignore[arg-type]  # each value has its field's type


class _Deferred:
    """Stands in for the round loop until the startup handler has built it."""

    def __init__(self) -> None:
        self.target: loop.RoundLoop | None = None

    def poke(self) -> None:
        if self.target is not None:
            self.target.poke()

    def poke_binds(self) -> None:
        if self.target is not None:
            self.target.poke_binds()


STORE = snapshot.Store()
_ROUNDS = _Deferred()
_WATCHER = handlers.Watcher(cache.ClusterCache(STORE), _ROUNDS)
handlers.register(kopf.get_default_registry(), _WATCHER)
_STOP = asyncio.Event()
_LEAN_STOP = threading.Event()
_TASKS: list[asyncio.Task[Any]] = []
_CLIENT: list[Any] = []


@kopf.on.login()
def login(**_: Any) -> Any:
    """kopf's credentials from the same kubeconfig as the writes (see main.connection_info)."""
    return main.connection_info(_CLIENT[0] if _CLIENT else main.api_client(None))


@kopf.on.startup()
async def start_rounds(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Build the round loop (and leader election) before kopf starts watching."""
    settings.posting.enabled = False
    settings.scanning.disabled = True
    kopf_storage.configure(settings)
    op = main.build(options_from_env())
    _CLIENT.append(op.client)
    if op.elector is not None:
        _TASKS.append(asyncio.create_task(op.elector.run(_STOP)))
    rounds = op.rounds
    # The handlers fill the cache the round loop plans on (kopf starts watching after startup);
    # the facts they recorded before the round loop existed carry over.
    rounds.cache.facts = _WATCHER.cluster.facts
    _WATCHER.cluster = rounds.cache
    readiness = await op.readiness()
    _WATCHER.readiness = readiness
    _ROUNDS.target = rounds
    handlers.watch_lean(main.watch_client(op.options.kubeconfig), _WATCHER, _LEAN_STOP)

    async def run() -> None:
        await asyncio.to_thread(rounds.policy.warm_up)
        await readiness.wait()
        await rounds.run(_STOP)

    _TASKS.append(asyncio.create_task(run()))


@kopf.on.cleanup()
async def stop_rounds(**_: Any) -> None:
    _STOP.set()
    _LEAN_STOP.set()
    for task in _TASKS:
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()

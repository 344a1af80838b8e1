"""``kopf run -m walras.operator.kopf_entry``: the operator under kopf's own command line.

Same watches, round loop and writes as ``walras operator`` (``walras.operator.main``): kopf
watches nothing here either (``walras.operator.handlers.watch_all`` does), its CLI owns the event
loop, logging, signals and its liveness endpoint (``--liveness``), and its startup and cleanup
handlers start and stop Walras's parts. Settings
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

from walras.operator import handlers, main


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


_STOP = asyncio.Event()
_WATCH_STOP = threading.Event()
_TASKS: list[asyncio.Task[Any]] = []
_CLIENT: list[Any] = []


@kopf.on.login()
def login(**_: Any) -> Any:
    """kopf's credentials from the same kubeconfig as the writes (see main.connection_info)."""
    return main.connection_info(_CLIENT[0] if _CLIENT else main.api_client(None))


@kopf.on.startup()
async def start_rounds(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Build the round loop (and leader election) and start the watches."""
    # kopf posts no Events (the operator posts its own) and scans nothing: it watches no kind.
    settings.posting.enabled = False
    settings.scanning.disabled = True
    op = main.build(options_from_env())
    _CLIENT.append(op.client)
    if op.elector is not None:
        _TASKS.append(asyncio.create_task(op.elector.run(_STOP)))
    rounds = op.rounds
    readiness = await op.readiness()
    watcher = handlers.Watcher(rounds.cache, rounds, readiness)
    handlers.watch_all(main.watch_client(op.options.kubeconfig), watcher, _WATCH_STOP)

    async def run() -> None:
        await asyncio.to_thread(rounds.policy.warm_up)
        await readiness.wait()
        await rounds.run(_STOP)

    _TASKS.append(asyncio.create_task(run()))


@kopf.on.cleanup()
async def stop_rounds(**_: Any) -> None:
    _STOP.set()
    _WATCH_STOP.set()
    for task in _TASKS:
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()

"""Start the operator: the watches, the round loop, leader election, health and metrics.

Called by ``walras operator`` (``walras.cli.operator_cmd``). Every kind is watched by one
LIST-then-WATCH thread (``walras.operator.handlers.watch_all``); kopf runs nothing here (it
configures the log format, and runs the operator under its own CLI in
``walras.operator.kopf_entry``). One active controller is chosen by the Lease of
``walras.operator.leader.LeaderElector``, and the round loop writes only while it leads; with
``leader_elect=False`` it always writes. The operator posts its own deduplicated Events.

Shutdown: SIGTERM/SIGINT stop the round loop and the watches, and release the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import threading
from dataclasses import dataclass
from typing import Any

import kopf

from walras.core import cycle, policies, snapshot
from walras.kube import client as kubeclient
from walras.kube import nodeallocations
from walras.kube import writes as kubeapi
from walras.operator import adoption, handlers, loop, throughputs

logger = logging.getLogger("walras.operator")


@dataclass(frozen=True, slots=True)
class Options:
    """The ``walras operator`` flags."""

    policy: str = "price-discovery"
    # Every policy's arguments, "POLICY.FIELD=VALUE" (walras.core.policies.registry).
    policy_args: tuple[str, ...] = ()
    round_seconds: float = 360.0
    kubeconfig: str | None = None
    metrics_port: int = 8080
    health_port: int = 8081
    leader_elect: bool = True
    lease_namespace: str = "walras-system"
    lease_name: str = "walras-controller"
    # Where the schedule-history ConfigMaps live: "" = each job's own namespace (needs
    # cluster-wide ConfigMap access); the chart sets its release namespace (one namespaced Role).
    history_namespace: str = ""
    lease_seconds: float = 15.0
    renew_seconds: float = 5.0
    identity: str | None = None
    log_format: str = "text"
    stale_after: float = 30.0
    debounce: float = 0.3
    restart_seconds: float = 10.0  # the CLI default: the realiser prices a restart (core.switching)
    # A gang placed afresh runs at least this long before it is stopped or moved (the CLI
    # default: with 10 s restarts a restart costs at most a sixth of a gang's shortest run).
    min_run_seconds: float = 60.0
    # One-pod gangs that fit their node now are created with spec.nodeName (no pods/binding).
    bind_at_create: bool = True
    hold_seconds: float = 0.0
    history_half_life: float = math.inf
    backfill: bool = False
    pop_shards: int = 1
    # Progress reporting and throughput estimation (walras.operator.throughputs).
    measured_min_samples: int = 3
    mismatch_factor: float = 2.0
    absurd_factor: float = 10.0
    profiling_seconds: float = 0.0
    profile_declared: bool = False


def configure_logging(log_format: str) -> None:
    """Text or JSON logs on stderr (kopf's loggers included)."""
    kopf.configure(
        verbose=False,
        log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL,
        log_prefix=False,
    )
    logging.getLogger().setLevel(logging.INFO)
    # kopf reports every handled event at INFO; that is noise at our volume.
    logging.getLogger("kopf").setLevel(logging.WARNING)
    # urllib3 logs every connection retry with the whole exception; the operator reports failed
    # requests itself, in one line, so its retries are debug-level detail.
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line (no HTTP header dumps, no tracebacks)."""
    text = " ".join(str(exc).split())
    if "HTTP response headers" in text:
        text = text.split("HTTP response headers", 1)[0].strip()
    return f"{type(exc).__name__}: {text[:limit]}"


def api_client(kubeconfig: str | None) -> Any:
    """The operator's ApiClient (see ``walras.kube.client``)."""
    # Many writes of one round run in parallel threads; give each a pooled connection.
    return kubeclient.api_client(kubeconfig, pool_size=32)


def watch_client(kubeconfig: str | None) -> Any:
    """A client for the watches (``handlers.watch_all``): a WATCH holds its connection for
    minutes, kept out of the writes' pool."""
    return kubeclient.api_client(kubeconfig, pool_size=len(handlers.WATCHED) + 1)


def connection_info(api_client: Any) -> kopf.ConnectionInfo:
    """kopf's credentials from the same configuration the writes use (one source of truth).

    kopf's own ``login_via_client`` reloads the default kubeconfig location, which the
    ``kubernetes`` package fixed at import time, so ``--kubeconfig`` would be ignored.
    """
    cfg = api_client.configuration
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    parts = header.split(" ", 1) if header else []
    scheme, token = (
        (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    )
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


def stop_on_signals(flag: asyncio.Event) -> None:
    """SIGTERM and SIGINT set ``flag`` (only the main thread may handle signals)."""
    event_loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            event_loop.add_signal_handler(number, flag.set)


async def _serve(options: Options, ready: Any) -> list[Any]:
    """Health/readiness/metrics endpoints (``walras.operator.health``), when available."""
    servers: list[Any] = []
    if options.health_port < 0 and options.metrics_port < 0:
        return servers
    try:
        from walras.operator import health
    except ImportError as exc:  # pragma: no cover - health.py ships with the package
        logger.warning("health endpoints unavailable: %s", exc)
        return servers
    ports = {p for p in (options.health_port, options.metrics_port) if p >= 0}
    for port in sorted(ports):
        servers.append(await health.serve(port, ready=ready))
    return servers


@dataclass(slots=True)
class Operator:
    """The operator's parts, built from one :class:`Options` by :func:`build` (both entry points:
    ``walras operator`` and ``kopf run -m walras.operator.kopf_entry``)."""

    options: Options
    client: Any
    api: kubeapi.Api
    store: snapshot.Store
    rounds: loop.RoundLoop
    elector: Any

    def is_leader(self) -> bool:
        return True if self.elector is None else bool(self.elector.is_leader)

    async def readiness(self) -> handlers.Readiness:
        """The start-up guard of the round loop (``handlers.Readiness``), after a first contact:
        one LIST of at most one object per watched kind, so an unreachable API server or RBAC
        that does not grant a required kind is said at once instead of by a silent wait."""
        for kind, (path, selector) in handlers.kinds_paths().items():
            try:
                await asyncio.to_thread(
                    kubeapi.list_objects, self.client, path, label_selector=selector, limit=1
                )
            except RuntimeError:
                if kind not in handlers.OPTIONAL:
                    raise
                # refused: its watch delivers an empty listing and lists it again later
        return handlers.Readiness(handlers.WATCHED)


def policy_config(options: Options) -> policies.PolicyConfig:
    """The policy, its arguments and POP shards the flags ask for (checked by the CLI)."""
    return policies.PolicyConfig(
        options.policy, policies.parse_arg_flags(options.policy_args), options.pop_shards
    )


def build(options: Options) -> Operator:
    """Client, writes, store, leader election, the policy's reader and the round loop."""
    from walras.operator import leader

    client = api_client(options.kubeconfig)
    # Stable per pod: a restarted container holds its own Lease instead of waiting it out.
    identity = options.identity or leader.default_identity()
    elector: Any = None
    if options.leader_elect:
        elector = leader.LeaderElector(
            client,
            namespace=options.lease_namespace,
            name=options.lease_name,
            identity=identity,
            lease_seconds=options.lease_seconds,
            renew_seconds=options.renew_seconds,
        )
    store = snapshot.Store()
    # Fenced writes: every request checks, right before it is sent, that we still hold the Lease.
    api = kubeapi.Api(client, fence=elector.holds_lease if elector is not None else None)

    def is_leader() -> bool:
        return True if elector is None else bool(elector.is_leader)

    rounds = loop.RoundLoop(
        store,
        api,
        loop.LoopConfig(
            policy=policy_config(options),
            round_seconds=options.round_seconds,
            debounce=options.debounce,
            cycle_options=cycle.CycleOptions(
                restart_s=options.restart_seconds,
                hold_s=options.hold_seconds,
                history_half_life_s=options.history_half_life,
                backfill=options.backfill,
                min_run_s=options.min_run_seconds,
            ),
            history_namespace=options.history_namespace,
            bind_at_create=options.bind_at_create,
            progress=throughputs.Settings(
                min_samples=options.measured_min_samples,
                mismatch_factor=options.mismatch_factor,
                absurd_factor=options.absurd_factor,
                profiling_seconds=options.profiling_seconds,
                profile_declared=options.profile_declared,
            ),
        ),
        is_leader=is_leader,
        # Reading the agents' NodeAllocations costs nothing until a policy asks (psdsf-distributed).
        distributed_reader=nodeallocations.reader(client, stale_after=options.stale_after),
    )
    return Operator(options, client, api, store, rounds, elector)


async def run(options: Options) -> None:
    """Run until SIGTERM/SIGINT (or the round loop stops)."""
    op = build(options)
    client, api, store, rounds, elector = op.client, op.api, op.store, op.rounds, op.elector
    is_leader = op.is_leader
    warm = asyncio.create_task(asyncio.to_thread(rounds.policy.warm_up), name="warm-up")
    try:
        readiness = await op.readiness()
    except Exception as exc:  # first contact with the cluster: say what to fix, in one line
        logger.error(
            "cannot list the cluster at %s (%s): check --kubeconfig (or the in-cluster "
            "ServiceAccount and its RBAC) and that the API server is reachable",
            client.configuration.host,
            one_line(exc),
        )
        warm.cancel()
        api.close()
        raise SystemExit(1) from None
    watcher = handlers.Watcher(rounds.cache, rounds, readiness)
    watch_stop = threading.Event()
    handlers.watch_all(watch_client(options.kubeconfig), watcher, watch_stop)
    # Jobs and JobSets labelled walras.dev/managed (a client of their own: WATCHes hold it).
    adoption.watch(watch_client(options.kubeconfig), rounds.adoption, rounds.poke, watch_stop)

    stop = asyncio.Event()
    servers = await _serve(options, lambda: readiness.ready() and is_leader())
    signalled = asyncio.Event()
    stop_on_signals(signalled)
    signal_task = asyncio.create_task(signalled.wait(), name="signals")
    tasks: list[asyncio.Task[Any]] = [signal_task]
    if elector is not None:
        tasks.append(asyncio.create_task(elector.run(stop), name="leader"))

    async def rounds_when_ready() -> None:
        await warm
        await readiness.wait()
        logger.info(
            "indexes complete: %d jobs, %d pools, %d nodes, %d pods of Walras and %d others; "
            "policy %s, rounds of %.1f s",
            len(store.jobs),
            len(store.pools),
            len(store.nodes),
            len(store.pods),
            len(store.foreign),
            options.policy,
            options.round_seconds,
        )
        await rounds.run(stop)

    round_task = asyncio.create_task(rounds_when_ready(), name="rounds")
    tasks.append(round_task)
    try:
        done, _ = await asyncio.wait({signal_task, round_task}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None:
                logger.error("%s stopped: %r", task.get_name(), task.exception())
    finally:
        stop.set()
        watch_stop.set()
        signalled.set()
        for task in tasks:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=10)
        for server in servers:
            with contextlib.suppress(Exception):
                await server.close()
        api.close()

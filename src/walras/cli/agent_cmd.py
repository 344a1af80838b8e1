"""``walras agent``: the per-node PS-DSF agent, or (``--aggregate``) the tenant-totals publisher.

``walras agent --node-name NODE`` runs one node's agent (the chart's DaemonSet passes the node
name through ``WALRAS_NODE_NAME`` from the downward API); repeating ``--node-name`` runs several
agents as threads of one process (tests and benchmarks). ``walras agent --aggregate`` runs the
aggregator that publishes ``NodeAllocation/walras-tenant-totals``. Every flag also reads
``WALRAS_<FLAG_UPPER_SNAKE>``. See ``walras.agent.runner`` and ``walras.agent.aggregator``.
"""

from __future__ import annotations

import logging
import signal
import threading
from enum import StrEnum
from typing import Annotated

import typer

from walras.cli.app import app
from walras.kube import client as kubeclient


class Mode(StrEnum):
    tdm = "tdm"
    rdm = "rdm"


class Method(StrEnum):
    scaled = "scaled"
    waterfill = "waterfill"


@app.command("agent")
def agent_command(
    node_name: Annotated[
        list[str] | None,
        typer.Option(
            envvar="WALRAS_NODE_NAME",
            help="Node this agent runs for (repeat to run several agents in one process).",
        ),
    ] = None,
    aggregate: Annotated[
        bool,
        typer.Option(
            "--aggregate",
            envvar="WALRAS_AGGREGATE",
            help="Run the tenant-totals aggregator instead of a node agent.",
        ),
    ] = False,
    tau: Annotated[
        float, typer.Option(envvar="WALRAS_TAU", min=0.01, help="Seconds between agent steps.")
    ] = 1.0,
    jitter: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_JITTER", min=0.0, max=0.9, help="Each period is tau*(1+U(-j,j))."
        ),
    ] = 0.2,
    damping: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_DAMPING",
            min=0.01,
            max=8.0,
            help="Base damping theta0; the step uses min(1, theta0 / concurrency).",
        ),
    ] = 1.0,
    mode: Annotated[Mode, typer.Option(envvar="WALRAS_MODE", help="PS-DSF feasibility.")] = (
        Mode.tdm
    ),
    kubeconfig: Annotated[
        str | None,
        typer.Option(envvar="WALRAS_KUBECONFIG", help="Kubeconfig (default: in-cluster)."),
    ] = None,
    stale_after: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_STALE_AFTER",
            min=0.1,
            help="Seconds after which a NodeAllocation counts as stale.",
        ),
    ] = 30.0,
    aggregate_period: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_AGGREGATE_PERIOD",
            min=0.01,
            help="--aggregate --no-watch: seconds per publish.",
        ),
    ] = 0.1,
    method: Annotated[
        Method,
        typer.Option(
            envvar="WALRAS_METHOD",
            help="Agent update: scaled (best response of the concurrent nodes) or waterfill.",
        ),
    ] = Method.scaled,
    watch: Annotated[
        bool,
        typer.Option(
            envvar="WALRAS_WATCH",
            help="List then watch (agents: jobs, pools, tenants, totals, node; aggregator: "
            "allocations, publishing on change) instead of polling.",
        ),
    ] = True,
    metrics_port: Annotated[
        int,
        typer.Option(
            envvar="WALRAS_METRICS_PORT", min=0, help="Serve /metrics on this port (0: off)."
        ),
    ] = 0,
    write_tolerance: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_WRITE_TOLERANCE",
            min=0.0,
            max=1e-3,
            help="Skip a step's write when every tenant's move is within this fraction of its "
            "published total per eligible node (0: write every step that changes anything).",
        ),
    ] = 1e-5,
    pace: Annotated[
        bool,
        typer.Option(
            envvar="WALRAS_PACE",
            help="Adapt each tenant's step to how its moves went (smaller after a reversal).",
        ),
    ] = True,
    back_off: Annotated[
        bool,
        typer.Option(
            envvar="WALRAS_BACK_OFF",
            help="Lengthen the step period (up to 3 tau) while writes are slow.",
        ),
    ] = True,
) -> None:
    """Run a node agent (distributed PS-DSF) or the tenant-totals aggregator."""
    from walras.agent import aggregator, runner
    from walras.kube.agents import Kube

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    names = list(node_name or [])
    if not aggregate and not names:
        raise typer.BadParameter("--node-name is required (or --aggregate)")
    kube = Kube(kubeclient.api_client(kubeconfig))
    if aggregate:
        aggregator.run(
            kube,
            stop=stop,
            stale_after=stale_after,
            period=aggregate_period,
            use_watch=watch,
            metrics_port=metrics_port,
        )
        return
    configs = [
        runner.AgentConfig(
            node_name=name,
            tau=tau,
            jitter=jitter,
            damping=damping,
            mode=mode.value,
            stale_after=stale_after,
            method=method.value,
            write_tolerance=write_tolerance,
            pace=pace,
            back_off=back_off,
        )
        for name in names
    ]
    runner.run_agents(kube, configs, stop, metrics_port=metrics_port, watch=watch)

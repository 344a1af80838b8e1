"""``walras operator``: run the controller (kopf watchers + the round loop).

Every flag also reads an environment variable ``WALRAS_<FLAG_UPPER_SNAKE>`` (the Helm chart sets
them), e.g. ``--round-seconds`` ← ``WALRAS_ROUND_SECONDS``. kopf and kubernetes are imported inside
the command so that ``walras --help`` stays fast.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from walras.cli.app import app


def policy_name(value: str) -> str:
    """The registered policy ``value`` names (an alias maps to its policy); exit 2 otherwise.

    The choices come from the policy registry (``walras.core.policies``), so a new policy needs no
    change here.
    """
    from walras.core import policies

    try:
        return policies.canonical(value)
    except policies.UnknownPolicyError as exc:
        raise typer.BadParameter(str(exc)) from None


class LogFormat(StrEnum):
    text = "text"
    json = "json"


POLICY_ARG_HELP = (
    "A policy's argument, POLICY.FIELD=VALUE (repeatable), e.g. psdsf.mode=rdm or "
    "price-discovery.backend=numpy; `walras policies` lists each policy's arguments."
)


def policy_args(items: list[str] | None) -> list[str]:
    """``items`` unchanged once the registry has decoded them; exit 2 otherwise.

    Checked while the flags are parsed, before anything starts: the registry names the policy
    and argument at fault (``psdsf.mode: 'both' is not one of tdm, rdm``).
    """
    from walras.core import policies

    try:
        policies.check(policies.PolicyConfig(args=policies.parse_arg_flags(items or [])))
    except (policies.PolicyArgError, policies.UnknownPolicyError) as exc:
        raise typer.BadParameter(str(exc)) from None
    return list(items or [])


@app.command("operator")
def operator_command(
    policy: Annotated[
        str,
        typer.Option(
            envvar="WALRAS_POLICY",
            callback=policy_name,
            help="Allocation policy: a name from the policy registry (`walras policies`).",
        ),
    ] = "price-discovery",
    policy_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-arg", envvar="WALRAS_POLICY_ARGS", callback=policy_args, help=POLICY_ARG_HELP
        ),
    ] = None,
    round_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_ROUND_SECONDS", min=0.05, help="Length of a round (time slice)."
        ),
    ] = 360.0,
    kubeconfig: Annotated[
        str | None,
        typer.Option(envvar="WALRAS_KUBECONFIG", help="Kubeconfig (default: in-cluster)."),
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(envvar="WALRAS_METRICS_PORT", help="Prometheus /metrics (-1: off).")
    ] = 8080,
    health_port: Annotated[
        int, typer.Option(envvar="WALRAS_HEALTH_PORT", help="/healthz and /readyz (-1: off).")
    ] = 8081,
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect/--no-leader-elect",
            envvar="WALRAS_LEADER_ELECT",
            help="Elect one active controller through a coordination.k8s.io Lease.",
        ),
    ] = True,
    lease_namespace: Annotated[
        str, typer.Option(envvar="WALRAS_LEASE_NAMESPACE", help="Namespace of the Lease.")
    ] = "walras-system",
    lease_name: Annotated[
        str, typer.Option(envvar="WALRAS_LEASE_NAME", help="Name of the Lease.")
    ] = "walras-controller",
    history_namespace: Annotated[
        str,
        typer.Option(
            envvar="WALRAS_HISTORY_NAMESPACE",
            help="Namespace of the schedule-history ConfigMaps (empty: each job's namespace). "
            "Without RBAC for configmaps the history stays in job statuses.",
        ),
    ] = "",
    lease_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_LEASE_SECONDS",
            min=1.0,
            help="Lease duration: a standby takes over this long after the last renewal it saw.",
        ),
    ] = 15.0,
    renew_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_RENEW_SECONDS",
            min=0.1,
            help="Seconds between Lease renewals (below 2/3 of --lease-seconds).",
        ),
    ] = 5.0,
    identity: Annotated[
        str | None,
        typer.Option(
            envvar="WALRAS_IDENTITY",
            help="Lease holder identity (default: the pod's name; host-pid outside a pod).",
        ),
    ] = None,
    log_format: Annotated[
        LogFormat, typer.Option(envvar="WALRAS_LOG_FORMAT", help="Log format.")
    ] = LogFormat.text,
    stale_after: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_STALE_AFTER",
            help="psdsf-distributed: seconds after which a NodeAllocation counts as stale.",
        ),
    ] = 30.0,
    restart_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_RESTART_SECONDS",
            min=0.0,
            help=(
                "Seconds a gang placed afresh does no work (checkpoint reload): accounting, and "
                "the realiser's price of a restart (0: Gavel's order, a switch every round)."
            ),
        ),
    ] = 10.0,
    min_run_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_MIN_RUN_SECONDS",
            min=0.0,
            help=(
                "A gang placed afresh runs at least this long before Walras stops or moves it "
                "(0: no minimum): it never pays a restart only to be stopped right away."
            ),
        ),
    ] = 60.0,
    bind_at_create: Annotated[
        bool,
        typer.Option(
            "--bind-at-create/--no-bind-at-create",
            envvar="WALRAS_BIND_AT_CREATE",
            help=(
                "Commit a gang that fits its nodes by creating its last member with "
                "spec.nodeName after the others, then binding those (k creates, k - 1 binds); "
                "with --no-bind-at-create every pod is created unbound and bound through "
                "pods/binding."
            ),
        ),
    ] = True,
    hold_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_HOLD_SECONDS",
            min=0.0,
            help="Realiser: credit a running gang keeps on its GPU type (fewer restarts).",
        ),
    ] = 0.0,
    history_half_life: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_HISTORY_HALF_LIFE",
            min=0.0,
            help="Realiser: half-life (s) of the received-time memory; inf = since arrival.",
        ),
    ] = float("inf"),
    backfill: Annotated[
        bool,
        typer.Option(
            "--backfill/--no-backfill",
            envvar="WALRAS_BACKFILL",
            help="Give GPUs left over by the targets to waiting jobs that can use them.",
        ),
    ] = False,
    pop_shards: Annotated[
        int,
        typer.Option(
            envvar="WALRAS_POP_SHARDS", min=1, help="POP: solve this many job shards (1 = exact)."
        ),
    ] = 1,
    measured_min_samples: Annotated[
        int,
        typer.Option(
            envvar="WALRAS_MEASURED_MIN_SAMPLES",
            min=1,
            help="Samples a measured throughput needs to replace the declared one.",
        ),
    ] = 3,
    mismatch_factor: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_MISMATCH_FACTOR",
            min=1.0,
            help="Declared vs measured throughput off by more: ThroughputMismatch condition.",
        ),
    ] = 2.0,
    absurd_factor: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_ABSURD_FACTOR",
            min=1.0,
            help="Progress faster than this × the job's fastest known rate is ignored.",
        ),
    ] = 10.0,
    profiling_seconds: Annotated[
        float,
        typer.Option(
            envvar="WALRAS_PROFILING_SECONDS",
            help="Profiling slice of a job with no known throughput, per GPU type (running "
            "seconds); 0 = two rounds, negative = no profiling.",
        ),
    ] = 0.0,
    profile_declared: Annotated[
        bool,
        typer.Option(
            "--profile-declared/--no-profile-declared",
            envvar="WALRAS_PROFILE_DECLARED",
            help="Profile the GPU types a job declared in spec.throughput too.",
        ),
    ] = False,
) -> None:
    """Run the Walras controller: FungibleJobs and ResourcePools to pod bindings and status."""
    from walras.operator import main

    options = main.Options(
        policy=policy,
        policy_args=tuple(policy_arg or ()),
        round_seconds=round_seconds,
        kubeconfig=kubeconfig,
        metrics_port=metrics_port,
        health_port=health_port,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        history_namespace=history_namespace,
        lease_seconds=lease_seconds,
        renew_seconds=renew_seconds,
        identity=identity,
        log_format=log_format.value,
        stale_after=stale_after,
        restart_seconds=restart_seconds,
        min_run_seconds=min_run_seconds,
        bind_at_create=bind_at_create,
        hold_seconds=hold_seconds,
        history_half_life=history_half_life,
        backfill=backfill,
        pop_shards=pop_shards,
        measured_min_samples=measured_min_samples,
        mismatch_factor=mismatch_factor,
        absurd_factor=absurd_factor,
        profiling_seconds=profiling_seconds,
        profile_declared=profile_declared,
    )
    main.configure_logging(options.log_format)
    import asyncio  # here, not at the top: every `walras` command starts faster

    asyncio.run(main.run(options))


@app.command("policies")
def policies_command() -> None:
    """List the scheduling policies (the registry behind --policy of operator and simulate)."""
    from rich.console import Console
    from rich.table import Table

    from walras.core import policies

    table = Table(title="Policies")
    table.add_column("name")
    table.add_column("aliases")
    table.add_column("what it does")
    table.add_column("arguments (--policy-arg), defaults")
    aliases = policies.aliases()
    for name in policies.names():
        defaults = policies.registry.args_type(name)().encode()
        table.add_row(
            name,
            ", ".join(a for a, n in aliases.items() if n == name),
            policies.registry.summary(name),
            ", ".join(f"{field}={value}" for field, value in defaults.items()),
        )
    Console().print(table)

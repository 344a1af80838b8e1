"""``walras simulate TRACE``: replay a Gavel trace under a scheduling policy on a simulated cluster.

Prints a summary table (or with ``--json`` one JSON object as the last stdout line) and with
``--out DIR`` writes ``jobs.csv``, ``summary.json`` and PNG plots. ``walras simulate sweep
SPEC.yaml`` runs policies × seeds × arrival rates in worker processes (:mod:`walras.sim.sweep`).
Bad input exits with code 2 and one line naming the file, line, field or option; the simulator is
imported inside the command so that ``walras --help`` stays fast.
"""

from __future__ import annotations

import json
import pathlib
import sys
import types
from typing import Annotated, Any

import typer

from walras import plotting
from walras.cli import sim_progress
from walras.cli.app import app

DEFAULT_CLUSTER = "v100=20,p100=20,k80=20"


def _fail(message: str) -> typer.Exit:
    from rich.console import Console  # rich where used: every `walras` command starts faster

    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def _window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    a, sep, b = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(a), int(b)
    except ValueError:
        raise _fail(f"--window: expected A:B (job ids, B excluded), got {text!r}") from None


@app.command("simulate")
def simulate_command(
    trace: Annotated[
        pathlib.Path,
        typer.Argument(
            help="A Gavel .trace file (10 tab-separated fields per job), or `sweep`"
            " (`walras simulate generate --help` writes traces)."
        ),
    ],
    spec: Annotated[
        pathlib.Path | None,
        typer.Argument(help="With `sweep`: the sweep's YAML spec.", show_default=False),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="Gavel policy name, e.g. max_min_fairness_perf, fifo; a policy of `walras "
            "policies` (with --semantics walras); or sow (statements of work)."
        ),
    ] = "max_min_fairness_perf",
    policy_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-arg",
            help="walras: a policy's argument, POLICY.FIELD=VALUE (repeatable), as `walras "
            "operator --policy-arg` takes it, e.g. psdsf.mode=rdm.",
        ),
    ] = None,
    cluster: Annotated[
        str, typer.Option(help="GPUs per type: v100=20,p100=20,k80=20 or Gavel's 20:20:20.")
    ] = DEFAULT_CLUSTER,
    gpus_per_node: Annotated[
        str, typer.Option(help="GPUs per node: 4, or v100=4,p100=4,k80=8, or 4:4:8.")
    ] = "1",
    throughputs: Annotated[
        pathlib.Path | None,
        typer.Option(help="Gavel simulation_throughputs.json (default: the shipped copy)."),
    ] = None,
    semantics: Annotated[
        str | None,
        typer.Option(
            help="Round mechanics: gavel (Gavel's simulator) or walras (the operator's own core); "
            "default: gavel for Gavel's policy names, walras for the others.",
            show_default=False,
        ),
    ] = None,
    hold_seconds: Annotated[
        float, typer.Option(help="walras: realiser credit for running gangs (s).")
    ] = 0.0,
    backfill: Annotated[
        bool,
        typer.Option("--backfill/--no-backfill", help="walras: leftover GPUs to waiting jobs."),
    ] = False,
    min_run_seconds: Annotated[
        float,
        typer.Option(help="walras: a gang placed afresh runs at least this long (s; 0: none)."),
    ] = 0.0,
    pop_shards: Annotated[int, typer.Option(help="walras: POP shards (1 = exact).")] = 1,
    throughput_noise: Annotated[
        float, typer.Option(help="walras: users declare true × exp(σ·N(0,1)) throughputs.")
    ] = 0.0,
    hide_fraction: Annotated[
        float, typer.Option(help="walras: fraction of each job's GPU types left undeclared.")
    ] = 0.0,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate/--no-estimate",
            help="walras: measured and estimated throughputs replace declared/missing ones.",
        ),
    ] = True,
    lp_solver: Annotated[
        str,
        typer.Option(
            help="gavel: LP solver of Gavel's LP policies, highs or ecos (Gavel's own; "
            "extra walras[ecos])."
        ),
    ] = "highs",
    round_seconds: Annotated[float, typer.Option(help="Round length (s).")] = 360.0,
    restart_seconds: Annotated[
        float, typer.Option(help="Seconds a job loses in a round when its GPUs change.")
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed (Gavel's type shuffle, agnostic FIFO).")] = 0,
    window: Annotated[
        str | None, typer.Option(help="Job ids A:B (B excluded) whose mean JCT is also reported.")
    ] = None,
    tenants: Annotated[
        pathlib.Path | None,
        typer.Option(
            help="walras: Tenant manifests (YAML); jobs belong to tenants by namespace. Reports "
            "guarantee_met, average JCT and GPU-hours per tenant.",
            show_default=False,
        ),
    ] = None,
    quotas: Annotated[
        bool,
        typer.Option(
            "--quotas/--no-quotas",
            help="walras, with --tenants: --no-quotas gives the scheduler the Tenants without "
            "their quotas (the guarantees are still measured).",
        ),
    ] = True,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No progress bar (it is shown only on a terminal)."),
    ] = False,
    out: Annotated[
        pathlib.Path | None, typer.Option(help="Write jobs.csv, summary.json and PNG plots here.")
    ] = None,
    workers: Annotated[int, typer.Option(help="Sweep only: worker processes.")] = 2,
    cell: Annotated[
        int | None,
        typer.Option(
            help="Sweep only: run cell I alone (0-based, in spec order) and print its row as one"
            " JSON line (what each index of --on-cluster runs).",
            show_default=False,
        ),
    ] = None,
    on_cluster: Annotated[
        bool,
        typer.Option("--on-cluster", help="Sweep only: run the cells as a Kubernetes Indexed Job."),
    ] = False,
    image: Annotated[
        str | None,
        typer.Option(
            help="--on-cluster: the Walras image the cells run in (default: the release's,"
            " ghcr.io/walras/walras:VERSION).",
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[str, typer.Option(help="--on-cluster: namespace of the Job.")] = "default",
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="--on-cluster: kubeconfig (default: in-cluster, then $KUBECONFIG)."),
    ] = None,
    parallelism: Annotated[
        int | None,
        typer.Option(
            help="--on-cluster: cells running at once (default: all of them).", show_default=False
        ),
    ] = None,
    cell_cpu: Annotated[
        str, typer.Option(help="--on-cluster: CPU request of each cell's pod.")
    ] = "1",
    sow_workload: Annotated[
        int | None, typer.Option(help="sow: generate N statements of work (TRACE = `sow`).")
    ] = None,
    realisations: Annotated[int, typer.Option(help="sow: realisations to average.")] = 1,
    offline: Annotated[
        str, typer.Option(help="sow: offline optimum: auto (small workloads), on or off.")
    ] = "auto",
) -> None:
    """Simulate a trace under a policy (or `walras simulate sweep SPEC.yaml`; `walras simulate
    generate OUT --jobs N` writes a trace)."""
    from rich.console import Console
    from rich.markup import escape

    from walras.sim.errors import PolicyError, SimInputError, SimulationStuckError

    if policy == "sow" or (str(trace) == "sow" and not trace.exists()):
        # Statements of work: their own workload and mechanism (cli/simulate_sow.py).
        from walras.cli.simulate_sow import simulate_sow

        if spec is not None:
            raise _fail(f"unexpected extra argument {str(spec)!r} with --policy sow")
        simulate_sow(
            trace,
            cluster=cluster,
            seed=seed,
            sow_workload=sow_workload,
            realisations=realisations,
            offline=offline,
            json_output=json_output,
            out=out,
        )
        return
    if sow_workload is not None:
        raise _fail("--sow-workload: only with --policy sow")
    if out is not None and not plotting.available():  # before the run, not after it
        raise _fail(escape(plotting.MISSING))  # escape: "[plots]" is not markup
    if str(trace) == "sweep" and not trace.exists():
        if spec is None:
            raise _fail("usage: walras simulate sweep SPEC.yaml")
        if on_cluster:
            from walras.cli.sweep_cluster_command import sweep_on_cluster

            if cell is not None:
                raise _fail("--cell and --on-cluster: give one of them")
            sweep_on_cluster(
                spec,
                out=out,
                json_output=json_output,
                image=image,
                namespace=namespace,
                kubeconfig=kubeconfig,
                parallelism=parallelism,
                cpu=cell_cpu,
            )
            return
        if cell is not None:
            _sweep_cell(spec, cell)
            return
        _sweep(spec, out, workers, json_output)
        return
    cluster_options = {
        "--cell": cell is not None,
        "--on-cluster": on_cluster,
        "--image": image is not None,
        "--kubeconfig": kubeconfig is not None,
        "--parallelism": parallelism is not None,
    }
    for name, given in cluster_options.items():
        if given:
            raise _fail(f"{name}: only with `walras simulate sweep SPEC.yaml`")
    if spec is not None:
        raise _fail(f"unexpected extra argument {str(spec)!r} (only `sweep` takes a spec)")
    try:
        result = _run(
            trace,
            policy=policy,
            cluster=cluster,
            gpus_per_node=gpus_per_node,
            throughputs=throughputs,
            semantics=semantics or _default_semantics(policy),
            policy_args=policy_arg or [],
            hold_seconds=hold_seconds,
            backfill=backfill,
            min_run_seconds=min_run_seconds,
            pop_shards=pop_shards,
            throughput_noise=throughput_noise,
            hide_fraction=hide_fraction,
            estimate=estimate,
            lp_solver=lp_solver,
            round_seconds=round_seconds,
            restart_seconds=restart_seconds,
            seed=seed,
            window=_window(window),
            tenants=tenants,
            quotas=quotas,
            progress=sim_progress.wanted(
                json_output=json_output, quiet=quiet, stderr_is_tty=sys.stderr.isatty()
            ),
        )
    except (SimInputError, SimulationStuckError) as exc:
        raise _fail(escape(str(exc))) from exc  # literal text: "[ecos]" is no markup
    except PolicyError as exc:  # the policy's solver gave up: not the user's input, exit 1
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from exc
    if out is not None:
        from walras.sim.report import write_outputs

        written = write_outputs(result, out)
        Console(stderr=True).print(f"wrote {len(written)} files to {out}")
    if json_output:
        print(json.dumps(result.summary()))
        return
    _print_summary(result)


def _run(trace: pathlib.Path, *, progress: bool, **kw: Any) -> Any:
    from walras.allocator.errors import InvalidProblem
    from walras.sim import engine, manifests
    from walras.sim.config import SimConfig
    from walras.sim.errors import SimInputError
    from walras.sim.policies import GavelPolicy
    from walras.sim.scenario import load_scenario
    from walras.sim.workload import Workload

    workload: Workload
    if manifests.is_manifest_file(trace):
        # FungibleJob manifests (a YAML list or `kubectl get fjob -A -o yaml`): the cluster
        # comes from the options, the jobs from the file.
        from walras.sim.cluster import build_cluster, parse_cluster, parse_gpus_per_node

        counts = parse_cluster(kw["cluster"])
        types_ = [g for g, c in counts.items() if c > 0]
        built = build_cluster(counts, parse_gpus_per_node(kw["gpus_per_node"], types_))
        workload = manifests.load_manifests(trace, built)
        if workload.warnings:
            from rich.console import Console

            for warning in workload.warnings:
                Console(stderr=True).print(
                    f"[bold yellow]warning:[/] {warning}", highlight=False, soft_wrap=True
                )
    else:
        scenario = load_scenario(
            trace,
            cluster=kw["cluster"],
            gpus_per_node=kw["gpus_per_node"],
            throughputs=kw["throughputs"],
        )
        workload, built = scenario.workload, scenario.cluster
    tenant_docs: tuple[Any, ...] = ()
    if kw["tenants"] is not None:
        from walras.sim.tenants import load_tenants

        if kw["semantics"] != "walras":
            raise SimInputError("--tenants needs --semantics walras (Gavel's mechanics have none)")
        capacity = {t: float(c) for t, c in zip(built.gpu_types, built.counts, strict=True)}
        tenant_docs = load_tenants(kw["tenants"], capacity)
    elif not kw["quotas"]:
        raise SimInputError("--no-quotas: only with --tenants")
    if not kw["min_run_seconds"] >= 0:
        raise SimInputError(f"--min-run-seconds must be >= 0, got {kw['min_run_seconds']}")
    if kw["pop_shards"] < 1:
        raise SimInputError(f"--pop-shards must be >= 1, got {kw['pop_shards']}")
    policy_args = _policy_args(kw["policy"], kw["policy_args"], kw["semantics"])
    config = SimConfig(
        round_s=kw["round_seconds"],
        restart_s=kw["restart_seconds"],
        seed=kw["seed"],
        window=kw["window"],
        semantics=kw["semantics"],
        policy_args=policy_args,
        hold_s=kw["hold_seconds"],
        backfill=kw["backfill"],
        min_run_s=kw["min_run_seconds"],
        pop_shards=kw["pop_shards"],
        throughput_noise=kw["throughput_noise"],
        hide_fraction=kw["hide_fraction"],
        estimate=kw["estimate"],
        lp_solver=kw["lp_solver"],
        tenants=tenant_docs,
        quotas=kw["quotas"],
    )
    if kw["semantics"] != "walras" and (kw["throughput_noise"] or kw["hide_fraction"]):
        raise SimInputError("--throughput-noise and --hide-fraction need --semantics walras")
    if kw["semantics"] == "walras" and kw["lp_solver"] != "highs":
        raise SimInputError("--lp-solver applies to Gavel's policies: it needs --semantics gavel")
    try:
        if kw["semantics"] == "walras":
            policy: Any = _core_policy(kw["policy"])
        else:
            policy = GavelPolicy(kw["policy"], seed=kw["seed"], lp_solver=kw["lp_solver"])
        with sim_progress.SimProgress(enabled=progress) as bar:
            return engine.run(workload, built, policy, config, bar.update)
    except InvalidProblem as exc:
        raise SimInputError(f"policy {kw['policy']}: {exc}") from exc


def _default_semantics(policy: str) -> str:
    """Gavel's mechanics for Gavel's policy names (as before), the operator's core otherwise."""
    from walras.sim.policies import GAVEL_POLICIES

    return "gavel" if policy in GAVEL_POLICIES else "walras"


def _policy_args(policy: str, items: list[str], semantics: str) -> dict[str, dict[str, str]]:
    """``--policy-arg`` items decoded and checked by the policy registry, as the operator does."""
    from walras.core import policies
    from walras.sim.errors import SimInputError

    if items and semantics != "walras":
        raise SimInputError(
            "--policy-arg configures the core's policies: it needs --semantics walras"
        )
    if not items:
        return {}
    try:
        args = policies.parse_arg_flags(items)
        policies.check(policies.PolicyConfig(policies.canonical(policy), args))
    except (policies.PolicyArgError, policies.UnknownPolicyError) as exc:
        raise SimInputError(f"--policy-arg: {exc}") from None
    return args


def _core_policy(name: str) -> Any:
    """A registered policy of the scheduling core (``walras policies``), by name or alias."""
    from walras.core import policies
    from walras.sim.errors import SimInputError

    try:
        return types.SimpleNamespace(name=policies.canonical(name))
    except policies.UnknownPolicyError as exc:
        raise SimInputError(f"--policy: {exc}") from None


def _print_summary(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    s = result.summary()
    console = Console()
    table = Table(
        title=f"{result.tally.workload.source} · {result.policy} · {result.cluster.describe()}"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")

    def hours(x: float | None) -> str:
        return "—" if x is None else f"{x:,.1f} s ({x / 3600:.2f} h)"

    table.add_row("makespan", hours(s["makespan_s"]))
    table.add_row("average JCT", hours(s["avg_jct_s"]))
    for q in ("p50", "p95", "p99"):
        table.add_row(f"JCT {q}", hours(s[f"jct_{q}_s"]))
    if "avg_jct_window_s" in s:
        a, b = result.config.window
        table.add_row(f"average JCT, jobs {a}..{b - 1}", hours(s["avg_jct_window_s"]))
    table.add_row("utilisation", f"{s['utilization']:.3f}")
    failed = sum(result.tally.failed)
    table.add_row("jobs", f"{s['jobs']}" + (f" ({failed} failed)" if failed else ""))
    table.add_row("rounds", f"{s['rounds']}")
    table.add_row("restarts", f"{s['restarts']}")
    if s["solve_s_mean"] is not None:
        table.add_row(
            "policy solves",
            f"{len(result.tally.solve_s)}: mean {s['solve_s_mean'] * 1e3:.1f} ms, "
            f"p95 {s['solve_s_p95'] * 1e3:.1f} ms, max {s['solve_s_max'] * 1e3:.1f} ms",
        )
    table.add_row("wall time", f"{s['wall_s']:.2f} s")
    console.print(table)
    if "tenants" in s:
        console.print(_tenant_table(s["tenants"], quotas=result.config.quotas))


def _tenant_table(rows: dict[str, dict[str, Any]], *, quotas: bool) -> Any:
    """The per-tenant table of a ``--tenants`` run (``walras.sim.tenants``)."""
    from rich.table import Table

    title = "per tenant" + ("" if quotas else " (quotas measured, not enforced: --no-quotas)")
    table = Table(title=title)
    for column in ("tenant", "guarantee met", "average JCT", "GPU-hours"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for name, row in rows.items():
        met, jct = row["guarantee_met"], row["avg_jct_s"]
        table.add_row(
            name,
            "— (no demand for a guarantee)" if met is None else f"{met:.1%}",
            "—" if jct is None else f"{jct / 3600:.2f} h",
            f"{row['gpu_hours']:.1f}",
        )
    return table


def _sweep_cell(spec: pathlib.Path, cell: int) -> None:
    """One cell, its row on stdout as one JSON line (the cluster reads it as a termination message,
    which the kubelet cuts at 4096 bytes: a long error text is shortened to keep the JSON whole)."""
    from walras.cli.sweep_cluster import ERROR_CHARS
    from walras.sim import sweep
    from walras.sim.errors import SimInputError

    try:
        row = sweep.run_cell(sweep.load_spec(spec), cell)
    except SimInputError as exc:
        raise _fail(str(exc)) from exc
    if "error" in row:
        row["error"] = str(row["error"])[:ERROR_CHARS]
    print(json.dumps(row))


def _sweep(spec: pathlib.Path, out: pathlib.Path | None, workers: int, json_output: bool) -> None:
    from rich.console import Console
    from rich.markup import escape

    from walras.sim import sweep
    from walras.sim.errors import SimInputError

    if out is not None and not plotting.available():  # before the runs, not after them
        raise _fail(escape(plotting.MISSING))  # escape: "[plots]" is not markup
    try:
        rows = sweep.run_sweep(sweep.load_spec(spec), workers=workers, out=out)
    except SimInputError as exc:
        raise _fail(str(exc)) from exc
    if json_output:
        for row in rows:
            print(json.dumps(row))
        return
    sweep.print_table(rows, Console())

"""``walras simulate sweep SPEC.yaml``: policies × seeds × arrival rates × restart costs.

Spec (YAML; paths relative to the spec file)::

    trace: ../data/static_multi_seed0_n480.trace
    cluster: v100=20,p100=20,k80=20
    gpus_per_node: "4"
    policies: [max_min_fairness_perf, fifo_perf]
    seeds: [0, 1]
    arrival_rates: [null, 2.0]     # jobs/hour; null keeps the trace's arrival times
    restart_seconds: [0, 10]       # a number or a list
    round_seconds: 360
    window: "0:100"                # optional, as --window
    lp_solver: ecos                # optional, as --lp-solver (highs by default)
    tenants: tenants.yaml          # optional, as --tenants: the operator's mechanics
                                   # (--semantics walras), policies by `walras policies` names

With ``tenants``, ``trace`` may also be FungibleJob manifests (``walras simulate generate OUT.yaml
--tenants ...``; a ``.trace`` puts every job in namespace ``sim``), and each row carries the
run's ``tenants`` (in ``sweep.csv`` as columns ``tenant.NAME.KEY``).

A number in ``arrival_rates`` replaces the trace's arrival times by Gavel's Poisson stream at
that rate for the run's seed (:func:`walras.sim.arrivals.poisson_arrivals`). Every combination runs
in its own worker process (:class:`concurrent.futures.ProcessPoolExecutor`); the results come back
in spec order, one row per run, and with ``out`` go to ``sweep.csv`` and ``sweep.png``.

A cell is one run, numbered from 0 in that order (:func:`run_cell`): ``walras simulate sweep SPEC
--cell I`` runs cell I alone, which is what each index of ``--on-cluster``'s Indexed Job does
(:mod:`walras.cli.sweep_cluster`). :func:`dump_spec` writes a spec back as the mapping
:func:`load_spec` reads, with the trace (and throughputs) renamed, for shipping it to the cluster.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import pathlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from walras.plotting import pyplot
from walras.sim.config import LP_SOLVERS
from walras.sim.errors import PolicyError, SimInputError

ROW_KEYS = ("policy", "seed", "arrival_rate", "restart_s")


@dataclass(frozen=True, slots=True)
class SweepSpec:
    trace: pathlib.Path
    cluster: str
    gpus_per_node: str
    throughputs: pathlib.Path | None
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    arrival_rates: tuple[float | None, ...]
    restart_seconds: tuple[float, ...]
    round_seconds: float
    window: tuple[int, int] | None
    lp_solver: str = "highs"
    tenants: pathlib.Path | None = None


def load_spec(path: pathlib.Path) -> SweepSpec:
    """Read and check a sweep spec; errors name the key."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SimInputError(f"cannot read sweep spec {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SimInputError(f"{path.name}: expected a mapping of keys")
    known = {f.name for f in dataclasses.fields(SweepSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SimInputError(f"{path.name}: unknown key(s) {', '.join(unknown)}")
    if "trace" not in data or "policies" not in data:
        raise SimInputError(f"{path.name}: 'trace' and 'policies' are required")
    base = path.parent

    def many(key: str, default: list[Any]) -> list[Any]:
        value = data.get(key, default)
        return list(value) if isinstance(value, list) else [value]

    window = data.get("window")
    win: tuple[int, int] | None = None
    if window is not None:
        a, _, b = str(window).partition(":")
        try:
            win = (int(a), int(b))
        except ValueError:
            raise SimInputError(f"{path.name}: window: expected 'A:B', got {window!r}") from None
    lp_solver = str(data.get("lp_solver", "highs"))
    if lp_solver not in LP_SOLVERS:
        raise SimInputError(
            f"{path.name}: lp_solver: expected one of {', '.join(LP_SOLVERS)}, got {lp_solver!r}"
        )
    try:
        return SweepSpec(
            trace=base / str(data["trace"]),
            cluster=str(data.get("cluster", "v100=20,p100=20,k80=20")),
            gpus_per_node=str(data.get("gpus_per_node", "1")),
            throughputs=base / str(data["throughputs"]) if data.get("throughputs") else None,
            policies=tuple(str(p) for p in many("policies", [])),
            seeds=tuple(int(s) for s in many("seeds", [0])),
            arrival_rates=tuple(
                None if r is None else float(r) for r in many("arrival_rates", [None])
            ),
            restart_seconds=tuple(float(x) for x in many("restart_seconds", [0.0])),
            round_seconds=float(data.get("round_seconds", 360.0)),
            window=win,
            lp_solver=lp_solver,
            tenants=base / str(data["tenants"]) if data.get("tenants") else None,
        )
    except (TypeError, ValueError) as exc:
        raise SimInputError(f"{path.name}: {exc}") from exc


def runs(spec: SweepSpec) -> list[tuple[str, int, float | None, float]]:
    """Every (policy, seed, arrival rate, restart cost), in spec order."""
    return list(
        itertools.product(spec.policies, spec.seeds, spec.arrival_rates, spec.restart_seconds)
    )


def run_one(spec: SweepSpec, combo: tuple[str, int, float | None, float]) -> dict[str, Any]:
    """One run of the sweep (executed in a worker process)."""
    import numpy as np

    from walras.allocator.errors import InvalidProblem
    from walras.sim import engine
    from walras.sim.arrivals import poisson_arrivals
    from walras.sim.config import SimConfig
    from walras.sim.policies import GavelPolicy
    from walras.sim.scenario import load_scenario

    policy, seed, rate, restart = combo
    if spec.tenants is not None:
        return _run_with_tenants(spec, combo, spec.tenants)
    scenario = load_scenario(
        spec.trace,
        cluster=spec.cluster,
        gpus_per_node=spec.gpus_per_node,
        throughputs=spec.throughputs,
    )
    workload = scenario.workload
    if rate is not None:
        arrivals = poisson_arrivals(workload.n_jobs, rate, seed)
        workload = dataclasses.replace(workload, arrivals=np.asarray(arrivals))
    config = SimConfig(
        round_s=spec.round_seconds,
        restart_s=restart,
        seed=seed,
        window=spec.window,
        lp_solver=spec.lp_solver,
    )
    row: dict[str, Any] = dict(zip(ROW_KEYS, combo, strict=True))
    try:
        gavel_policy = GavelPolicy(policy, seed=seed, lp_solver=spec.lp_solver)
        result = engine.run(workload, scenario.cluster, gavel_policy, config)
    except InvalidProblem as exc:
        raise SimInputError(f"policy {policy}: {exc}") from exc
    except PolicyError as exc:  # a solver gave up on this run only: report it in its row
        return row | {"error": str(exc)}
    return row | result.summary()


def _run_with_tenants(
    spec: SweepSpec, combo: tuple[str, int, float | None, float], tenants: pathlib.Path
) -> dict[str, Any]:
    """One run with ``tenants:``: the operator's mechanics, as ``walras simulate --tenants``."""
    import types

    import numpy as np

    from walras.core import policies
    from walras.sim import engine, manifests
    from walras.sim.arrivals import poisson_arrivals
    from walras.sim.cluster import build_cluster, parse_cluster, parse_gpus_per_node
    from walras.sim.config import SimConfig
    from walras.sim.scenario import load_scenario
    from walras.sim.tenants import load_tenants
    from walras.sim.workload import Workload

    policy, seed, rate, restart = combo
    workload: Workload
    if manifests.is_manifest_file(spec.trace):
        counts = parse_cluster(spec.cluster)
        gpu_types = [g for g, c in counts.items() if c > 0]
        cluster = build_cluster(counts, parse_gpus_per_node(spec.gpus_per_node, gpu_types))
        workload = manifests.load_manifests(spec.trace, cluster)
    else:
        scenario = load_scenario(
            spec.trace,
            cluster=spec.cluster,
            gpus_per_node=spec.gpus_per_node,
            throughputs=spec.throughputs,
        )
        workload, cluster = scenario.workload, scenario.cluster
    if rate is not None:
        arrivals = poisson_arrivals(workload.n_jobs, rate, seed)
        workload = dataclasses.replace(workload, arrivals=np.asarray(arrivals))
    capacity = {t: float(c) for t, c in zip(cluster.gpu_types, cluster.counts, strict=True)}
    config = SimConfig(
        round_s=spec.round_seconds,
        restart_s=restart,
        seed=seed,
        window=spec.window,
        semantics="walras",
        tenants=load_tenants(tenants, capacity),
    )
    try:
        name = policies.canonical(policy)
    except policies.UnknownPolicyError as exc:
        raise SimInputError(f"policies: {exc}") from None
    row: dict[str, Any] = dict(zip(ROW_KEYS, combo, strict=True))
    try:
        result = engine.run(workload, cluster, types.SimpleNamespace(name=name), config)
    except PolicyError as exc:
        return row | {"error": str(exc)}
    return row | result.summary()


def check(spec: SweepSpec) -> None:
    """What every run would find wrong, found once here: the trace, cluster, node sizes and
    throughputs (the scenario loads), and each policy's name. For a sweep on a cluster, where a
    cell's error would otherwise come back from every pod."""
    from walras.sim.policies import GAVEL_POLICIES
    from walras.sim.scenario import load_scenario

    if spec.tenants is not None:
        raise SimInputError("tenants: a sweep with tenants runs here only (not on a cluster)")
    load_scenario(
        spec.trace,
        cluster=spec.cluster,
        gpus_per_node=spec.gpus_per_node,
        throughputs=spec.throughputs,
    )
    for policy in spec.policies:
        if policy not in GAVEL_POLICIES:
            raise SimInputError(
                f"policies: unknown policy {policy!r} (Gavel's: {', '.join(GAVEL_POLICIES)})"
            )


def run_cell(spec: SweepSpec, index: int) -> dict[str, Any]:
    """Cell ``index`` of the sweep (its position in :func:`runs`), run in this process."""
    combos = runs(spec)
    if not 0 <= index < len(combos):
        raise SimInputError(f"--cell: the sweep has cells 0..{len(combos) - 1}, got {index}")
    return run_one(spec, combos[index])


def dump_spec(spec: SweepSpec, *, trace: str, throughputs: str | None) -> dict[str, Any]:
    """``spec`` as the mapping :func:`load_spec` reads, naming the trace ``trace`` and the
    throughputs file ``throughputs`` (both relative to the spec file that will hold it)."""
    data: dict[str, Any] = {
        "trace": trace,
        "cluster": spec.cluster,
        "gpus_per_node": spec.gpus_per_node,
        "policies": list(spec.policies),
        "seeds": list(spec.seeds),
        "arrival_rates": list(spec.arrival_rates),
        "restart_seconds": list(spec.restart_seconds),
        "round_seconds": spec.round_seconds,
        "lp_solver": spec.lp_solver,
    }
    if spec.throughputs is not None:
        if throughputs is None:
            raise ValueError("the spec names a throughputs file: give its new name")
        data["throughputs"] = throughputs
    if spec.window is not None:
        data["window"] = f"{spec.window[0]}:{spec.window[1]}"
    return data


def run_sweep(
    spec: SweepSpec, *, workers: int = 2, out: pathlib.Path | None = None
) -> list[dict[str, Any]]:
    """Run every combination in ``workers`` processes; rows in spec order."""
    combos = runs(spec)
    if not combos:
        raise SimInputError("the sweep has no runs (empty policies, seeds or rates)")
    if workers <= 1:
        rows = [run_one(spec, c) for c in combos]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(run_one, itertools.repeat(spec), combos))
    if out is not None:
        write_sweep(rows, out)
    return rows


def write_sweep(rows: list[dict[str, Any]], out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    flat = [_flat(r) for r in rows]
    keys = list(dict.fromkeys(k for r in flat for k in r))
    with (out / "sweep.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(flat)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    labels = sorted({(r["policy"], r["restart_s"]) for r in rows})
    rates = sorted({r["arrival_rate"] for r in rows}, key=lambda x: -1.0 if x is None else x)
    for policy, restart in labels:
        for ax, key in zip(axes, ("avg_jct_s", "makespan_s"), strict=True):
            ys = []
            for rate in rates:
                vals = [
                    r[key]
                    for r in rows
                    if (r["policy"], r["restart_s"], r["arrival_rate"]) == (policy, restart, rate)
                    and r.get(key) is not None
                ]
                ys.append(sum(vals) / len(vals) / 3600.0 if vals else float("nan"))
            xs = list(range(len(rates)))
            ax.plot(xs, ys, marker="o", label=f"{policy} (X={restart:g} s)")
    for ax, title in zip(axes, ("average JCT (h)", "makespan (h)"), strict=True):
        ax.set_xticks(range(len(rates)))
        ax.set_xticklabels(["trace" if r is None else f"{r:g}/h" for r in rates])
        ax.set_xlabel("arrival rate (mean over seeds)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.savefig(out / "sweep.png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row for the CSV: ``tenants`` as columns ``tenant.NAME.KEY``."""
    out = {k: v for k, v in row.items() if k != "tenants"}
    for name, values in (row.get("tenants") or {}).items():
        for key, value in values.items():
            out[f"tenant.{name}.{key}"] = value
    return out


def print_table(rows: list[dict[str, Any]], console: Any) -> None:
    from rich.table import Table

    table = Table(title="walras simulate sweep")
    cols = ("policy", "seed", "arrival_rate", "restart_s", "makespan_s", "avg_jct_s",
            "jct_p99_s", "utilization", "wall_s")  # fmt: skip
    for c in cols:
        table.add_column(c, justify="left" if c == "policy" else "right", no_wrap=c == "policy")
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if c == "makespan_s" and "error" in r:
                cells.append("[red]failed[/]")
            elif v is None:
                cells.append("trace" if c == "arrival_rate" else "—")
            elif c.endswith("_s") and c not in ("restart_s", "wall_s"):
                cells.append(f"{v / 3600:.2f} h")
            elif isinstance(v, float):
                cells.append(f"{v:.3f}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    console.print(table)
    for r in rows:
        if "error" in r:
            console.print(f"[red]failed:[/] {r['policy']} seed {r['seed']}: {r['error']}")

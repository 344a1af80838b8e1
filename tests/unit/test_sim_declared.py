"""``walras simulate --throughput-noise/--hide-fraction/--estimate`` (walras.sim.declared).

Oracles: hand-derived timelines (true throughputs drive progress whatever users declare), the
hiding rule's counts, and the estimator's inputs checked entry by entry against the rules of the
module docstring.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from sim_helpers import TRACES
from typer.testing import CliRunner

from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app
from walras.core import cycle
from walras.core.snapshot import Store
from walras.sim import declared, walras_mechanics
from walras.sim.cluster import build_cluster
from walras.sim.config import SimConfig
from walras.sim.errors import SimInputError
from walras.sim.tally import Tally
from walras.sim.workload import Workload


def workload(rates: list[list[float]], total: float = 1000.0, kinds: int = 0) -> Workload:
    n = len(rates)
    gpu_types = ("v100", "p100", "k80")[: len(rates[0])]
    return Workload(
        source="test",
        job_types=tuple(f"t{j % kinds if kinds else j}" for j in range(n)),
        lines=tuple(range(1, n + 1)),
        total_steps=np.full(n, total),  # type: ignore[arg-type]  # float work is what the core reads
        scale_factors=np.ones(n, dtype=np.int64),
        arrivals=np.zeros(n),
        priority_weights=np.ones(n),
        throughputs=np.array(rates, dtype=np.float64),
        gpu_types=gpu_types,
    )


def simulate(wl: Workload, cfg: SimConfig, observer: object = None) -> tuple[float, Tally]:
    cluster = build_cluster(dict.fromkeys(wl.gpu_types, 1), dict.fromkeys(wl.gpu_types, 1))
    tally = Tally(wl, cluster.n_gpus)
    makespan = walras_mechanics.run(
        wl,
        cluster,
        types.SimpleNamespace(name="price-discovery"),
        cfg,
        tally,
        observer=observer,  # type: ignore[arg-type]  # a plain callable
    )
    return makespan, tally


def test_no_options_means_users_declare_the_truth() -> None:
    assert declared.from_config(workload([[2.0]]), SimConfig(semantics="walras")) is None


@pytest.mark.parametrize("estimate", [True, False])
def test_true_throughput_drives_progress_whatever_is_declared(estimate: bool) -> None:
    # One job alone on one V100, true rate 2/s, 1000 work, restart 10 s: placed at t = 0, it
    # works from 10 s and finishes at 10 + 1000/2 = 510 s, as with a truthful declaration (the
    # walras_mechanics docstring's example), although it declares e^{σZ}·2 with σ = 1.
    wl = workload([[2.0]])
    cfg = SimConfig(semantics="walras", restart_s=10.0, throughput_noise=1.0, estimate=estimate)
    view = declared.from_config(wl, cfg)
    assert view is not None and abs(view.declared[0, 0] - 2.0) > 0.01  # the noise is there
    makespan, tally = simulate(wl, cfg)
    assert makespan == pytest.approx(510.0)
    assert tally.completion_s[0] == pytest.approx(510.0)


@pytest.mark.parametrize(("fraction", "k"), [(0.5, 3), (0.5, 2), (0.34, 3), (0.9, 3)])
def test_each_job_hides_floor_or_ceil_of_f_k_types(fraction: float, k: int) -> None:
    # h = ⌊f·k + U⌋ is ⌊f·k⌋ or ⌈f·k⌉, capped at k − 1 so that every job declares a type.
    wl = workload([[1.0 + j + c for c in range(k)] for j in range(200)])
    view = declared.from_config(wl, SimConfig(semantics="walras", hide_fraction=fraction))
    assert view is not None
    hidden = np.isnan(view.declared).sum(axis=1)
    allowed = {min(int(np.floor(fraction * k)), k - 1), min(int(np.ceil(fraction * k)), k - 1)}
    assert set(hidden.tolist()) <= allowed
    # Without noise the declared entries are the truth.
    shown = ~np.isnan(view.declared)
    assert np.array_equal(view.declared[shown], wl.throughputs[shown])


def test_without_estimation_a_hidden_type_is_never_used() -> None:
    # Two types, f = 0.5 ⇒ each job hides exactly one (⌊1 + U⌋ = 1). The policy must never place
    # a job on its hidden type, although that type is free and twice as fast for some jobs.
    wl = workload([[2.0, 1.0], [1.0, 2.0], [2.0, 2.0], [1.0, 1.0]])
    cfg = SimConfig(semantics="walras", hide_fraction=0.5, estimate=False)
    view = declared.from_config(wl, cfg)
    assert view is not None
    hidden = {
        (j, wl.gpu_types[c]) for j, c in zip(*np.nonzero(np.isnan(view.declared)), strict=True)
    }
    assert len(hidden) == wl.n_jobs
    used: set[tuple[int, str]] = set()

    def observe(plan: cycle.CyclePlan) -> None:
        for create in plan.realisation.creates:
            j = int(create.job.name.rsplit("-", 1)[1])
            used.add((j, create.node.split("-")[0]))

    simulate(wl, cfg, observe)
    assert used and not used & hidden


def test_estimation_fills_hidden_types_and_measurement_replaces_declarations() -> None:
    # Six jobs of one kind (same group), two types, each hiding one. After job 0 runs 60 s on
    # its declared type, its value there is the truth (measured).
    truth = [[4.0, 1.0]] * 6
    wl = workload(truth, kinds=1)
    cfg = SimConfig(semantics="walras", hide_fraction=0.5, throughput_noise=0.3)
    view = declared.from_config(wl, cfg)
    assert view is not None
    store = Store()
    for j in range(6):
        manifest = walras_mechanics.job_manifest(wl, j)
        view.admit(j, manifest)
        store.upsert("job", manifest)
    view.refresh(0.0, True, {}, store, set())
    for j in range(6):
        for c in range(2):
            source = view.sources[(j, c)]
            if np.isnan(view.declared[j, c]) and np.isnan(view.declared[:, c]).all():
                # Nobody declared this type: nothing to estimate from, the type stays ineligible.
                assert source == "unknown" and view.view[j, c] == 0
            elif np.isnan(view.declared[j, c]):
                assert source == "estimated-own"  # every job declares one type (k − 1 cap)
                assert view.view[j, c] > 0
            else:
                assert source == "declared" and view.view[j, c] == view.declared[j, c]
    # Job 0 works on its first declared type from t = 10 to 70: one sample, measured.
    c0 = int(np.flatnonzero(~np.isnan(view.declared[0]))[0])
    view.refresh(70.0, True, {0: (wl.gpu_types[c0], 10.0)}, store, set())
    assert view.sources[(0, c0)] == "measured"
    assert view.view[0, c0] == truth[0][c0]
    # The store now shows the policy the updated job.
    job = store.jobs[("sim", walras_mechanics.job_name(0))]
    assert job.throughput[wl.gpu_types[c0]] == truth[0][c0]


def test_option_errors() -> None:
    wl = workload([[1.0, 2.0]])
    with pytest.raises(SimInputError, match="--hide-fraction"):
        declared.from_config(wl, SimConfig(hide_fraction=1.0))
    with pytest.raises(SimInputError, match="--throughput-noise"):
        declared.from_config(wl, SimConfig(throughput_noise=-0.1))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--hide-fraction", "0.5"], "need --semantics walras"),
        (["--semantics", "walras", "--throughput-noise", "-1"], "--throughput-noise"),
        (["--semantics", "walras", "--policy", "hadar", "--hide-fraction", "0.5"], "hadar"),
    ],
)
def test_cli_errors_exit_2_with_one_line(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, ["simulate", str(TRACES["D1"]), "--cluster", "4:4:4", *args])
    assert res.exit_code == 2
    assert needle in res.output

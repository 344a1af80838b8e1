"""``--semantics walras``: the operator's core on a simulated clock, and manifest input.

Oracles are hand-derived timelines (each derivation is in the test's comment): a job's finish
time from its rate, restart cost and the round boundaries; completions freeing GPUs for a waiting
job at the exact finish time (an incremental round, as the operator's completion trigger does);
and errors that name the document, job and field.
"""

from __future__ import annotations

import pathlib
import types

import numpy as np
import pytest
import yaml

from walras.sim import walras_mechanics
from walras.sim.cluster import build_cluster
from walras.sim.config import SimConfig
from walras.sim.errors import SimInputError
from walras.sim.manifests import load_manifests
from walras.sim.tally import Tally
from walras.sim.workload import Workload


def tiny_cluster(gpus: int = 1) -> object:
    return build_cluster({"v100": gpus}, {"v100": gpus})


def workload(total: list[float], rate: list[float], arrival: list[float]) -> Workload:
    n = len(total)
    return Workload(
        source="test",
        job_types=tuple(f"t{j}" for j in range(n)),
        lines=tuple(range(1, n + 1)),
        total_steps=np.array(total, dtype=np.float64),  # type: ignore[arg-type]
        scale_factors=np.ones(n, dtype=np.int64),
        arrivals=np.array(arrival, dtype=np.float64),
        priority_weights=np.ones(n),
        throughputs=np.array(rate, dtype=np.float64).reshape(n, 1),
        gpu_types=("v100",),
    )


def run(wl: Workload, cluster: object, policy: str, restart: float) -> tuple[float, Tally]:
    tally = Tally(wl, cluster.n_gpus)  # type: ignore[attr-defined]
    cfg = SimConfig(semantics="walras", restart_s=restart)
    makespan = walras_mechanics.run(wl, cluster, types.SimpleNamespace(name=policy), cfg, tally)  # type: ignore[arg-type]
    return makespan, tally


@pytest.mark.parametrize("policy", ["price-discovery", "max-min-fairness", "fifo-aware"])
def test_one_job_alone_finishes_at_restart_plus_work_over_rate(policy: str) -> None:
    # The module docstring's example: arrival 0, restart 10 s, 1000 work at 2/s: it is placed at
    # t = 0, works from 10 s, finishes at 10 + 500 = 510 s; full rounds at 360 s keep it in place.
    makespan, tally = run(workload([1000.0], [2.0], [0.0]), tiny_cluster(), policy, 10.0)
    assert makespan == pytest.approx(510.0)
    assert tally.completion_s[0] == pytest.approx(510.0)
    assert sum(tally.restarts) == 1
    # The GPU was held from 0 to 510: utilisation 1.
    assert tally.gpu_busy_s[0] == pytest.approx(510.0)


def test_a_completion_frees_the_gpu_for_a_waiting_job_at_once() -> None:
    # One GPU, FIFO: job 0 (100 work at 1/s) runs from 0 to 100 s; job 1 (arrives at 0, 50 work at
    # 1/s) starts in the incremental round at 100 s and finishes at 150 s, not at the 360 s round.
    makespan, tally = run(
        workload([100.0, 50.0], [1.0, 1.0], [0.0, 0.0]), tiny_cluster(), "fifo-aware", 0.0
    )
    assert tally.completion_s[0] == pytest.approx(100.0)
    assert tally.completion_s[1] == pytest.approx(150.0)
    assert makespan == pytest.approx(150.0)


def write(tmp_path: pathlib.Path, docs: list[object]) -> pathlib.Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def fjob(name: str, **spec: object) -> dict[str, object]:
    body: dict[str, object] = {
        "replicas": 1,
        "throughput": {"v100": 2.0},
        "totalWork": 1000.0,
        "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
    }
    body.update(spec)
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"namespace": "team", "name": name},
        "spec": body,
    }


def test_manifests_run_under_walras_semantics(tmp_path: pathlib.Path) -> None:
    late = fjob("late")
    late["metadata"]["annotations"] = {"walras.dev/arrival-seconds": "600"}  # type: ignore[index]
    done = fjob("done")
    done["status"] = {"phase": "Succeeded"}
    path = write(tmp_path, [fjob("first"), late, done])
    cluster = tiny_cluster()
    wl = load_manifests(path, cluster)  # type: ignore[arg-type]
    assert wl.job_types == ("team/first", "team/late")
    makespan, tally = run(wl, cluster, "price-discovery", 0.0)
    # first: 0 → 500 s; late arrives at 600 s on the idle GPU and runs 500 s: 1100 s.
    assert tally.completion_s[0] == pytest.approx(500.0)
    assert makespan == pytest.approx(1100.0)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (fjob("a", totalWork=None), r"document 1 \(team/a\): spec.totalWork"),
        (fjob("b", throughput={"h100": 1.0}), r"spec.throughput: .*names h100"),
        ({"kind": "Pod"}, "document 1: not a FungibleJob"),
    ],
)
def test_manifest_errors_name_document_job_and_field(
    tmp_path: pathlib.Path, doc: object, message: str
) -> None:
    with pytest.raises(SimInputError, match=message):
        load_manifests(write(tmp_path, [doc]), tiny_cluster())  # type: ignore[arg-type]


def test_cli_runs_manifests_under_walras_semantics(tmp_path: pathlib.Path) -> None:
    import json
    import subprocess
    import sys

    path = write(tmp_path, [fjob("first"), fjob("second")])
    walras = str(pathlib.Path(sys.executable).parent / "walras")
    cmd = [walras, "simulate", str(path), "--semantics", "walras"]
    opts = ["--cluster", "v100=1", "--gpus-per-node", "1", "--json"]
    ok = subprocess.run([*cmd, "--policy", "fifo_perf", *opts], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout.strip().splitlines()[-1])
    # One GPU, FIFO, 1000 work at 2/s each, no restart cost: 500 s then 1000 s.
    assert summary["makespan_s"] == pytest.approx(1000.0)
    assert summary["avg_jct_s"] == pytest.approx(750.0)
    bad = subprocess.run([*cmd, "--policy", "nope", *opts], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown policy 'nope'" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("min_run", "restarts", "first_done"), [(0.0, 4, 1080.0), (400.0, 2, 720.0)]
)
def test_minimum_run_time_in_simulation(min_run: float, restarts: int, first_done: float) -> None:
    # Two jobs of 720 work at 1/s share one GPU (max-min fairness: ½ each), 360 s rounds, no
    # restart cost. Without a minimum they alternate every round: A 0–360, B 360–720, A 720–1080
    # (A done at 1080), B 1080–1440: four starts. With 400 s, A is 360 s old at 360 (kept) and
    # finishes at 720; B then runs 720–1440: two starts. Both end at 1440.
    wl = workload([720.0, 720.0], [1.0, 1.0], [0.0, 0.0])
    tally = Tally(wl, 1)
    cfg = SimConfig(semantics="walras", min_run_s=min_run)
    policy = types.SimpleNamespace(name="max-min-fairness")
    makespan = walras_mechanics.run(wl, tiny_cluster(), policy, cfg, tally)  # type: ignore[arg-type]
    assert makespan == pytest.approx(1440.0)
    assert sum(tally.restarts) == restarts
    assert min(tally.completion_s) == pytest.approx(first_done)


def _priority_class(name: str, value: int, default: bool = False) -> dict[str, object]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def _with_class(name: str, klass: str) -> dict[str, object]:
    job = fjob(name)
    job["spec"]["template"]["spec"]["priorityClassName"] = klass  # type: ignore[index]
    return job


def test_priority_classes_of_a_manifest_file_order_the_jobs_of_a_tenant(
    tmp_path: pathlib.Path,
) -> None:
    # One GPU, one tenant (namespace team), max-min fairness: targets ½ each. "second" names a
    # class below the default, which any tenant may use, so the tenant's turn is always
    # "first"'s until it is done: 1000 work at 2/s from 0 to 500 s, then "second" to 1000 s.
    # Without the class they share the GPU, and "first" is not done by 500 s.
    docs = [
        _priority_class("normal", 100, default=True),
        _priority_class("batch", 0),
        fjob("first"),
        _with_class("second", "batch"),
    ]
    cluster = tiny_cluster()
    wl = load_manifests(write(tmp_path, docs), cluster)  # type: ignore[arg-type]
    assert [d["metadata"]["name"] for d in wl.priority_classes] == ["normal", "batch"]
    assert wl.warnings == ()
    _, tally = run(wl, cluster, "max-min-fairness", 0.0)
    assert tally.completion_s[0] == pytest.approx(500.0)
    assert tally.completion_s[1] == pytest.approx(1000.0)
    shared = load_manifests(write(tmp_path, [fjob("first"), fjob("second")]), cluster)  # type: ignore[arg-type]
    _, tally = run(shared, cluster, "max-min-fairness", 0.0)
    assert tally.completion_s[0] > 500.0


def test_a_class_missing_from_the_file_is_simulated_as_the_default_with_a_warning(
    tmp_path: pathlib.Path,
) -> None:
    wl = load_manifests(write(tmp_path, [_with_class("a", "gold")]), tiny_cluster())  # type: ignore[arg-type]
    [warning] = wl.warnings
    assert "document 1 (team/a): spec.template.spec.priorityClassName" in warning
    assert "no PriorityClass named 'gold'" in warning


def test_the_cli_prints_the_missing_class_warning_and_runs(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    path = write(tmp_path, [_with_class("a", "gold")])
    walras = str(pathlib.Path(sys.executable).parent / "walras")
    opts = ["--cluster", "v100=1", "--gpus-per-node", "1", "--json"]
    out = subprocess.run(
        [walras, "simulate", str(path), "--semantics", "walras", *opts],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "warning:" in out.stderr and "priorityClassName" in out.stderr
    assert "Traceback" not in out.stderr

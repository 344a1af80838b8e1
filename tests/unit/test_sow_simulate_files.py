"""``walras simulate FILE --policy sow``: workload files and StatementOfWork manifests.

Oracles: a mechanism SoW written out by hand from the manifest (and the CRD's documented
semantics) for both the operator's and the simulator's parse; prices and values recomputed by
hand from the formulas (p_min = 1/(2KD)); the LIFO rule stated on the realised arrivals; the
hindsight optimum as an upper bound on welfare; for errors, the file, SoW and spec path named.
"""

from __future__ import annotations

import csv
import json
import pathlib

import pytest
import yaml
from typer.testing import CliRunner

from walras.allocator.sow import (
    Distribution,
    Recurrence,
    StatementOfWork,
    TypeDemand,
    ValueFunction,
)
from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli.app import app
from walras.core import sow_shell as shell
from walras.sim import sow as sim_sow
from walras.sim.errors import SimInputError

runner = CliRunner()

TEMPLATE = """
    template:
      spec:
        containers:
          - {name: train, image: registry.example.com/train:1}
"""

MANIFEST = """
apiVersion: walras.dev/v1alpha1
kind: StatementOfWork
metadata: {name: nightly, namespace: team}
spec:
  concurrency: 2
  concurrencyPerType: {k80: 4}
  throughput: {v100: 2.0, k80: 1}
  value:
    points: [{after: 2, amount: 12}, {after: 10, amount: 1}]
  distribution:
    - {arrival: 0, duration: 4, probability: 0.6}
    - {arrival: 2, duration: 6, probability: 0.4}
  durationRevealed: true
  recurrence: {count: 3, period: 8}
""" + TEMPLATE.replace("\n    ", "\n  ")

# The manifest above, read by hand as docs/sow.md describes the CRD: one demand per throughput
# entry (by type name), k from concurrencyPerType or else concurrency, the value's points as
# (rounds after release, amount), support points (arrival, duration, probability), count
# instances `period` apart, the mechanism name namespace/name.
EXPECTED = StatementOfWork(
    "team/nightly",
    0,
    (TypeDemand("k80", 4, 1.0), TypeDemand("v100", 2, 2.0)),
    ValueFunction(((2.0, 12.0), (10.0, 1.0))),
    Distribution((0, 2), (4, 6), (0.6, 0.4)),
    Recurrence(3, 8),
    True,
)


def test_operator_and_simulator_read_a_manifest_as_the_same_mechanism_sow(
    tmp_path: pathlib.Path,
) -> None:
    operator = shell.statement(shell.SowObject.of(yaml.safe_load(MANIFEST)), 0)
    path = tmp_path / "sow.yaml"
    path.write_text(MANIFEST)
    workload = sim_sow.load_workload(path, {"k80": 4, "v100": 2}, seed=0)
    assert operator == EXPECTED
    assert workload.sows == (EXPECTED,)
    # Semantics of what was read: v linear between the points (v(6) = 12 − 11·4/8 = 6.5), a
    # duration of 4 reference rounds takes ⌈4/2⌉ = 2 rounds on the v100 (throughput 2).
    (sow,) = workload.sows
    assert sow.value(6) == pytest.approx(6.5)
    assert sow.demands[1].duration_on(4) == 2


def _named(text: str, name: str) -> dict[str, object]:
    doc = yaml.safe_load(text)
    doc["metadata"]["name"] = name
    return dict(doc)


def test_manifest_files_multi_document_list_and_kubectl_get(tmp_path: pathlib.Path) -> None:
    caps = {"k80": 4, "v100": 2}
    multi = tmp_path / "multi.yaml"
    multi.write_text(
        MANIFEST + "---\n" + MANIFEST.replace("name: nightly", "name: weekly") + "---\n"
    )
    w = sim_sow.load_workload(multi, caps, seed=0)
    assert [(s.name, s.birth) for s in w.sows] == [("team/nightly", 0), ("team/weekly", 0)]
    # `kubectl get sow -o yaml`: a List whose admitted items carry status.birth (operator
    # rounds); births count from the earliest, a pending item is born with the latest-born.
    items = [_named(MANIFEST, n) for n in ("a", "b", "c")]
    items[0]["status"] = {"birth": 1500, "phase": "Admitted"}
    items[1]["status"] = {"birth": 1503, "phase": "Admitted"}
    dump = tmp_path / "get.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    w = sim_sow.load_workload(dump, caps, seed=0)
    assert [(s.name, s.birth) for s in w.sows] == [("team/a", 0), ("team/b", 3), ("team/c", 3)]
    # A YAML list of manifests; no namespace is kubectl's default one.
    plain = yaml.safe_load(MANIFEST)
    del plain["metadata"]["namespace"]
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump([plain]))
    assert [s.name for s in sim_sow.load_workload(listed, caps, seed=0).sows] == ["default/nightly"]


ONE_SOW = """
mechanism: {maxConcurrency: 1, maxDuration: 2, maxValue: 5}
cluster: {gpu: 1}
sows:
  - name: nightly
    birth: 0
    concurrency: 1
    throughput: {gpu: 1}
    value: {deadline: 3, amount: 5}
    distribution: [{arrival: 0, duration: 2, probability: 1.0}]
"""


def test_cli_explicit_sow_hand_checked(tmp_path: pathlib.Path) -> None:
    # p_min = 1/(2KD) = 1/4 with nothing committed before: start 0, complete at 2 ≤ 3, value 5,
    # charge 2 rounds × 1/4 = 0.5; the offline optimum is the same schedule.
    path = tmp_path / "one.yaml"
    path.write_text(ONE_SOW)
    res = runner.invoke(app, ["simulate", str(path), "--policy", "sow", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert s["welfare_mean"] == pytest.approx(5.0)
    assert s["revenue_mean"] == pytest.approx(0.5)
    assert s["completed_rate"] == 1.0 and s["evicted_rate"] == 0.0
    assert s["offline_welfare_mean"] == pytest.approx(5.0) and s["ratio_of_means"] == 1.0


def test_cli_manifest_file_hand_checked(tmp_path: pathlib.Path) -> None:
    # ONE_SOW as a manifest file on --cluster gpu=1 (bounds from the workload: K = 1, D = 2,
    # V = 5): the same schedule, value and charge.
    doc = yaml.safe_load(ONE_SOW)["sows"][0]
    manifest = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "StatementOfWork",
        "metadata": {"name": doc.pop("name")},
        "spec": {**{k: v for k, v in doc.items() if k != "birth"}, **yaml.safe_load(TEMPLATE)},
    }
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(manifest))
    args = ["simulate", str(path), "--policy", "sow", "--cluster", "gpu=1", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert (s["K"], s["D"], s["V"]) == (1, 2, 5)
    assert s["welfare_mean"] == pytest.approx(5.0)
    assert s["revenue_mean"] == pytest.approx(0.5)


COLLIDING = """
mechanism: {maxConcurrency: 1, maxDuration: 2, maxValue: 6, theta: 0.6, mu: 1, pMin: 0.01}
cluster: {gpu: 1}
sows:
  - name: early
    concurrency: 1
    throughput: {gpu: 1}
    value: {points: [{after: 0, amount: 6}, {after: 8, amount: 1}]}
    distribution:
      - {arrival: 0, duration: 2, probability: 0.5}
      - {arrival: 4, duration: 2, probability: 0.5}
  - name: late
    concurrency: 1
    throughput: {gpu: 1}
    value: {points: [{after: 0, amount: 6}, {after: 8, amount: 1}]}
    distribution: [{arrival: 1, duration: 1, probability: 1.0}]
"""


def test_cli_colliding_plans_later_born_is_removed(tmp_path: pathlib.Path) -> None:
    # One GPU, flat prices (μ = 1). `late` faces q̂ = ½ at round 1 (early runs rounds 0-1 half
    # the time), zeroed by θ = 0.6, so both plans start on arrival (the earliest completion is
    # worth most). LIFO by birth (ties by name): whenever early arrives at 0, late is cancelled
    # at round 1 and early completes; otherwise both complete.
    path = tmp_path / "collide.yaml"
    path.write_text(COLLIDING)
    out = tmp_path / "run"
    args = ["simulate", str(path), "--policy", "sow", "--realisations", "12", "--seed", "1"]
    res = runner.invoke(app, [*args, "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    with (out / "jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    by_run: dict[str, dict[str, dict[str, str]]] = {}
    for r in rows:
        by_run.setdefault(r["realisation"], {})[r["sow"]] = r
    collided = 0
    for jobs in by_run.values():
        early, late = jobs["early"], jobs["late"]
        assert early["phase"] == "completed" and float(early["charge"]) > 0
        if early["arrival"] == "0":
            collided += 1
            assert late["phase"] == "cancelled" and float(late["charge"]) == 0.0
        else:
            assert late["phase"] == "completed"
    assert 0 < collided < len(by_run)
    s = json.loads((out / "summary.json").read_text())
    assert s["cancelled_rate"] == pytest.approx(collided / (2 * len(by_run)))


def test_cli_generated_workload_json() -> None:
    args = ["simulate", "sow", "--sow-workload", "6", "--cluster", "gpu=4", "--seed", "2"]
    res = runner.invoke(app, [*args, "--realisations", "2", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert (s["sows"], s["jobs"], s["realisations"], s["capacity"]) == (6, 6, 2, {"gpu": 4})
    assert s["offline_welfare_mean"] is not None and s["ratio_of_means"] <= 1 + 1e-9
    off = runner.invoke(app, [*args, "--offline", "off", "--json"])
    assert off.exit_code == 0, off.output
    assert json.loads(off.stdout.strip().splitlines()[-1])["ratio_of_means"] is None
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "welfare ratio" in table.stdout


def test_cli_simulates_the_manifest_users_apply() -> None:
    # examples/sow-nightly.yaml as `kubectl apply -f` takes it: its Namespace is skipped (said on
    # stderr), the SoW is read with the operator's name for it; 7 instances, one a day.
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "sow-nightly.yaml"
    args = ["simulate", str(example), "--policy", "sow", "--cluster", "v100=8,p100=8", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "skipped (not a StatementOfWork): Namespace team-a" in res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert (s["sows"], s["jobs"]) == (1, 7)
    workload = sim_sow.load_workload(example, {"v100": 8, "p100": 8}, seed=0)
    assert [w.name for w in workload.sows] == ["team-a/nightly-retrain"]
    assert workload.skipped == ("Namespace team-a",)


def test_cli_runs_the_documented_example() -> None:
    # docs/simulate.md's example file: every SoW admitted, no run beats the offline optimum.
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "sow-simulate.yaml"
    args = ["simulate", str(example), "--policy", "sow", "--realisations", "3", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert (s["sows"], s["jobs"], s["capacity"]) == (3, 10, {"k80": 4, "v100": 6})
    assert s["ratio_min"] > 0 and s["ratio_of_means"] <= 1 + 1e-9


def _sub(old: str, new: str, text: str = ONE_SOW) -> str:
    assert old in text, old
    return text.replace(old, new)


def _manifest(**changes: object) -> str:
    doc = yaml.safe_load(MANIFEST)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = doc
        for key in path:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return str(yaml.safe_dump(doc))


# (file text, SoW named in the message, field named in the message)
BAD_FILES = {
    "probabilities": (
        _sub("probability: 1.0", "probability: 0.9"),
        "nightly",
        "spec.distribution: the probabilities must sum to 1",
    ),
    "increasing": (
        _sub(
            "{deadline: 3, amount: 5}",
            "{points: [{after: 0, amount: 1}, {after: 2, amount: 3}]}",
        ),
        "nightly",
        "spec.value.points: the value function must be non-increasing",
    ),
    "negative-duration": (
        _sub("duration: 2", "duration: -1"),
        "nightly",
        "spec.distribution[0].duration",
    ),
    "unknown-field": (
        _sub("concurrency: 1\n", "concurrency: 1\n    colour: red\n"),
        "nightly",
        "spec.colour: unknown field",
    ),
    "old-format": (
        _sub("    throughput: {gpu: 1}\n", "    gpuType: gpu\n"),
        "nightly",
        "spec.gpuType: unknown field",
    ),
    "missing-field": (_sub("    throughput: {gpu: 1}\n", ""), "nightly", "spec.throughput"),
    "throughput-0": (
        _sub("throughput: {gpu: 1}", "throughput: {gpu: 0}"),
        "nightly",
        "spec.throughput.gpu",
    ),
    "recurrence": (
        _sub("    concurrency: 1\n", "    concurrency: 1\n    recurrence: {count: 2}\n"),
        "nightly",
        "spec.recurrence.period",
    ),
    "v>V": (_sub("maxValue: 5", "maxValue: 4"), "nightly", "spec.value: 5 > V"),
    "k>K": (_sub("concurrency: 1", "concurrency: 2"), "nightly", "spec.concurrency: 2 > K"),
    "d>D": (_sub("maxDuration: 2", "maxDuration: 1"), "nightly", "spec.distribution: a dur"),
    "not-in-cluster": (
        _sub("throughput: {gpu: 1}", "throughput: {a100: 1}"),
        "nightly",
        "spec.throughput.a100",
    ),
    "birth": (_sub("birth: 0", "birth: -2"), "nightly", "birth"),
    "twice": (ONE_SOW + ONE_SOW[ONE_SOW.index("  - name") :], "nightly", "name used twice"),
    "manifest-template": (_manifest(spec__template=None), "team/nightly", "spec.template"),
    "manifest-name": (_manifest(metadata__name=None), "", "metadata.name"),
    "manifest-long-name": (_manifest(metadata__name="n" * 57), "n" * 57, "metadata.name"),
    "manifest-kind": (_manifest(kind="FungibleJob"), "", "no StatementOfWork in it (found: Fun"),
    "entry-kind": (
        _sub("  - name: nightly\n", "  - kind: ResourcePool\n    name: nightly\n"),
        "",
        "sows[0]: kind: expected StatementOfWork",
    ),
    "manifest-api": (_manifest(apiVersion="walras.dev/v2"), "", "apiVersion"),
    "manifest-status-birth": (_manifest(status={"birth": "soon"}), "team/nightly", "status.birth"),
    "manifest-spec": (_manifest(spec__concurrency="2"), "team/nightly", "spec.concurrency"),
    "not-yaml": ("sows: [\n", "", "not YAML"),
    "empty": ("---\n", "", "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_cli_bad_file_exits_2_naming_file_sow_and_field(tmp_path: pathlib.Path, case: str) -> None:
    text, sow_name, field = BAD_FILES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    args = ["simulate", str(path), "--policy", "sow", "--cluster", "k80=4,v100=2"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())  # the message on one line, however the console wrapped it
    assert str(path) in line
    if sow_name:
        assert f"SoW {sow_name}:" in line
    assert field in line
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--sow-workload", "3"], "--sow-workload"),
        (["--offline", "sometimes"], "--offline"),
        (["--realisations", "0"], "--realisations"),
    ],
)
def test_cli_bad_options_exit_2(tmp_path: pathlib.Path, extra: list[str], named: str) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(ONE_SOW)
    res = runner.invoke(app, ["simulate", str(path), "--policy", "sow", *extra])
    assert res.exit_code == 2, res.output
    assert named in res.output and "Traceback" not in res.output


def test_cli_sow_options_elsewhere_and_missing_file_exit_2(tmp_path: pathlib.Path) -> None:
    res = runner.invoke(app, ["simulate", str(tmp_path / "nope.yaml"), "--policy", "sow"])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(app, ["simulate", str(tmp_path / "x.trace"), "--sow-workload", "3"])
    assert res.exit_code == 2 and "--sow-workload" in res.output


def test_load_errors_are_sim_input_errors(tmp_path: pathlib.Path) -> None:
    # The module's contract for callers other than the CLI (bench, notebooks).
    path = tmp_path / "bad.yaml"
    path.write_text(_manifest(spec__throughput={"v100": -1}))
    with pytest.raises(SimInputError, match=r"SoW team/nightly: spec\.throughput\.v100"):
        sim_sow.load_workload(path, {"v100": 2}, seed=0)

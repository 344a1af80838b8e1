"""``walras simulate --tenants``: the guarantee metric by hand, the CLI contract, and a small run.

The metric's definition is in ``walras.sim.guarantees``; the expected fractions below are worked
out by hand from it, round by round.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from walras.cli import simulate as _simulate  # noqa: F401  (registers the command on app)
from walras.cli import simulate_generate
from walras.cli.app import app
from walras.core import governance, model, tenant_tree
from walras.sim import guarantees

runner = CliRunner()
TENANT_KEYS = {"guarantee_met", "avg_jct_s", "gpu_hours"}


def _job(ns: str, name: str, gpus: int, *types: str) -> model.JobSpec:
    job = model.parse_job(
        {
            "metadata": {"namespace": ns, "name": name, "uid": f"u-{name}", "generation": 1},
            "spec": {
                "replicas": gpus,
                "throughput": {t: 1.0 for t in types},
                "utility": {"kind": "log", "weight": 1.0},
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        }
    )
    assert isinstance(job, model.JobSpec), job
    return job


def _tenant(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "walras.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def _hierarchy() -> dict[str, governance.TenantSpec]:
    docs = [
        _tenant("research", quotas={"v100": {"guaranteed": 4}, "k80": {"guaranteed": 2}}),
        _tenant(
            "vision", parent="research", namespaces=["vision"], quotas={"v100": {"guaranteed": 2}}
        ),
        _tenant(
            "nlp",
            parent="research",
            namespaces=["nlp"],
            quotas={"k80": {"guaranteed": 2}, "v100": {"guaranteed": 1}},
        ),
    ]
    parsed = {s.name: s for s in (governance.parse_tenant(d) for d in docs)}
    tenants, problems = tenant_tree.validate(parsed, {"v100": 8.0, "k80": 8.0})
    assert not problems
    return tenants


def _round(
    tally: guarantees.GuaranteeTally,
    tenants: dict[str, governance.TenantSpec],
    jobs: list[model.JobSpec],
    placed: dict[str, tuple[str, int]],
) -> None:
    """One round: ``placed`` maps a job name to (GPU type, GPUs) for the running jobs."""
    by_name = {j.name: j for j in jobs}
    placed_type = {by_name[n].key: t for n, (t, _) in placed.items()}
    own: dict[str, dict[str, float]] = {}
    for n, (t, gpus) in placed.items():
        row = own.setdefault(governance.tenant_of(by_name[n].namespace, tenants), {})
        row[t] = row.get(t, 0.0) + gpus
    levels = guarantees.demand_levels(jobs, tenants, placed_type)
    tally.observe(levels, guarantees.subtree_held(own, tenants))


def test_guarantee_met_over_three_hand_built_rounds() -> None:
    """research (v100 4, k80 2) has two children: vision (v100 2) and nlp (k80 2, v100 1).

    Round 1: vision/a (1 GPU, v100 or k80) and vision/big (4, v100) on v100, vision/b (2, v100)
    waits, nlp/x (1, k80 or v100) on k80.
      vision v100: f = a 1 + b 2 = 3 (big's gang 4 > 2), level 2, held 5: met.
      nlp k80: f = x 1, level 1, held 1: met. nlp v100: x runs on k80, no demand. nlp met.
      research v100: f = a 1 + b 2 + big 4 = 7 (x on k80), level 4, held 5: met; research k80:
      f = x 1 (a on v100), held 1: met. research met.
    Round 2: big has finished; a runs on k80, b waits, x runs on v100.
      vision v100: f = b 2 (a on k80), level 2, held 0: not met.
      nlp k80: x on v100, no demand; nlp v100: f = 1, held 1: met. nlp met.
      research v100: f = b 2 + x 1 = 3, level 3, held 1: not met (k80: f = a 1, held 1: met).
    Round 3: only nlp's jobs: x on k80, nlp/y (1, v100) waits.
      vision: no job, no demand: not counted.
      nlp k80: f = 1, held 1: met; nlp v100: f = y 1, held 0: not met. nlp not met.
      research v100: f = y 1, level 1, held 0: not met (k80: f = x 1, held 1: met).
    So vision 1/2, nlp 2/3, research 1/3; per pair nlp/k80 2/2, nlp/v100 1/2, research/k80
    3/3.
    """
    tenants = _hierarchy()
    a = _job("vision", "a", 1, "v100", "k80")
    b = _job("vision", "b", 2, "v100")
    big = _job("vision", "big", 4, "v100")
    x = _job("nlp", "x", 1, "k80", "v100")
    y = _job("nlp", "y", 1, "v100")
    tally = guarantees.GuaranteeTally()
    _round(tally, tenants, [a, b, big, x], {"a": ("v100", 1), "big": ("v100", 4), "x": ("k80", 1)})
    _round(tally, tenants, [a, b, x], {"a": ("k80", 1), "x": ("v100", 1)})
    _round(tally, tenants, [x, y], {"x": ("k80", 1)})
    assert tally.fraction("vision") == pytest.approx(1 / 2)
    assert tally.fraction("nlp") == pytest.approx(2 / 3)
    assert tally.fraction("research") == pytest.approx(1 / 3)
    assert tally.pair_fraction("nlp", "k80") == pytest.approx(1.0)
    assert tally.pair_fraction("nlp", "v100") == pytest.approx(1 / 2)
    assert tally.pair_fraction("research", "k80") == pytest.approx(1.0)
    assert tally.rounds == {"vision": 2, "nlp": 3, "research": 3}


def test_a_job_whose_targets_are_all_elsewhere_is_no_demand() -> None:
    """The quota layer does not force a job saturated on k80 onto v100 (module docstring)."""
    tenants = _hierarchy()
    a = _job("vision", "a", 1, "v100", "k80")
    b = _job("vision", "b", 1, "v100", "k80")
    c = _job("vision", "c", 1, "v100", "k80")
    targets = {
        a.key: {"k80": 1.0, "v100": 0.0},
        b.key: {"k80": 0.5, "v100": 0.5},
        c.key: {"k80": 0.98, "v100": 0.02},  # saturated, mostly on k80: served there
    }
    levels = guarantees.demand_levels([a, b, c], tenants, {}, targets)
    # Only b wants v100 time: vision's level is min(2, 1), research's min(4, 1); all three want
    # k80 time (research's k80 guarantee): min(2, 1 + 1 + 1).
    assert levels == {"vision": {"v100": 1.0}, "research": {"v100": 1.0, "k80": 2.0}}


# ---------------------------------------------------------------- the command


CLUSTER = "v100=4,p100=4,k80=4"


def _workload(tmp_path: pathlib.Path, jobs: int = 12) -> pathlib.Path:
    out = tmp_path / "jobs.yaml"
    argv = [str(out), "--jobs", str(jobs), "--tenants", "a=4,b=2,c=1", "--single-gpu"]
    assert simulate_generate.main(argv) == 0
    return out


def _tenants_file(tmp_path: pathlib.Path, *docs: dict[str, Any]) -> pathlib.Path:
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def _run(*args: str) -> Any:
    return runner.invoke(app, ["simulate", *args, "--cluster", CLUSTER, "--json"])


def test_generate_writes_one_namespace_per_tenant(tmp_path: pathlib.Path) -> None:
    docs = list(yaml.safe_load_all(_workload(tmp_path, jobs=30).read_text()))
    assert len(docs) == 30
    assert {d["metadata"]["namespace"] for d in docs} <= {"a", "b", "c"}
    arrivals = [float(d["metadata"]["annotations"]["walras.dev/arrival-seconds"]) for d in docs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0


def test_json_has_a_row_per_tenant_with_exactly_three_keys(tmp_path: pathlib.Path) -> None:
    jobs = _workload(tmp_path)
    tenants = _tenants_file(
        tmp_path,
        _tenant("a", quotas={"v100": {"guaranteed": 2}}),
        _tenant("b", quotas={"p100": {"guaranteed": 1}}),
    )
    res = _run(str(jobs), "--tenants", str(tenants), "--policy", "price-discovery")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    names = {d["metadata"]["namespace"] for d in yaml.safe_load_all(jobs.read_text())}
    assert set(out["tenants"]) == names | {"a", "b"}
    for row in out["tenants"].values():
        assert set(row) == TENANT_KEYS
    # c has no Tenant, so no guarantee; gpu_hours add up to what the run's utilisation counts.
    if "c" in out["tenants"]:
        assert out["tenants"]["c"]["guarantee_met"] is None
    busy_h = out["utilization"] * out["makespan_s"] * 12 / 3600
    assert sum(r["gpu_hours"] for r in out["tenants"].values()) == pytest.approx(busy_h)


def test_guarantee_holds_in_every_round_and_fails_without_quotas(tmp_path: pathlib.Path) -> None:
    """One type of 4 V100s, all jobs 1-GPU at rate 1, arriving at 0. Tenant f (weight 3) runs
    4 long jobs, tenant g (weight 1, guaranteed 2 V100s) 2 short ones.

    Without quotas, price discovery with log utilities splits the one type in proportion to the
    normalised weights (Eisenberg-Gale on one good): f's jobs weigh 3 of 4 in total, so g's
    targets add up to 1 GPU, and the realiser time-slices its two jobs: g holds 2 GPUs in some
    rounds, but not in every one (that would be 2 on average, twice its targets): guarantee_met
    below 1. With the quota, g's
    carve-out is min(2, 2) = 2 and each of its jobs wants at most 1 GPU, so its targets are 1 each
    and, the targets adding up to the 4 GPUs, the realiser runs both every round: 1."""

    def job(ns: str, name: str, work: float) -> dict[str, Any]:
        return {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "FungibleJob",
            "metadata": {"namespace": ns, "name": name},
            "spec": {"replicas": 1, "throughput": {"v100": 1.0}, "totalWork": work,
                     "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        }  # fmt: skip

    docs = [job("f", f"f{i}", 20_000.0) for i in range(4)]
    docs += [job("g", "g0", 3000.0), job("g", "g1", 3000.0)]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump_all(docs))
    tenants = _tenants_file(
        tmp_path, _tenant("f", weight=3), _tenant("g", quotas={"v100": {"guaranteed": 2}})
    )
    out = {}
    for flag in ("--quotas", "--no-quotas"):
        res = runner.invoke(
            app,
            ["simulate", str(jobs), "--tenants", str(tenants), flag, "--policy",
             "price-discovery", "--cluster", "v100=4", "--json"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        out[flag] = json.loads(res.stdout.strip().splitlines()[-1])["tenants"]
    assert out["--quotas"]["g"]["guarantee_met"] == 1.0
    assert out["--no-quotas"]["g"]["guarantee_met"] < 1.0
    assert out["--quotas"]["f"]["guarantee_met"] is None
    # g's jobs each need 3000 s of a V100: exactly that with their own GPU from t = 0, longer
    # with a quarter of the cluster.
    assert out["--quotas"]["g"]["avg_jct_s"] == pytest.approx(3000.0)
    assert out["--no-quotas"]["g"]["avg_jct_s"] > 3000.0


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        (
            [_tenant("a"), _tenant("b", quotas={"v100": {"guaranteed": "2"}})],
            "document 2 (tenant b): spec.quotas.v100.guaranteed",
        ),
        (
            [_tenant("a", quotas={"k80": {"guaranteed": 9}})],
            "document 1 (tenant a): spec.quotas.k80.guaranteed",
        ),
        ([{"kind": "FungibleJob", "metadata": {"name": "x"}}], "document 1: kind: expected Tenant"),
        ([_tenant("a"), _tenant("a")], "document 2 (tenant a): metadata.name"),
    ],
)
def test_bad_tenants_file_exits_2_naming_file_document_and_field(
    tmp_path: pathlib.Path, docs: list[dict[str, Any]], expected: str
) -> None:
    tenants = _tenants_file(tmp_path, *docs)
    res = _run(str(_workload(tmp_path)), "--tenants", str(tenants), "--policy", "pd")
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert str(tenants) in text and expected in text, res.output
    assert "Traceback" not in res.output


def test_tenants_need_the_operators_mechanics(tmp_path: pathlib.Path) -> None:
    tenants = _tenants_file(tmp_path, _tenant("a"))
    res = _run(str(_workload(tmp_path)), "--tenants", str(tenants), "--semantics", "gavel")
    assert res.exit_code == 2
    assert "--tenants needs --semantics walras" in res.output


def test_sweep_accepts_tenants(tmp_path: pathlib.Path) -> None:
    from walras.sim import sweep

    _workload(tmp_path)
    _tenants_file(tmp_path, _tenant("a", quotas={"v100": {"guaranteed": 2}}))
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(
        "trace: jobs.yaml\ncluster: v100=4,p100=4,k80=4\npolicies: [price-discovery]\n"
        "tenants: tenants.yaml\n"
    )
    spec = sweep.load_spec(spec_path)
    (row,) = sweep.run_sweep(spec, workers=1)
    assert "error" not in row
    assert set(row["tenants"]["a"]) == TENANT_KEYS
    assert sweep._flat(row)["tenant.a.guarantee_met"] == row["tenants"]["a"]["guarantee_met"]


def test_whole_gangs_fill_a_guarantee_as_far_as_gangs_allow() -> None:
    # Two 4-GPU gangs against a guarantee of 6: one fits, the other would overshoot.
    assert guarantees.whole_gangs([4, 4], 6) == 4
    # 1 + 1 + 4 = 6 reaches it (taking 2 + 1 + 1 first would leave 4 out).
    assert guarantees.whole_gangs([1, 1, 2, 4], 6) == 6
    assert guarantees.whole_gangs([8], 6) == 0

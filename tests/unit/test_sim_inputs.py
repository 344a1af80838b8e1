"""Readers of ``walras simulate``'s inputs: Gavel traces, throughput tables, cluster specs.

Bad input must produce one error naming the file:line and the field (CLI exit code 2, checked
in ``test_sim_cli``); good input must parse to exactly what the file says.
"""

from __future__ import annotations

import pytest
from sim_helpers import TRACES

from walras.sim.cluster import build_cluster, parse_cluster, parse_gpus_per_node
from walras.sim.errors import SimInputError
from walras.sim.scenario import load_scenario
from walras.sim.throughputs import load_throughputs, parse_throughputs
from walras.sim.trace import parse_trace, read_trace

GOOD = "A3C\tpython3 main.py\trl\t--max-steps\t0\t1000\t1\t1\t-1.000000\t12.5\n"


def _line(**fields: str) -> str:
    names = ["type", "cmd", "dir", "arg", "needs", "steps", "sf", "prio", "slo", "arrival"]
    values = dict(zip(names, GOOD.rstrip("\n").split("\t"), strict=True))
    values.update(fields)
    return "\t".join(values[n] for n in names) + "\n"


def test_parses_a_gavel_line() -> None:
    (job,) = parse_trace(GOOD, source="t.trace").jobs
    assert (job.job_id, job.job_type, job.total_steps, job.scale_factor) == (0, "A3C", 1000, 1)
    assert (job.priority_weight, job.slo, job.arrival_s, job.line) == (1.0, None, 12.5, 1)


def test_shipped_traces_parse_with_gavel_numbering() -> None:
    trace = read_trace(TRACES["D2"])
    assert len(trace.jobs) == 96  # SOURCE.md §4: 96 jobs, 36 at t = 0
    assert sum(j.arrival_s == 0 for j in trace.jobs) == 36
    assert [j.job_id for j in trace.jobs] == list(range(96))
    assert {j.scale_factor for j in trace.jobs} == {1, 2, 4}


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        pytest.param({"sf": "x"}, r"t.trace:2: field 7 \(scale_factor\): .*'x'", id="sf-text"),
        pytest.param({"sf": "0"}, r"t.trace:2: field 7 \(scale_factor\)", id="sf-zero"),
        pytest.param({"steps": "1.5"}, r"t.trace:2: field 6 \(total_steps\)", id="steps-float"),
        pytest.param({"needs": "2"}, r"t.trace:2: field 5 \(needs_data_dir\)", id="needs"),
        pytest.param({"prio": "-1"}, r"t.trace:2: field 8 \(priority_weight\)", id="prio"),
        pytest.param({"slo": "nan"}, r"t.trace:2: field 9 \(SLO\)", id="slo"),
        pytest.param({"arrival": "-3"}, r"t.trace:2: field 10 \(arrival_time\)", id="arrival"),
        pytest.param({"arrival": "1"}, r"t.trace:2: field 10 .*sorted", id="unsorted"),
        pytest.param({"type": " "}, r"t.trace:2: field 1 \(job_type\)", id="type"),
    ],
)
def test_trace_errors_name_line_and_field(bad: dict[str, str], expected: str) -> None:
    with pytest.raises(SimInputError, match=expected):
        parse_trace(GOOD + _line(**bad), source="t.trace")


def test_trace_wrong_field_count() -> None:
    with pytest.raises(SimInputError, match=r"t.trace:1: expected 10 tab-separated fields.*got 9"):
        parse_trace("a\tb\tc\td\te\tf\tg\th\ti\n", source="t.trace")


def test_blank_lines_skipped_and_empty_trace_refused() -> None:
    assert len(parse_trace("\n" + GOOD + "\n").jobs) == 1
    with pytest.raises(SimInputError, match="no jobs"):
        parse_trace("\n\n", source="t.trace")


def test_shipped_table_matches_gavel_values() -> None:
    table = load_throughputs()
    # SOURCE.md §2 sample values (steps/s), V100 / P100 / K80.
    values = table.values
    assert values["v100"][("ResNet-18 (batch size 16)", 1)] == pytest.approx(32.35, abs=0.005)
    assert values["k80"][("ResNet-18 (batch size 16)", 1)] == pytest.approx(4.80, abs=0.005)
    assert values["p100"][("Recommendation (batch size 512)", 1)] == pytest.approx(48.88, abs=0.005)
    assert len(values["v100"]) == 83
    assert values["k80"][("ResNet-50 (batch size 128)", 2)] == 0.0


def test_unknown_job_type_names_trace_line() -> None:
    text = GOOD + _line(type="NoSuchNet")
    with pytest.raises(SimInputError, match=r"t.trace:2: field 1 \(job_type\): unknown job type"):
        load_scenario(parse_trace(text, source="t.trace"), cluster="v100=1")


def test_missing_scale_factor_names_field_7() -> None:
    text = _line(sf="3")  # A3C exists, but not with 3 GPUs
    with pytest.raises(SimInputError, match=r"t.trace:1: field 7 \(scale_factor\).*scale factor 3"):
        load_scenario(parse_trace(text, source="t.trace"), cluster="v100=4")


def test_gpu_type_missing_from_throughputs() -> None:
    with pytest.raises(SimInputError, match=r"GPU type 'a100' is not in the throughputs file"):
        load_scenario(parse_trace(GOOD, source="t.trace"), cluster="v100=1,a100=2")


def test_bad_throughputs_file() -> None:
    with pytest.raises(SimInputError, match=r"job key 'ResNet' is not of the form"):
        parse_throughputs({"v100": {"ResNet": {"null": 1.0}}})
    with pytest.raises(SimInputError, match=r'"null" must be a non-negative number'):
        parse_throughputs({"v100": {"('A3C', 1)": {"null": "fast"}}})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("v100=20,p100=20,k80=20", {"v100": 20, "p100": 20, "k80": 20}),
        ("20:20:20", {"v100": 20, "p100": 20, "k80": 20}),
        ("8:16:24", {"v100": 8, "p100": 16, "k80": 24}),
        ("V100=2, k80=0", {"v100": 2, "k80": 0}),
    ],
)
def test_cluster_specs(spec: str, expected: dict[str, int]) -> None:
    assert parse_cluster(spec) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("v100=x", r"--cluster: v100: expected a non-negative integer, got 'x'"),
        ("20:20", r"Gavel's form has 3 counts"),
        ("v100=1,p100", r"'p100' is not of the form TYPE=COUNT"),
        ("v100", r"Gavel's form has 3 counts"),
        ("v100=1,v100=2", r"given twice"),
        ("v100=0", r"has no GPUs"),
    ],
)
def test_bad_cluster_specs(spec: str, expected: str) -> None:
    with pytest.raises(SimInputError, match=expected):
        parse_cluster(spec)


def test_gpus_per_node_forms_and_gavel_numbering() -> None:
    types = ["v100", "p100", "k80"]
    assert parse_gpus_per_node("4", types) == {"v100": 4, "p100": 4, "k80": 4}
    assert parse_gpus_per_node("4:4:8", types) == {"v100": 4, "p100": 4, "k80": 8}
    assert parse_gpus_per_node("v100=4,p100=4,k80=8", types)["k80"] == 8
    with pytest.raises(SimInputError, match="no node size for GPU type"):
        parse_gpus_per_node("v100=4", types)
    cluster = build_cluster({"v100": 8, "p100": 4, "k80": 8}, {"v100": 4, "p100": 4, "k80": 8})
    # Gavel registers types in sorted order and numbers GPUs across their servers.
    assert cluster.gpu_types == ("k80", "p100", "v100")
    assert [(n.gpu_type, n.gpu_ids) for n in cluster.nodes] == [
        ("k80", tuple(range(0, 8))),
        ("p100", tuple(range(8, 12))),
        ("v100", tuple(range(12, 16))),
        ("v100", tuple(range(16, 20))),
    ]
    with pytest.raises(SimInputError, match="not a multiple of 4"):
        build_cluster({"v100": 6}, {"v100": 4})

"""``walras simulate generate``: traces drawn from the throughput table and Philly's job sizes.

Oracles: the trace reader (the file is a valid 10-field trace), the shipped throughput table
(every job's type has a throughput at its scale factor on every GPU type; its steps take the
drawn duration on the reference type), Gavel's Poisson stream (``poisson_arrivals``) and the
binomial spread of the job-size fractions.
"""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from walras import console
from walras.cli import simulate_generate
from walras.sim import generate
from walras.sim.arrivals import poisson_arrivals
from walras.sim.errors import SimInputError
from walras.sim.scenario import load_scenario
from walras.sim.throughputs import load_throughputs
from walras.sim.trace import parse_trace

TABLE = load_throughputs()


def _trace(options: generate.GenerateOptions) -> list:
    return list(parse_trace("\n".join(generate.generate_lines(options, TABLE))).jobs)


def test_static_trace_reads_back_and_is_deterministic() -> None:
    options = generate.GenerateOptions(jobs=300, rate=None, seed=4)
    lines = generate.generate_lines(options, TABLE)
    assert lines == generate.generate_lines(options, TABLE)
    assert lines != generate.generate_lines(
        generate.GenerateOptions(jobs=300, rate=None, seed=5), TABLE
    )
    jobs = list(parse_trace("\n".join(lines)).jobs)
    assert len(jobs) == 300
    assert all(j.arrival_s == 0.0 for j in jobs)


def test_every_job_fits_the_table_and_its_duration() -> None:
    jobs = _trace(generate.GenerateOptions(jobs=2000, rate=None, seed=1))
    ref = TABLE.values["v100"]
    lo = 10**1.5 * 60.0  # shortest and longest duration drawn, in seconds
    hi = 10**4 * 60.0
    for job in jobs:
        key = (job.job_type, job.scale_factor)
        assert all(TABLE.values[t].get(key, 0.0) > 0 for t in TABLE.values)
        # Steps are rounded to an integer: half a step either way.
        seconds_lo = (job.total_steps - 0.5) / ref[key]
        seconds_hi = (job.total_steps + 0.5) / ref[key]
        assert seconds_hi >= lo and seconds_lo <= hi


def test_job_sizes_follow_philly() -> None:
    n = 20_000
    jobs = _trace(generate.GenerateOptions(jobs=n, rate=None, seed=2))
    scale = np.array([j.scale_factor for j in jobs])
    for size, p in generate.SCALE_FACTORS:
        # A fraction of n independent draws has standard deviation √(p(1−p)/n) (≤ 0.0035
        # here); five of them bound it for any seed but with probability below 1e-6.
        assert abs((scale == size).mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)
    short = sum(
        1
        for j in jobs
        if j.total_steps / TABLE.values["v100"][(j.job_type, j.scale_factor)] < 1000 * 60
    )
    # Durations below 10³ minutes are exactly the short class (10^U(1.5, 3)): probability 0.8.
    assert abs(short / n - 0.8) <= 5 * math.sqrt(0.8 * 0.2 / n)


def test_single_gpu_and_job_types() -> None:
    jobs = _trace(
        generate.GenerateOptions(
            jobs=500, rate=None, multi_gpu=False, job_types=("A3C", "CycleGAN")
        )
    )
    assert {j.scale_factor for j in jobs} == {1}
    assert {j.job_type for j in jobs} == {"A3C", "CycleGAN"}


def test_continuous_trace_has_gavels_arrivals() -> None:
    jobs = _trace(generate.GenerateOptions(jobs=400, rate=3.5, seed=9))
    expected = poisson_arrivals(400, 3.5, 9)
    np.testing.assert_allclose([j.arrival_s for j in jobs], expected, atol=1e-6)


def test_generated_trace_loads_as_a_scenario(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "g.trace"
    assert simulate_generate.main([str(out), "--jobs", "50", "--rate", "2", "--seed", "3"]) == 0
    scenario = load_scenario(out, cluster="v100=8,p100=8,k80=8", gpus_per_node="4")
    assert scenario.workload.n_jobs == 50


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--jobs", "10", "--rate", "-1"], "--rate"),
        (["--jobs", "10", "--rate", "0"], "--rate"),
        (["--jobs", "10", "--rate", "nan"], "--rate"),
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "10", "--job-types", "A3C,NoSuchModel"], "--job-types"),
        (["--jobs", "10", "--reference", "tpu"], "--reference"),
    ],
)
def test_bad_input_names_the_option_and_exits_2(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    out = tmp_path / "g.trace"
    assert simulate_generate.main([str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}:")
    assert "Traceback" not in err
    assert not out.exists()


def test_missing_jobs_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_generate.main(["x.trace"]) == 2
    assert "--jobs" in capsys.readouterr().err


def test_unknown_job_type_error_is_a_sim_input_error() -> None:
    with pytest.raises(SimInputError, match="--job-types: unknown job type 'Nope'"):
        generate.candidates(TABLE, generate.GenerateOptions(jobs=1, rate=None, job_types=("Nope",)))


def test_console_dispatches_simulate_generate(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "g.trace"
    monkeypatch.setattr("sys.argv", ["walras", "simulate", "generate", str(out), "--jobs", "3"])
    with pytest.raises(SystemExit) as exc:
        console.main()
    assert exc.value.code == 0
    assert len(parse_trace(out.read_text()).jobs) == 3

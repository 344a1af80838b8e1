"""walras.core.estimation: which throughput the policy sees per (job, GPU type), and why.

Oracles: the rule order of the module docstring, and jobs of one image with identical true rows
(so the estimate for a type is the value a similar job has there, exactly, in a rank-1 log model).
"""

from __future__ import annotations

from typing import Any

import pytest

from walras.core import estimation, model, progress
from walras.core.progress import Measured, Progress


def job(name: str, throughput: dict[str, float], image: str = "train:1") -> model.JobSpec:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "replicas": 1,
            "throughput": throughput,
            "template": {"spec": {"containers": [{"name": "c", "image": image}]}},
        },
    }
    parsed = model.parse_job(obj)
    assert isinstance(parsed, model.JobSpec)
    return parsed


def measured(**rates: tuple[float, int]) -> Progress:
    # rate r with n samples: n intervals of 10 s each at r steps/s.
    return Progress(
        steps_done=1.0,
        measured={t: Measured(r * 10.0 * n, 10.0 * n, n) for t, (r, n) in rates.items()},
    )


def test_similar_jobs_fill_the_missing_types() -> None:
    # Truth a=4, b=8, c=2 for every job of the image. Each ran on one type only; each declared a
    # wrong value (half the truth) for the type it ran on, and nothing else.
    jobs = [job("x", {"a": 2.0}), job("y", {"b": 4.0}), job("z", {"c": 1.0})]
    reported = {
        "uid-x": measured(a=(4.0, 5)),
        "uid-y": measured(b=(8.0, 5)),
        "uid-z": measured(c=(2.0, 5)),
    }
    eff = estimation.effective(jobs, reported, ["a", "b", "c"])
    x = eff[("ns", "x")]
    assert x.source == {"a": "measured", "b": "estimated", "c": "estimated"}
    assert x.throughput["a"] == 4.0
    assert x.throughput["b"] == pytest.approx(8.0, rel=1e-6)
    assert x.throughput["c"] == pytest.approx(2.0, rel=1e-6)
    assert x.detail == {"b": "estimated-own", "c": "estimated-own"}
    # Declared 2 vs measured 4: a factor of 2 is not more than MISMATCH_FACTOR (2); y likewise.
    assert x.mismatched == ()


def test_declared_until_enough_samples_then_measured_and_mismatch() -> None:
    jobs = [job("x", {"a": 1.0, "b": 0.0})]
    few = estimation.effective(jobs, {"uid-x": measured(a=(5.0, 2))}, ["a", "b"])[("ns", "x")]
    assert few.throughput == {"a": 1.0, "b": 0.0}  # declared 0 stays: cannot run there
    assert few.source == {"a": "declared", "b": "declared"}
    enough = estimation.effective(jobs, {"uid-x": measured(a=(5.0, 3))}, ["a", "b"])[("ns", "x")]
    assert enough.throughput["a"] == 5.0 and enough.source["a"] == "measured"
    assert enough.mismatched == ("a",)  # 5 / 1 > 2
    assert enough.samples == {"a": 3}


def test_default_and_unknown() -> None:
    jobs = [job("x", {"a": 3.0}, image="one"), job("y", {"a": 3.0}, image="two")]
    eff = estimation.effective(jobs, {}, ["a", "b"], defaults={"b": 7.0})
    # No job knows b: the admin's default.
    assert eff[("ns", "x")].throughput["b"] == 7.0
    assert eff[("ns", "x")].detail["b"] == "default"
    none = estimation.effective(jobs, {}, ["a", "b"])
    assert "b" not in none[("ns", "x")].throughput  # nothing known: not eligible there


def test_no_evidence_no_estimate() -> None:
    # Declarations alone (no measurement, no default): undeclared types stay out, as before.
    jobs = [job("x", {"a": 3.0}), job("y", {"b": 1.0})]
    eff = estimation.effective(jobs, {}, ["a", "b"])
    assert eff[("ns", "x")].throughput == {"a": 3.0}
    assert eff[("ns", "y")].throughput == {"b": 1.0}


def test_everything_declared_needs_no_estimate() -> None:
    jobs = [job("x", {"a": 3.0, "b": 1.0})]
    eff = estimation.effective(jobs, {}, ["a", "b"])[("ns", "x")]
    assert eff.throughput == {"a": 3.0, "b": 1.0}
    assert eff.fastest == 3.0


def test_group_label() -> None:
    assert estimation.job_group(job("x", {"a": 1.0}, image="img")) == "image:img"
    assert estimation.job_group(job("x", {"a": 1.0}), profile="resnet") == "profile:resnet"
    assert progress.MIN_SAMPLES == 3  # the samples the tests above straddle

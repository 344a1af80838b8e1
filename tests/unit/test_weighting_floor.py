"""The equal-weight floor of remaining-work weighting (``walras.core.weighting``), by hand."""

from __future__ import annotations

import pytest
from tests.unit.snapshot_helpers import cluster, job

from walras.core import model, snapshot, weighting


def two_jobs() -> tuple[list[model.JobSpec], snapshot.Snapshot]:
    short, long_ = job("short", {"v100": 1.0}), job("long", {"v100": 1.0})
    short["spec"]["totalWork"], long_["spec"]["totalWork"] = 100.0, 400.0
    snap = cluster([short, long_]).freeze(now=0.0)
    return list(snap.active_jobs), snap


def test_floor_worked_example() -> None:
    # Module docstring: β = −0.5 gives 4/3 and 2/3; γ = 1 averages each with 1: 7/6 and 5/6.
    jobs, snap = two_jobs()
    f = weighting.factors(jobs, snap, weighting="remaining", exponent=-0.5, floor=1.0)
    by_name = {j.name: v for j, v in zip(jobs, f, strict=True)}
    assert by_name["short"] == pytest.approx(7 / 6)
    assert by_name["long"] == pytest.approx(5 / 6)
    # The mean stays 1 and no factor is below γ / (1 + γ) = 1/2.
    assert f.mean() == pytest.approx(1.0)
    assert f.min() >= 0.5


def test_negative_floor_is_refused() -> None:
    jobs, snap = two_jobs()
    with pytest.raises(ValueError, match="floor"):
        weighting.factors(jobs, snap, weighting="remaining", floor=-0.1)

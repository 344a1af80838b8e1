"""``offline_optimum`` leaves stdout alone (bench/sim print one JSON line per case there).

HiGHS prints ``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();`` with a
bare ``printf`` on some instances whatever its output options say; the generated workload below
(60 SoWs, C = 20, seed 2, the ``workloads-C20-60sows`` bench case) is one where HiGHS 1.12 does.
Oracle: the bytes that reach file descriptor 1 (``capfd``), which must be none during the solve
and everything written after it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from walras.allocator import sow


def test_offline_optimum_writes_nothing_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    seed = 2
    params = sow.MechanismParams(2, 4, 8.0, seed=seed)
    sows = sow.generate(sow.WorkloadSpec(sows=60, births=10), params, seed)
    real = sow.sample_realisation(sows, np.random.default_rng(seed))
    best = sow.offline_optimum({"gpu": 20}, sows, real)
    assert best.welfare > 0
    os.write(1, b"after\n")  # the descriptor is restored: later output still arrives
    assert capfd.readouterr().out == "after\n"

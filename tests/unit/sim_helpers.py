"""Shared pieces of the ``test_sim_*`` tests: test-data paths and small stand-in policies."""

from __future__ import annotations

import gzip
import json
import pathlib
from typing import Any

import numpy as np
import numpy.typing as npt

from walras.sim.policies import PolicyView
from walras.sim.throughputs import parse_throughputs

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "gavel"

TRACES = {
    "D1": DATA / "small_test.trace",
    "D2": DATA / "max_min_fairness.trace",
    "D4": DATA / "static_multi_seed0_n100.trace",
}


# A hand-made throughput table: ``toy`` jobs at 2 steps/s on ``v100``, 1 or 2 GPUs (exact
# arithmetic for cases worked out by hand).
TOY_TABLE = parse_throughputs(
    {"v100": {"('toy', 1)": {"null": 2.0}, "('toy', 2)": {"null": 2.0}}}, source="toy.json"
)


def toy_trace(*jobs: tuple[int, int, float]) -> str:
    """Trace lines of ``toy`` jobs for (total_steps, scale_factor, arrival_s)."""
    return "".join(
        f"toy\tcmd\tdir\t--steps\t1\t{steps}\t{sf}\t1\t-1.000000\t{arrival}\n"
        for steps, sf, arrival in jobs
    )


def gavel_records(*cases: str) -> list[dict[str, Any]]:
    """Records of ``gavel_results.json`` (Gavel's own metrics) for ``cases``."""
    records = json.loads((DATA / "gavel_results.json").read_text())
    return [r for r in records if r["case"] in cases]


def replay_cases() -> list[pathlib.Path]:
    return sorted((DATA / "allocations").glob("*.json.gz"))


def load_replay(path: pathlib.Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


class Replay:
    """Returns Gavel's recorded allocations in order (checks clock and job set at each solve)."""

    def __init__(self, name: str, allocations: list[Any]) -> None:
        self.name = name
        self.allocations = allocations
        self.calls = 0

    def allocate(self, view: PolicyView) -> npt.NDArray[np.float64]:
        clock, table = self.allocations[self.calls]
        self.calls += 1
        ids = [str(j) for j in view.job_ids.tolist()]
        assert sorted(ids, key=int) == sorted(table, key=int), f"job set differs at t={clock}"
        out = np.zeros((len(ids), len(view.type_names)))
        for r, j in enumerate(ids):
            out[r] = [table[j][t] for t in view.type_names]
        return out


class Constant:
    """Every job gets ``share`` of the types in ``on`` (a stand-in with a known answer)."""

    def __init__(self, name: str, on: dict[str, float]) -> None:
        self.name = name
        self.on = on
        self.views: list[PolicyView] = []

    def allocate(self, view: PolicyView) -> npt.NDArray[np.float64]:
        self.views.append(view)
        row = [self.on.get(t, 0.0) for t in view.type_names]
        return np.tile(np.array(row, dtype=np.float64), (len(view.job_ids), 1))

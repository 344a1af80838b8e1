"""HadarE against Hadar on the Hadar paper's single-job mix M-1, through the product policies.

The run is ``walras simulate --semantics walras`` (``hadar_helpers.simulate_manifests``) on the
paper's five one-GPU nodes. Bounds, derived for one job of work ``W`` whose per-node rates are
``a_k`` (``a* = max a_k``, ``A = Σ_k a_k``), rounds of ``L`` seconds and restarts of ``R``:

- Hadar runs ONE gang, so at any moment the job progresses at most at ``a*``:
  ``TTD_hadar ≥ W / a*``.
- HadarE runs one copy per node with room; alone in the cluster the job has all five, and the
  work of a round is split in proportion to the copies' rates, so every copy computes for the
  whole round minus at most one restart: each round before the last does at least
  ``A · (L − R)`` work, and the last one finishes within its round. So
  ``TTD_hadare ≤ ⌈W / (A (L − R))⌉ · L``.

Hence ``TTD_hadar / TTD_hadare ≥ (W / a*) / (⌈W / (A (L − R))⌉ · L)``: the speed-up of forking is
``A / a*`` up to the restart and round granularity.
"""

from __future__ import annotations

import math

import pytest
from tests.unit.hadar_helpers import PAPER_CLUSTER, paper_mix, simulate_manifests

ROUND_S = 360.0
RESTART_S = 10.0


def test_hadare_beats_hadar_on_single_job_mix_by_the_forking_bound() -> None:
    docs = paper_mix(1)
    spec = docs[0]["spec"]
    work = float(spec["totalWork"])
    counts = {t: int(c) for t, c in (p.split("=") for p in PAPER_CLUSTER.split(","))}
    rates = [float(spec["throughput"][t]) for t, c in counts.items() for _ in range(c)]
    assert len(rates) == 5  # the paper's five one-GPU nodes
    best, total = max(rates), sum(rates)
    hadar = simulate_manifests(docs, "hadar", restart_seconds=RESTART_S, round_seconds=ROUND_S)
    hadare = simulate_manifests(docs, "hadare", restart_seconds=RESTART_S, round_seconds=ROUND_S)
    hadar_lower = work / best
    hadare_upper = math.ceil(work / (total * (ROUND_S - RESTART_S))) * ROUND_S
    assert hadar["makespan_s"] >= hadar_lower * (1 - 1e-9)
    assert hadare["makespan_s"] <= hadare_upper * (1 + 1e-9)
    assert hadar["makespan_s"] / hadare["makespan_s"] >= hadar_lower / hadare_upper
    # The bound itself is a real speed-up on this mix (Σ rates / best rate > 1 with room to spare).
    assert hadar_lower / hadare_upper > 1.5


def test_hadare_alone_reaches_the_lower_bound_of_any_schedule() -> None:
    # Any schedule of the single job: every GPU reloads the checkpoint once (R) before it works,
    # and the job never runs faster than on all five nodes at once (A), so TTD ≥ R + W / A.
    # HadarE reaches it: all five copies start at t = 0 and stay (the end game keeps the slower
    # copies while no other job wants their GPUs, so none is dropped or restarted), and the
    # simulator finishes the job at R + W / A.
    docs = paper_mix(1)
    spec = docs[0]["spec"]
    work = float(spec["totalWork"])
    counts = {t: int(c) for t, c in (p.split("=") for p in PAPER_CLUSTER.split(","))}
    total = sum(float(spec["throughput"][t]) * c for t, c in counts.items())
    hadare = simulate_manifests(docs, "hadare", restart_seconds=RESTART_S, round_seconds=ROUND_S)
    assert hadare["makespan_s"] == pytest.approx(RESTART_S + work / total, rel=1e-9)
    assert hadare["restarts"] == 1

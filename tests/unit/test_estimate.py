"""Throughput estimation (walras.allocator.estimate): planted low-rank recovery, Gavel's table with
entries held out, sources, input errors and properties."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.csgraph
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from walras.allocator.errors import InvalidProblem
from walras.allocator.estimate import Source, estimate_throughputs


def _connected(mask: np.ndarray) -> bool:
    """Jobs and types joined by known entries form one connected bipartite graph (scipy)."""
    n, m = mask.shape
    adj = np.zeros((n + m, n + m), dtype=bool)
    adj[:n, n:] = mask
    count, _ = scipy.sparse.csgraph.connected_components(scipy.sparse.csr_matrix(adj | adj.T))
    return bool(count == 1)


def _planted_mask(rng: np.random.Generator, n: int, m: int, p: float, per_row: int) -> np.ndarray:
    """Random revealed set with at least ``per_row`` entries per row and 2 per column."""
    while True:
        mask = rng.random((n, m)) < p
        enough = (mask.sum(axis=1) >= per_row).all() and (mask.sum(axis=0) >= 2).all()
        if enough and _connected(mask) and not mask.all():
            return mask


def test_worked_example_of_the_docstring() -> None:
    # y is twice as fast as x on a K80, x is 4x faster on a V100 => y runs 8 on a V100.
    est = estimate_throughputs([[1.0, 4.0], [2.0, np.nan]])
    assert est.values[1, 1] == pytest.approx(8.0, rel=1e-9)
    assert est.source(1, 1) is Source.ESTIMATED_OWN
    assert est.source(0, 0) is Source.DECLARED


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_planted_multiplicative_matrix_is_recovered_exactly(rank: int) -> None:
    # T = s_j · f_t (rank 1 in linear space, additive in log space), noiseless, revealed entries
    # connecting every job and type. Then a_j + b_t fits every known log-value with zero
    # residual, so F = 0 with u = v = 0 is the global minimum (the ridge terms are 0 there too)
    # and it is unique up to the gauge a + c, b − c, which a_j + b_t does not see. Every missing
    # entry is therefore determined exactly; the only error left is lsqr's (relative tolerance
    # 1e-15 times the condition number of a 60×8 incidence system, well under 1e-8).
    rng = np.random.default_rng(7)
    n, m = 60, 8
    truth = np.exp(rng.normal(0, 2, (n, 1)) + rng.normal(0, 1, (1, m)))
    mask = _planted_mask(rng, n, m, 0.3, 1)
    est = estimate_throughputs(np.where(mask, truth, np.nan), rank=rank)
    assert est.converged
    err = np.abs(est.values / truth - 1)[~mask]
    assert err.max() < 1e-8


def test_planted_interaction_is_recovered_to_ridge_accuracy() -> None:
    # log T = a_j + b_t + u_j v_t exactly (rank 1 interaction), noiseless. With ≥ 3 known entries
    # per row (2 unknowns a_j, u_j) and ≥ 2 per column, the exact parameters give F = λ(|u|² + |v|²)
    # only; the minimiser moves the fit by O(λ) relative to the data's curvature (≥ 1 per known
    # entry), so with λ = 1e-9 every missing log-value is within 1e-6 of the truth once ALS has
    # converged to 1e-13.
    rng = np.random.default_rng(3)
    n, m = 40, 6
    logs = (
        rng.normal(0, 1, (n, 1))
        + rng.normal(0, 1, (1, m))
        + np.outer(rng.normal(0, 1, n), rng.normal(0, 1, m))
    )
    mask = _planted_mask(rng, n, m, 0.7, 3)
    est = estimate_throughputs(
        np.where(mask, np.exp(logs), np.nan), rank=1, ridge=1e-9, tol=1e-13, max_iter=20_000
    )
    assert est.converged
    assert np.abs(np.log(est.values) - logs)[~mask].max() < 1e-6


def test_pure_rank_one_in_log_space_is_recovered() -> None:
    # log T = u_j v_t with no biases is a special case of the model (a = b = 0); same argument.
    rng = np.random.default_rng(11)
    n, m = 30, 5
    logs = np.outer(rng.uniform(0.5, 2.0, n), rng.uniform(-1.5, 1.5, m))
    mask = _planted_mask(rng, n, m, 0.75, 3)
    est = estimate_throughputs(
        np.where(mask, np.exp(logs), np.nan), rank=1, ridge=1e-9, tol=1e-13, max_iter=20_000
    )
    assert np.abs(np.log(est.values) - logs)[~mask].max() < 1e-6


def _gavel_table() -> tuple[np.ndarray, list[str]]:
    raw = json.loads(
        resources.files("walras.data.gavel").joinpath("simulation_throughputs.json").read_text()
    )
    types = ["k80", "p100", "v100"]
    keys = sorted(raw["v100"])
    table = np.array([[raw[t][k]["null"] for t in types] for k in keys], dtype=np.float64)
    return table, keys


def test_gavel_table_with_entries_held_out_beats_the_per_type_mean() -> None:
    # Gavel's measured throughputs (83 job types × scales, K80/P100/V100). Hold out a third of the
    # positive entries (10 seeded draws) and estimate them from the rest. The independent
    # baseline is the per-type mean of the known values, which ignores the job; models differ by
    # orders of magnitude in steps/s, so it is off by ~100 %. The estimator uses the job's own
    # values, so its median relative error must be lower (the bound), and it is reported.
    table, _ = _gavel_table()
    rng = np.random.default_rng(0)
    ours, base = [], []
    for _ in range(10):
        hide = (rng.random(table.shape) < 1 / 3) & (table > 0)
        known = np.where(hide, np.nan, table)
        est = estimate_throughputs(known)
        own = hide & (np.array(est.sources) == Source.ESTIMATED_OWN.value)
        ours.append(np.abs(est.values[own] / table[own] - 1))
        mean = np.nanmean(known, axis=0)
        base.append(np.abs(np.broadcast_to(mean, table.shape)[own] / table[own] - 1))
    ours_med = float(np.median(np.concatenate(ours)))
    base_med = float(np.median(np.concatenate(base)))
    print(
        f"Gavel table, 1/3 held out: median relative error {ours_med:.3f} "
        f"(per-type mean baseline {base_med:.3f})"
    )
    assert ours_med < base_med, (ours_med, base_med)


def test_sources_similar_default_unknown_and_measured() -> None:
    nan = np.nan
    values = [
        [2.0, 8.0, nan],  # job 0, group "a", measured on type 0
        [nan, nan, nan],  # job 1, group "a": nothing of its own
        [nan, nan, nan],  # job 2, no group, no info
        [0.0, 3.0, nan],  # job 3: cannot run on type 0
    ]
    samples = [[4, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    est = estimate_throughputs(
        values, samples, groups=["a", "a", None, None], defaults=[nan, 5.0, 7.0]
    )
    src = est.sources
    assert src[0][:2] == (Source.MEASURED, Source.DECLARED)
    # Type 2 has no known value for any job: only the admin default can fill it.
    assert src[0][2] is Source.DEFAULT and est.values[0, 2] == 7.0
    assert src[1][:2] == (Source.ESTIMATED_SIMILAR, Source.ESTIMATED_SIMILAR)
    assert src[2] == (Source.UNKNOWN, Source.DEFAULT, Source.DEFAULT)
    assert np.isnan(est.values[2, 0])
    assert est.values[3, 0] == 0.0 and src[3][0] is Source.DECLARED
    # Job 1 borrows its group's speed: the group has one job, so it gets exactly job 0's values.
    assert est.values[1, :2] == pytest.approx([2.0, 8.0], rel=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"values": [[1.0, -1.0]]}, "job j1 on GPU type v100"),
        ({"values": [[1.0, np.inf]]}, "job j1 on GPU type v100"),
        ({"values": [[1.0, np.nan]], "samples": [[0, 2]]}, "samples of job j1 on GPU type v100"),
        ({"values": [[1.0, 2.0]], "samples": [[0.5, 0]]}, "samples of job j1 on GPU type k80"),
        ({"values": [[1.0, 2.0]], "defaults": [1.0, 0.0]}, "GPU type v100"),
        ({"values": [[1.0, 2.0]], "groups": ["a", "b"]}, "groups has 2 labels for 1 jobs"),
        ({"values": [[1.0, 2.0]], "rank": -1}, "rank"),
        ({"values": [[1.0, 2.0]], "ridge": 0.0}, "ridge"),
        ({"values": [1.0, 2.0]}, "matrix"),
    ],
)
def test_input_errors_name_the_job_and_type(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(InvalidProblem, match=needle):
        estimate_throughputs(
            job_names=["j1"] if np.ndim(kwargs["values"]) == 2 else None,  # type: ignore[arg-type]  # test inputs are plain lists
            type_names=["k80", "v100"] if np.ndim(kwargs["values"]) == 2 else None,  # type: ignore[arg-type]  # idem
            **kwargs,  # type: ignore[arg-type]  # parametrised inputs
        )


_matrices = hnp.arrays(
    np.float64,
    st.tuples(st.integers(1, 7), st.integers(1, 4)),
    elements=st.one_of(st.just(np.nan), st.just(0.0), st.floats(1e-3, 1e4, allow_nan=False)),
)


@settings(max_examples=60, deadline=None)
@given(_matrices, st.integers(0, 2))
def test_known_entries_unchanged_and_estimates_positive(values: np.ndarray, rank: int) -> None:
    est = estimate_throughputs(values, rank=rank)
    known = ~np.isnan(values)
    assert np.array_equal(est.values[known], values[known])
    missing = ~known
    unknown = np.array(est.sources) == Source.UNKNOWN.value
    filled = est.values[missing & ~unknown]
    assert np.all(np.isfinite(filled)) and np.all(filled > 0)
    assert np.all(np.isnan(est.values[unknown]))


@settings(max_examples=60, deadline=None)
@given(_matrices, st.randoms(use_true_random=False))
def test_permuting_jobs_and_types_permutes_the_estimates(values: np.ndarray, rnd: object) -> None:
    # rank 0 is a convex least-squares problem whose predictions are unique, so relabelling jobs
    # and types can only relabel the answer (up to lsqr's round-off).
    n, m = values.shape
    rows = list(range(n))
    cols = list(range(m))
    rnd.shuffle(rows)  # type: ignore[attr-defined]  # hypothesis' Random
    rnd.shuffle(cols)  # type: ignore[attr-defined]  # idem
    est = estimate_throughputs(values, rank=0)
    perm = estimate_throughputs(values[np.ix_(rows, cols)], rank=0)
    np.testing.assert_allclose(perm.values, est.values[np.ix_(rows, cols)], rtol=1e-7)
    assert [[perm.sources[i][k] for k in range(m)] for i in range(n)] == [
        [est.sources[r][c] for c in cols] for r in rows
    ]

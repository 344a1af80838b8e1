"""numpy and torch give the same answer (within float tolerance) through the same code path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pricing_helpers import assert_feasible, random_problem

from walras.allocator import pricing
from walras.allocator.pricing import solver
from walras.allocator.pricing.backend import get_backend
from walras.allocator.pricing.instances import paper_problem

torch = pytest.importorskip("torch")

KINDS = ["linear", "log", "alpha", "target"]


NO_CUDA = "no CUDA device: torch.cuda.is_available() is False (bench/gpu_check.py on a GPU host)"


def devices() -> list[Any]:
    """The CPU, and CUDA (skipped with the reason when there is none)."""
    cuda = pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
    )
    return ["cpu", cuda]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", [*KINDS, "mixed"])
def test_numpy_and_torch_agree(kind: str, device: str) -> None:
    rng = np.random.default_rng(11)
    n = 600
    kinds = [KINDS[i % 4] for i in range(n)] if kind == "mixed" else kind
    problem = random_problem(rng, n, 4, kinds, per_type_demand=kind == "mixed", zeros=0.2)
    a = pricing.solve(problem, backend="numpy")
    b = pricing.solve(problem, backend="torch", device=device)
    assert b.backend.startswith("torch")
    assert a.iterations == b.iterations
    np.testing.assert_allclose(b.prices, a.prices, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(b.allocation, a.allocation, atol=1e-7)
    assert b.utility == pytest.approx(a.utility, rel=1e-9, abs=1e-9)
    assert b.dual_bound == pytest.approx(a.dual_bound, rel=1e-9, abs=1e-9)
    assert_feasible(problem, b.allocation)


def test_best_response_matches_solver_backend_independent() -> None:
    problem = random_problem(np.random.default_rng(12), 200, 3, "log")
    prices = np.array([0.5, 1.0, 2.0])
    X = pricing.best_response(problem, prices)
    assert X.shape == (200, 3)
    assert (X >= 0).all() and (X.sum(axis=1) <= 1 + 1e-12).all()


def test_backend_selection() -> None:
    assert get_backend("numpy").name == "numpy"
    b = get_backend("torch", "cpu")
    assert (b.name, b.device) == ("torch", "cpu")
    auto = get_backend("auto")
    assert auto.name == ("torch" if torch.cuda.is_available() else "numpy")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", ["log", "target"])
def test_numpy_and_torch_agree_with_sampled_start_and_polish(kind: str, device: str) -> None:
    # Above the sampled-start size: start prices from the samples, then (log) the elastic-job
    # polish, which runs on numpy arrays of the torch solve's data. Same path, same answer.
    n = solver.COARSE_MIN_JOBS
    problem = paper_problem(n, seed=3, utility=kind)
    a = pricing.solve(problem, backend="numpy")
    b = pricing.solve(problem, backend="torch", device=device)
    assert b.backend.startswith("torch")
    assert a.converged and b.converged
    assert a.iterations == b.iterations
    assert a.timings["polish_steps"] == b.timings["polish_steps"]
    if kind == "log":
        assert b.timings["polish_steps"] >= 1
    np.testing.assert_allclose(b.prices, a.prices, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(b.allocation, a.allocation, atol=1e-7)
    assert b.utility == pytest.approx(a.utility, rel=1e-9)
    assert b.dual_bound == pytest.approx(a.dual_bound, rel=1e-9)
    assert_feasible(problem, b.allocation)

"""Price discovery over GPU types.

The method of "Allocation of fungible resources via a fast, scalable price discovery method"
(Agrawal, Boyd et al.), written for numpy (and torch) with its own start prices and recovery.

Public interface::

    problem = pricing.PricingProblem(throughput, capacity, demand=None, kind="log", ...)
    issues = pricing.screen_jobs(problem)        # per-job defects solve() would reject
    result = pricing.solve(problem, eps=1e-3)     # immutable PricingResult
    X = pricing.best_response(problem, result.prices)

Modules: ``problem`` (data, validation), ``utilities`` (u(t) kinds), ``subproblem`` (per-job
best response on the cost hull), ``solver`` (quasi-Newton on the dual), ``polish`` (a feasible
allocation from one evaluation: Newton on the elastic jobs), ``bfgs`` (start prices on samples),
``backend`` (numpy/torch), ``instances`` (the paper's §6.2 generator).
"""

from walras.allocator.pricing.problem import JobIssue, PricingProblem, screen_jobs
from walras.allocator.pricing.solver import PricingResult, best_response, solve

__all__ = [
    "JobIssue",
    "PricingProblem",
    "PricingResult",
    "best_response",
    "screen_jobs",
    "solve",
]

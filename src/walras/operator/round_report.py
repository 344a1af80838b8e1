"""One round's report: its timings and counts, logged as one JSON line and exported as metrics.

The operator logs it as ``round {...}`` (JSON), which the benchmark reads; Prometheus reads the
metrics (``walras.operator.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from walras.operator import metrics


@dataclass(slots=True)
class RoundReport:
    """Timings (seconds) and counts of one round."""

    round: int
    incremental: bool
    jobs: int = 0
    nodes: int = 0
    snapshot: float = 0.0
    solve: float = 0.0
    realise: float = 0.0
    writes: float = 0.0
    total: float = 0.0
    deletes_s: float = 0.0
    creates_s: float = 0.0
    binds_s: float = 0.0
    status_s: float = 0.0
    notice_s: float = 0.0  # the advance notice: the forecast (a second realise) and its patches
    creates: int = 0
    binds: int = 0
    bound_at_create: int = 0  # created with spec.nodeName: their gang fitted at creation
    deletes: int = 0
    status_patches: int = 0  # job and pool statuses
    job_status_patches: int = 0  # of which FungibleJob statuses (at most one per job per round)
    notices: int = 0  # pods whose advance notice (walras.dev/stop-at) was set or removed
    history_writes: int = 0  # ConfigMap shards of the schedule history (history_store)
    events: int = 0
    errors: int = 0
    iterations: int = 0
    gap: float = 0.0
    prices: dict[str, float] = field(default_factory=dict)


def observe(report: RoundReport, policy: str, *, reports_gap: bool) -> None:
    """Export one finished round's timings, solver figures and prices as metrics (the duality gap
    only for a policy that has one)."""
    for phase in ("snapshot", "solve", "realise", "writes", "total"):
        metrics.ROUND_SECONDS.labels(phase=phase).observe(getattr(report, phase))
    metrics.SOLVE_SECONDS.labels(policy=policy).observe(report.solve)
    metrics.SOLVER_ITERATIONS.labels(policy=policy).set(report.iterations)
    if reports_gap:
        metrics.DUALITY_GAP.set(report.gap)
    for gpu_type, price in report.prices.items():
        metrics.PRICE.labels(gpu_type=gpu_type).set(price)
    metrics.ROUNDS.inc()

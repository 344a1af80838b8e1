"""Prometheus metrics of the Walras controller (prefix ``walras_``).

Every metric lives in one private registry, ``REGISTRY``, so tests and several in-process operators
never collide with the default global registry. The controller updates them once per round; the
HTTP endpoint that exposes them is served by ``walras.operator.health``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

# Round phases: snapshot, solve, realise, writes, total.
ROUND_SECONDS = Histogram(
    "walras_round_seconds",
    "Wall time of one scheduling round, by phase.",
    ["phase"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
SOLVE_SECONDS = Histogram(
    "walras_solve_seconds",
    "Wall time of the allocator solve, by policy.",
    ["policy"],
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SOLVER_ITERATIONS = Gauge(
    "walras_solver_iterations",
    "Iterations (price discovery) or sweeps (PS-DSF) of the last solve.",
    ["policy"],
    registry=REGISTRY,
)
DUALITY_GAP = Gauge(
    "walras_duality_gap",
    "Duality gap g(p) - U(X) of the last price-discovery solve (total, not averaged).",
    registry=REGISTRY,
)
PRICE = Gauge(
    "walras_price",
    "Current price (marginal utility of one more GPU) per GPU type.",
    ["gpu_type"],
    registry=REGISTRY,
)
ALLOCATED_SHARE = Gauge(
    "walras_allocated_share",
    "Fraction of a ResourcePool's GPUs allocated in the last round.",
    ["pool"],
    registry=REGISTRY,
)
PENDING_JOBS = Gauge(
    "walras_pending_jobs",
    "FungibleJobs pending at the end of the last round, by condition reason.",
    ["reason"],
    registry=REGISTRY,
)
TENANT_GPUS = Gauge(
    "walras_tenant_gpus",
    "GPUs of a Tenant (with its descendants) per GPU type after the last round, by state: "
    "guaranteed, in_use, borrowed (held beyond the guarantee), lent (its guarantee held by "
    "others).",
    ["tenant", "gpu_type", "state"],
    registry=REGISTRY,
)
BINDINGS = Counter(
    "walras_bindings",
    "Pods bound to nodes: created with spec.nodeName, or through pods/binding.",
    registry=REGISTRY,
)
PREEMPTIONS = Counter(
    "walras_preemptions",
    "Pods deleted because their time slice ended.",
    registry=REGISTRY,
)
ROUNDS = Counter(
    "walras_rounds",
    "Scheduling rounds completed.",
    registry=REGISTRY,
)
JOB_THROUGHPUT = Gauge(
    "walras_job_throughput",
    "Steps per second a job's policy input holds per GPU type, by where the value came from "
    "(declared in spec.throughput, measured from walras.dev/steps-done, or estimated).",
    ["namespace", "job", "gpu_type", "source"],
    registry=REGISTRY,
)
RESTART_SECONDS = Histogram(
    "walras_restart_seconds",
    "Measured restart cost of a gang start, per tenant: from its pods' creation to the first "
    "progress report above the step count it restored (walras.core.restarts).",
    ["tenant"],
    registry=REGISTRY,
    buckets=(1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)
STEPS_LOST = Counter(
    "walras_steps_lost",
    "Reported steps a restore fell back from (work since the last checkpoint), per tenant.",
    ["tenant"],
    registry=REGISTRY,
)

"""Truthful posted-price scheduling of recurring jobs with statements of work.

The mechanism is docs/algorithms.md#statements-of-work. A customer declares a
:class:`StatementOfWork` once; at its birth the platform posts unit prices
``p(τ) = p_min μ^{y(τ)/C'}`` and failure estimates ``q̂`` (Monte Carlo over
earlier-born jobs only), chooses the launch plan maximising ``E[(1 − q̂)(v − P)⁺]`` under the
report, and commits to it. Each round, a running job that no completion can pay any more is
cancelled for free (Walras's addition, :mod:`.cancellation`), jobs start per plan and, when the
committed load exceeds capacity, active jobs are evicted or cancelled in LIFO order of birth;
only completed jobs pay.

Modules, one concern each:

- :mod:`.model`: the SoW (concurrency per type, value function, distribution, recurrence);
- :mod:`.params`: bounds ``K, D, V``, ``ε``, ``p_min``, ``μ``, Hoeffding sample count, ``θ``;
- :mod:`.prices`: unit and bundle prices; :mod:`.failure`: ``q̂``; :mod:`.plan`: launch plans;
- :mod:`.cancellation`: the unprofitable-cancellation rule and why it restores Theorem 3.2;
- :mod:`.ledger`: the immutable state; :mod:`.admission`: ``admit``; :mod:`.round_step`: rounds;
- :mod:`.simulate`: drive a ledger over a known realisation; :mod:`.workload`: generator;
  :mod:`.offline`: the offline optimum in hindsight (HiGHS MILP);
- :mod:`.status`: JSON-ready admission/job views for CRD status and ``walras explain``.

Guarantees as measured (``tests/unit/test_sow_sim.py``, ``tests/unit/test_sow.py``,
``bench/bench_sow.py``): no misreport of ``k``, value or distribution gains more than ``2Δ``
(Theorem 3.2 with ``Δ`` the estimation error of plan utilities), in both settings:

- ``duration_revealed=True``: every planned outcome has ``v − P > 0``, the paper's argument
  applies as written, and the cancellation rule never fires under truthful reports;
- ``duration_revealed=False``: a start serves several durations, and the late ones may finish
  too late to be worth their price. The paper's argument has a gap there: over-reporting ``k``
  turns those into free LIFO evictions ("insurance"; measured with the rule off
  (``MechanismParams.cancel_unprofitable=False``): gain 0.759 against ``2Δ`` = 0.030 on a
  generated instance). The cancellation rule (default on) makes every executed outcome of a
  truthful report pay, which closes the gap (proof in :mod:`.cancellation`; measured: no gain on
  the same instances). Its welfare cost or gain against the offline optimum is in
  ``bench_sow``'s ``-rule-off`` lines.

Recurring SoWs are one job per instance (the paper's myopic agents): manipulation across
instances of one SoW is outside the paper's guarantee.

Pure: numpy and scipy only. Callers: the operator (CRD ``StatementOfWork``) and the simulator
(policy ``sow``); both keep the :class:`Ledger` and pass it in and out.
"""

from walras.allocator.sow.admission import admit
from walras.allocator.sow.ledger import (
    Admission,
    FailureTable,
    JobState,
    LaunchPlan,
    Ledger,
    Phase,
    PlanEntry,
)
from walras.allocator.sow.model import (
    Distribution,
    Instance,
    Recurrence,
    StatementOfWork,
    TypeDemand,
    ValueFunction,
    instance_id,
    instances,
    validate,
)
from walras.allocator.sow.offline import OfflineResult, offline_optimum
from walras.allocator.sow.params import MechanismParams, hoeffding_samples, log_kdv
from walras.allocator.sow.prices import PriceMenu, unit_prices
from walras.allocator.sow.round_step import (
    Completions,
    RoundReport,
    end_round,
    start_round,
    step,
)
from walras.allocator.sow.simulate import (
    MarketOutcome,
    Realisation,
    run_market,
    sample_realisation,
)
from walras.allocator.sow.status import admission_status, job_status, plan_summary
from walras.allocator.sow.workload import WorkloadSpec, generate

__all__ = [
    "Admission",
    "Completions",
    "Distribution",
    "FailureTable",
    "Instance",
    "JobState",
    "LaunchPlan",
    "Ledger",
    "MarketOutcome",
    "MechanismParams",
    "OfflineResult",
    "Phase",
    "PlanEntry",
    "PriceMenu",
    "Realisation",
    "Recurrence",
    "RoundReport",
    "StatementOfWork",
    "TypeDemand",
    "ValueFunction",
    "WorkloadSpec",
    "admission_status",
    "admit",
    "end_round",
    "generate",
    "hoeffding_samples",
    "instance_id",
    "instances",
    "job_status",
    "log_kdv",
    "offline_optimum",
    "plan_summary",
    "run_market",
    "sample_realisation",
    "start_round",
    "step",
    "unit_prices",
    "validate",
]

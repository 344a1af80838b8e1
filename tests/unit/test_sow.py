"""Tests of the SoW mechanism (docs/algorithms.md#statements-of-work): incentives, LIFO, prices.

Oracles: exact enumeration of earlier jobs' outcomes with a literal round-by-round LIFO
(``sow_helpers``), hand-derived prices from the formula, and the HiGHS offline optimum against a
brute force over schedules.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import sow_helpers as H  # noqa: N812 (short alias for the oracle module, used everywhere)
from hypothesis import given, settings
from hypothesis import strategies as st

from walras.allocator import InvalidProblem, sow
from walras.allocator.sow import (
    Distribution,
    Ledger,
    MechanismParams,
    Phase,
    StatementOfWork,
    ValueFunction,
)

# ---------------------------------------------------------------------------------------------
# Small instances for brute force: one type, C = 2, K = 2, D = 3, V = 6, every SoW born at 0.

K, D, V = 2, 3, 6.0


def small_instance(
    seed: int, revealed: bool, samples: int | None = None, cancel: bool = True
) -> tuple[MechanismParams, tuple[StatementOfWork, ...]]:
    params = MechanismParams(K, D, V, seed=seed, samples=samples, cancel_unprofitable=cancel)
    # Odd seeds: every arrival at offset 0, so several durations share one plan key unless the
    # duration is revealed.
    spec = sow.WorkloadSpec(
        sows=5, births=1, max_delay=1 - seed % 2, max_slack=2, duration_revealed=revealed
    )
    return params, sow.generate(spec, params, seed)


def admit_all(params: MechanismParams, cap: int, sows: tuple[StatementOfWork, ...]) -> Ledger:
    ledger = Ledger.empty(params, {"gpu": cap})
    for s in sows:
        ledger, _ = sow.admit(ledger, s)
    return ledger


def misreports(true: StatementOfWork) -> list[StatementOfWork]:
    """Brute-force report space: concurrency × value function × distribution."""
    values = [true.value]
    values += [
        ValueFunction.deadline(dl, v) for dl in (2, 3, 4, 6) for v in (1.0, 2.0, 2.5, 3.0, 4.0, 6.0)
    ]
    values += [ValueFunction.linear(((0, 6.0), (dl, 1.0))) for dl in (2, 4)]
    dist = true.distribution
    dists = [dist]
    dists += [Distribution.fixed(a, d) for a in (0, 1) for d in range(1, D + 1)]
    n = len(dist.probabilities)
    dists.append(
        Distribution(dist.arrivals, dist.durations, (1.0 / n,) * (n - 1) + (1 - (n - 1) / n,))
    )
    dists.append(
        Distribution(
            dist.arrivals, tuple(min(D, d + 1) for d in dist.durations), dist.probabilities
        )
    )
    dists.append(
        Distribution(
            dist.arrivals, tuple(max(1, d - 1) for d in dist.durations), dist.probabilities
        )
    )
    out = []
    for k, v, f in itertools.product(range(1, K + 1), values, dists):
        out.append(
            StatementOfWork.single(true.name, 0, k, v, f, duration_revealed=true.duration_revealed)
        )
    return out


def measure_gains(
    seed: int, revealed: bool, cap: int, samples: int | None = None
) -> dict[str, float]:
    """Brute force over misreports of the last-born SoW; returns the largest gains found.

    Theorem 3.2 (the SoW paper; proof in its Appendix B, restated): let ``Û`` be the estimated and
    ``U`` the true expected utility of a plan under the TRUE SoW, and ``Δ = max_π |Û(π) − U(π)|``.
    The truthful plan ``π*`` maximises ``Û``; a misreport yields some plan ``π'``; so
    ``U(π') ≤ Û(π') + Δ ≤ Û(π*) + Δ ≤ U(π*) + 2Δ``. Hence gain ≤ 2Δ: the paper's ε is 2Δ
    (with ``|q̂ − q| ≤ ε' + θ`` w.p. ≥ 1 − δ, Δ ≤ (ε' + θ) · Σ f |v − P|).

    The step "a larger reported k only hurts" holds only for outcomes with ``v ≥ P``. For
    outcomes that complete too late to be worth their price, a larger k can turn a paid late
    completion into a free eviction. So for ``k' > k`` the valid bound is
    ``2Δ + N(π')`` with ``N`` the expected late charge (sow_helpers.late_charge); the paper's 2Δ
    is asserted wherever ``N(π') = 0``.

    This measures the paper's mechanism as written (``cancel_unprofitable=False``), which is what
    ``sow_helpers``' oracles model; with the rule (the default) every report is within 2Δ:
    ``test_sow_sim.test_no_signal_truthful_with_unprofitable_cancellation``.
    """
    params, sows = small_instance(seed, revealed, samples, cancel=False)
    earlier, true = sows[:-1], sows[-1]
    base = admit_all(params, cap, earlier)
    oracle = H.ExactOracle([j.admission for j in base.jobs], cap)
    _, (truthful,) = sow.admit(base, true)
    true_inst = truthful.instance
    k_true = true.concurrency
    u_truth = H.true_utility(oracle, true_inst, truthful, k_true)
    delta = H.estimation_slack(oracle, true_inst, k_true, truthful.menus[0], truthful.failure[0])
    worst = {"gain": -math.inf, "excess_paper": -math.inf, "excess_corrected": -math.inf}
    for report in misreports(true):
        _, (adm,) = sow.admit(base, report)
        gain = H.true_utility(oracle, true_inst, adm, k_true) - u_truth
        late = H.late_charge(oracle, true_inst, adm, k_true) if report.concurrency > k_true else 0.0
        worst["gain"] = max(worst["gain"], gain)
        worst["excess_corrected"] = max(worst["excess_corrected"], gain - 2 * delta - late)
        if late == 0.0:
            worst["excess_paper"] = max(worst["excess_paper"], gain - 2 * delta)
    worst["allowance"] = 2 * delta
    worst["u_truth"] = u_truth
    last = truthful.failure[0].first_start + len(truthful.failure[0].q) - 1
    worst["headroom"] = (
        H.optimal_utility(oracle, true_inst, k_true, truthful.menus[0], last) - u_truth
    )
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("revealed", [True, False], ids=["duration-revealed", "no-signal"])
@pytest.mark.parametrize(
    ("seed", "samples"),
    [(0, None), (1, None), (3, 30), (5, 30), (17, 10)],
    ids=["s0-hoeffding", "s1-hoeffding", "s3-M30", "s5-M30", "s17-M10"],
)
def test_no_misreport_gains_more_than_the_allowance(
    seed: int, samples: int | None, revealed: bool
) -> None:
    # 4 earlier SoWs and the reporter on C = 4; M = 30 or 10 samples make q̂ noisy (large Δ), the
    # Hoeffding count (ε' = δ = 0.05) makes it accurate. "headroom" = best plan under exact q
    # minus the truthful plan: a gain can only come from there (or from the k "insurance").
    # Seed 17 with M = 10 is the one instance among seeds 0-39 where noise leaves headroom.
    r = measure_gains(seed, revealed, cap=4, samples=samples)
    msg = (
        f"seed {seed} M={samples or 'hoeffding'} revealed={revealed}: largest gain "
        f"{r['gain']:.6f}, allowance 2Δ = {r['allowance']:.6f}, excess over 2Δ (where N = 0) "
        f"{r['excess_paper']:.6f}, excess over 2Δ + N {r['excess_corrected']:.6f}, "
        f"truthful utility {r['u_truth']:.4f}, headroom {r['headroom']:.6f}"
    )
    print(msg)
    assert r["excess_paper"] <= 1e-9, msg
    assert r["excess_corrected"] <= 1e-9, msg


def test_concurrency_inflation_buys_insurance_without_duration_signal() -> None:
    """A counterexample to the paper's "higher k only hurts" step (Appendix B), measured.

    C = 2. Earlier job A: k = 1, arrives at 1, runs 1 round. Reporter: k = 1, arrives at 0, runs
    1 or 2 rounds (½ each, not revealed), worth 1 only if done by 1. Truthful: starts at 0 and
    pays ``p(0)`` or ``p(0) + p(1)``; the 2-round outcome is worth 0 but still paid for.
    Reporting k = 2: round 1 would hold 1 + 2 > 2, so LIFO evicts the reporter exactly in the
    late outcome, for free. All q are 0 or 1 with no randomness in A, so q̂ = q and Δ = 0:
    the paper's bound says gain ≤ 0, the gain is ``p(1)/2 + p(0)/2 − p(0)/2 = p(1)/2`` ... minus
    the extra ``p(0)/2`` for the second GPU in the short outcome, plus the saved ``p(0)/2``.
    """
    params = MechanismParams(2, 2, 1.0, cancel_unprofitable=False)  # the paper as written
    a = StatementOfWork.single("a", 0, 1, ValueFunction.deadline(2, 1.0), Distribution.fixed(1, 1))
    dist = Distribution.of([(0, 1, 0.5), (0, 2, 0.5)])
    truthful = StatementOfWork.single("b", 0, 1, ValueFunction.deadline(1, 1.0), dist)
    inflated = StatementOfWork.single("b", 0, 2, ValueFunction.deadline(1, 1.0), dist)
    base, _ = sow.admit(Ledger.empty(params, {"gpu": 2}), a)
    oracle = H.ExactOracle([base.jobs[0].admission], 2)
    _, (adm_t,) = sow.admit(base, truthful)
    _, (adm_i,) = sow.admit(base, inflated)
    inst = adm_t.instance
    assert adm_t.plan.lookup((0,)).start == 0 and adm_i.plan.lookup((0,)).start == 0  # type: ignore[union-attr]  # both keys are planned
    menu = adm_t.menus[0]
    # Expected utilities by hand: truthful ½(1 − p0) − ½(p0 + p1); inflated ½(1 − 2 p0) + ½·0.
    p0, p1 = menu.unit(0), menu.unit(1)
    u_t = H.true_utility(oracle, inst, adm_t, 1)
    u_i = H.true_utility(oracle, inst, adm_i, 1)
    assert u_t == pytest.approx(0.5 * (1 - p0) - 0.5 * (p0 + p1))
    assert u_i == pytest.approx(0.5 * (1 - 2 * p0))
    delta = H.estimation_slack(oracle, inst, 1, menu, adm_t.failure[0])
    assert delta == pytest.approx(0.0, abs=1e-12)
    gain = u_i - u_t
    print(f"concurrency-inflation gain {gain:.4f} (= p(1)/2 = {p1 / 2:.4f}) vs paper allowance 0")
    assert gain == pytest.approx(p1 / 2) and gain > 0
    assert gain <= 2 * delta + H.late_charge(oracle, inst, adm_i, 1) + 1e-12


def test_unprofitable_cancellation_removes_the_insurance() -> None:
    """The same market with the rule on: the late outcome is cancelled for free anyway.

    Before round 1 the truthful job's earliest completion is 2, worth 0 < ``p0 + p1``: it is
    cancelled (charge 0), whatever k it reported. So by hand: truthful ``½(1 − p0) + ½·0``,
    inflated ``½(1 − 2 p0) + ½·0``, and inflating costs ``p0/2``. The rounds show it too.
    """
    params = MechanismParams(2, 2, 1.0)
    a = StatementOfWork.single("a", 0, 1, ValueFunction.deadline(2, 1.0), Distribution.fixed(1, 1))
    dist = Distribution.of([(0, 1, 0.5), (0, 2, 0.5)])
    base, _ = sow.admit(Ledger.empty(params, {"gpu": 2}), a)
    utilities = {}
    for k in (1, 2):
        report = StatementOfWork.single("b", 0, k, ValueFunction.deadline(1, 1.0), dist)
        ledger, (adm,) = sow.admit(base, report)
        assert adm.plan.lookup((0,)).start == 0  # type: ignore[union-attr]  # key is planned
        p0, p1 = adm.menus[0].unit(0), adm.menus[0].unit(1)
        # The late outcome cannot pay (completion 2 is past the deadline): the rule must fire.
        assert adm.instance.value(2) == 0.0 < p0 + p1
        # The late outcome (2 rounds) played: b starts at 0, is cancelled before round 1.
        ledger, r0 = sow.step(ledger, {"b#0": None})
        assert r0.started == ("b#0",)
        ledger, r1 = sow.step(ledger, {"a#0": None}, {"a#0"})
        assert r1.unprofitable == ("b#0",) and r1.evicted == () and r1.cancelled == ()
        late = ledger.job("b#0")
        assert (late.phase, late.charge, late.finish, late.unprofitable) == (
            Phase.CANCELLED,
            0.0,
            1,
            True,
        )
        # A ran alone in round 1 (b's GPUs were freed): A completes and pays.
        assert r1.completed == ("a#0",)
        utilities[k] = 0.5 * (1.0 - k * p0)
    gain = utilities[2] - utilities[1]
    print(f"with the rule, inflating k gains {gain:.4f} (was p(1)/2 > 0 without it)")
    assert gain < 0


# ---------------------------------------------------------------------------------------------
# Failure estimates against exact enumeration


@pytest.mark.parametrize("seed", [3, 4])
def test_failure_estimates_within_hoeffding_accuracy(seed: int) -> None:
    # θ = 0 (no zeroing) and δ = 1e-4: by Lemma F.1 every |q̂ − q| ≤ ε' = 0.05 w.p. ≥ 1 − 1e-4.
    params = MechanismParams(K, D, V, seed=seed, theta=0.0, sample_confidence=1e-4)
    spec = sow.WorkloadSpec(sows=4, births=1, max_delay=1, max_slack=2)
    sows = sow.generate(spec, params, seed)
    base = admit_all(params, 2, sows[:-1])
    oracle = H.ExactOracle([j.admission for j in base.jobs], 2)
    _, (adm,) = sow.admit(base, sows[-1])
    table = adm.failure[0]
    assert table.samples == sow.hoeffding_samples(0.05, 1e-4, len(table.q) * len(table.durations))
    worst = 0.0
    nonzero = 0
    for i, j in itertools.product(range(len(table.q)), range(len(table.durations))):
        s, d = table.first_start + i, table.durations[j]
        q = oracle.failure(table.concurrency, 0, s, d)
        worst = max(worst, abs(q - table.q[i][j]))
        nonzero += q > 0
    assert nonzero > 0, "instance has no failure risk: the test would be vacuous"
    assert worst <= 0.05, f"max |q̂ − q| = {worst}"


def test_estimates_below_theta_are_zeroed() -> None:
    params = MechanismParams(K, D, V, seed=5, theta=0.0)
    zeroing = MechanismParams(K, D, V, seed=5, theta=0.3)
    spec = sow.WorkloadSpec(sows=4, births=1, max_delay=1, max_slack=2)
    sows = sow.generate(spec, params, 5)
    _, (raw,) = sow.admit(admit_all(params, 2, sows[:-1]), sows[-1])
    _, (cut,) = sow.admit(admit_all(zeroing, 2, sows[:-1]), sows[-1])
    q_raw, q_cut = raw.failure[0].array, cut.failure[0].array
    assert np.array_equal(q_cut, np.where(q_raw < 0.3, 0.0, q_raw))


# ---------------------------------------------------------------------------------------------
# Menus and independence from later-born jobs


def test_menus_monotone_in_committed_load() -> None:
    params = MechanismParams(K, D, V, seed=0)
    spec = sow.WorkloadSpec(sows=8, births=1, max_delay=2, max_slack=3)
    ledger = Ledger.empty(params, {"gpu": 4})
    previous_usage = np.zeros(0)
    previous_prices: tuple[float, ...] = ()
    for s in sow.generate(spec, params, 11):
        ledger, (adm,) = sow.admit(ledger, s)
        usage = ledger.usage[0]
        assert np.all(usage[: previous_usage.size] >= previous_usage - 1e-12)
        prices = adm.menus[0].prices
        for t in range(max(len(prices), len(previous_prices))):
            old = previous_prices[t] if t < len(previous_prices) else params.unit_price_min
            assert adm.menus[0].unit(t) >= old - 1e-12
        previous_usage, previous_prices = usage, prices
        menu = adm.menus[0]
        for st_, k, d in itertools.product(range(6), range(1, K + 1), range(1, D + 1)):
            assert menu.bundle(st_, k, d) <= menu.bundle(st_, k + 1, d) + 1e-12
            assert menu.bundle(st_, k, d) <= menu.bundle(st_, k, d + 1) + 1e-12
        q = adm.failure[0].array
        assert np.all(np.diff(q, axis=1) >= 0), "q̂ must not decrease with duration"
    assert previous_usage.max() > 0


def test_failure_estimates_monotone_in_concurrency() -> None:
    params = MechanismParams(K, D, V, seed=2)
    spec = sow.WorkloadSpec(sows=4, births=1, max_delay=1, max_slack=2)
    sows = sow.generate(spec, params, 2)
    base = admit_all(params, 2, sows[:-1])
    last = sows[-1]
    tables = []
    for k in (1, 2):
        report = StatementOfWork.single(last.name, 0, k, last.value, last.distribution)
        _, (adm,) = sow.admit(base, report)
        tables.append(adm.failure[0].array)
    assert np.all(tables[1] >= tables[0])


@given(st.floats(0, 50), st.floats(0, 50), st.integers(1, 40))
@settings(max_examples=60, deadline=None)
def test_unit_price_formula(y1: float, y2: float, cap: int) -> None:
    params = MechanismParams(K, D, V)
    lo, hi = sorted((y1, y2))
    p = sow.unit_prices(np.array([lo, hi]), cap, params)
    assert p[0] <= p[1]
    c_prime = 0.9 * cap
    assert p[0] == pytest.approx(1 / (2 * K * D) * (4 * K * D * V) ** (lo / c_prime), rel=1e-12)


def test_prices_exceed_any_value_near_planning_capacity() -> None:
    # p_min·μ = 2V, and with C' ≥ K log₂ μ the price at y = C' − K is ≥ 2V·μ^{−K/C'} ≥ V.
    params = MechanismParams(K, D, V)
    assert params.unit_price_min * params.price_base == pytest.approx(2 * V)
    cap = math.ceil(K * math.log2(params.price_base) / 0.9)
    assert params.supply_sufficient(cap) and not params.supply_sufficient(cap - 1)
    (p,) = sow.unit_prices(np.array([0.9 * cap - K]), cap, params)
    assert p >= V


def test_earlier_jobs_unaffected_by_later_submissions() -> None:
    params = MechanismParams(K, D, V, seed=7)
    spec = sow.WorkloadSpec(sows=12, births=6, max_delay=2, max_slack=2)
    sows = tuple(sorted(sow.generate(spec, params, 7), key=lambda s: (s.birth, s.name)))
    early, late = sows[:6], sows[6:]
    rng = np.random.default_rng(7)
    evictions_seen = 0
    for _ in range(15):
        real = dict(sow.sample_realisation(sows, rng))
        alone = sow.run_market(params, {"gpu": 3}, early, real)
        both = sow.run_market(params, {"gpu": 3}, sows, real)
        evictions_seen += both.evicted + both.cancelled - alone.evicted - alone.cancelled
        for j in alone.ledger.jobs:
            k = both.ledger.job(j.job)
            assert k.admission == j.admission  # menu, q̂ and plan fixed at birth
            assert (k.phase, k.start, k.finish, k.charge, k.value) == (
                j.phase,
                j.start,
                j.finish,
                j.charge,
                j.value,
            )
    assert late and evictions_seen > 0, "later jobs never failed: the test would be vacuous"


def test_true_failure_of_earlier_job_ignores_later_jobs() -> None:
    # Literal LIFO over every joint outcome: jobs 0, 1's fates never depend on jobs 2, 3.
    params = MechanismParams(K, D, V, seed=5)
    spec = sow.WorkloadSpec(sows=4, births=1, max_delay=1, max_slack=2)
    ledger = admit_all(params, 2, sow.generate(spec, params, 5))
    outs = [H.outcomes(j.admission) for j in ledger.jobs]
    changed = 0
    for combo in itertools.product(*outs):
        jobs = [j for _, j in combo]
        with_later = H.literal_lifo(jobs, 2)
        without = H.literal_lifo(jobs[:2], 2)
        assert with_later[:2] == without
        changed += with_later[2:] != H.literal_lifo(jobs[2:], 2)
    assert changed > 0, "later jobs were never affected by earlier ones: vacuous instance"


# ---------------------------------------------------------------------------------------------
# Rounds: LIFO order, charges


def _lifo_ledger() -> Ledger:
    # Flat prices (μ = 1) so plans start on arrival; θ = 0.6 ignores the 50 % risks below.
    params = MechanismParams(1, 2, 6.0, mu=1.0, p_min=0.01, theta=0.6)
    big = ValueFunction.linear(((0, 6.0), (8, 1.0)))
    a = StatementOfWork.single("a", 0, 1, big, Distribution.fixed(0, 2))
    b = StatementOfWork.single("b", 0, 1, big, Distribution.of([(1, 1, 0.5), (3, 1, 0.5)]))
    c = StatementOfWork.single("c", 0, 1, big, Distribution.fixed(0, 2))
    d = StatementOfWork.single("d", 0, 1, big, Distribution.fixed(4, 1))
    ledger = Ledger.empty(params, {"gpu": 2})
    for s in (a, b, c, d):
        ledger, _ = sow.admit(ledger, s)
    return ledger


def test_lifo_eviction_by_birth_not_by_start() -> None:
    ledger = _lifo_ledger()
    starts = {j.job: j.admission.plan.entries[0].start for j in ledger.jobs}
    assert starts == {"a#0": 0, "b#0": 1, "c#0": 0, "d#0": 4}
    ledger, r0 = sow.step(ledger, {"a#0": None, "c#0": None})
    assert r0.started == ("a#0", "c#0") and not r0.evicted
    # Round 1: a, c running and b starting: 3 > 2. LIFO by birth: d (pending) is cancelled
    # first, then c (running, born after b) is evicted, although b is the newcomer.
    ledger, r1 = sow.step(ledger, {"b#0": None}, finished={"a#0", "b#0", "c#0"})
    assert r1.cancelled == ("d#0",)
    assert r1.evicted == ("c#0",)
    assert r1.started == ("b#0",)
    assert r1.completed == ("a#0", "b#0")
    phases = {j.job: j.phase for j in ledger.jobs}
    assert phases == {
        "a#0": Phase.COMPLETED,
        "b#0": Phase.COMPLETED,
        "c#0": Phase.EVICTED,
        "d#0": Phase.CANCELLED,
    }
    # Charges only on completion: k·d·p_min with flat prices; evicted/cancelled pay 0.
    charges = {j.job: j.charge for j in ledger.jobs}
    assert charges == pytest.approx({"a#0": 2 * 0.01, "b#0": 0.01, "c#0": 0.0, "d#0": 0.0})
    assert ledger.job("a#0").value == pytest.approx(6.0 - 5.0 * 2 / 8)


def test_charge_is_posted_bundle_price() -> None:
    # Second job pays k Σ p_min μ^{y(τ)/C'} with y = the first job's expected usage (by hand).
    params = MechanismParams(2, 2, 4.0)
    v = ValueFunction.deadline(4, 4.0)
    first = StatementOfWork.single("x", 0, 2, v, Distribution.of([(0, 2, 0.5), (1, 2, 0.5)]))
    second = StatementOfWork.single("y", 0, 1, v, Distribution.fixed(1, 1))
    ledger = Ledger.empty(params, {"gpu": 4})
    ledger, (ax,) = sow.admit(ledger, first)
    ledger, (ay,) = sow.admit(ledger, second)
    y = np.zeros(8)
    for key_a in (0, 1):
        s = ax.plan.lookup((key_a,)).start  # type: ignore[union-attr]  # both keys exist
        assert s is not None
        y[s : s + 2] += 0.5 * 2
    s_y = ay.plan.lookup((1,)).start  # type: ignore[union-attr]
    assert s_y is not None
    expected = (1 / 8) * (64.0 ** (y[s_y] / 3.6))
    out = sow.run_market(params, {"gpu": 4}, (first, second), {"x#0": (0, 2), "y#0": (1, 1)})
    ledger = out.ledger
    assert ledger.job("x#0").phase is Phase.COMPLETED
    assert ledger.job("y#0").phase is Phase.COMPLETED
    assert ledger.job("y#0").charge == pytest.approx(expected)


@pytest.mark.parametrize(
    ("sow_", "field"),
    [
        (
            StatementOfWork.single(
                "inc", 0, 1, ValueFunction.linear([(1, 1.0), (2, 2.0)]), Distribution.fixed(0, 1)
            ),
            "value_function",
        ),
        (
            StatementOfWork.single(
                "p", 0, 1, ValueFunction.deadline(3, 1), Distribution.of([(0, 1, 0.5), (0, 2, 0.4)])
            ),
            "distribution.probabilities",
        ),
        (
            StatementOfWork.single(
                "neg", 0, 1, ValueFunction.deadline(3, 1), Distribution.of([(0, -1, 1.0)])
            ),
            "distribution.durations",
        ),
        (
            StatementOfWork.single(
                "k0", 0, 0, ValueFunction.deadline(3, 1), Distribution.fixed(0, 1)
            ),
            "concurrency",
        ),
        (
            StatementOfWork.single(
                "bigk", 0, 3, ValueFunction.deadline(3, 1), Distribution.fixed(0, 1)
            ),
            "concurrency",
        ),
        (
            StatementOfWork.single(
                "late", 1, 1, ValueFunction.deadline(3, 1), Distribution.fixed(0, 1)
            ),
            "birth",
        ),
        (
            StatementOfWork.single(
                "gpu", 0, 1, ValueFunction.deadline(3, 1), Distribution.fixed(0, 1), gpu_type="tpu"
            ),
            "demands.gpu_type",
        ),
        (
            StatementOfWork.single(
                "v", 0, 1, ValueFunction.deadline(3, 99), Distribution.fixed(0, 1)
            ),
            "value_function",
        ),
        (
            StatementOfWork.single(
                "d", 0, 1, ValueFunction.deadline(3, 1), Distribution.fixed(0, 9)
            ),
            "distribution.durations",
        ),
    ],
    ids=[
        "increasing-value",
        "probabilities",
        "negative-duration",
        "k<1",
        "k>K",
        "birth",
        "type",
        "v>V",
        "d>D",
    ],
)
def test_invalid_sow_rejected_with_field(sow_: StatementOfWork, field: str) -> None:
    ledger = Ledger.empty(MechanismParams(2, 3, 6.0), {"gpu": 2})
    with pytest.raises(InvalidProblem) as err:
        sow.admit(ledger, sow_)
    assert err.value.field == field
    assert f": {field}:" in str(err.value)


# ---------------------------------------------------------------------------------------------
# Offline optimum against brute force; multi-type and recurrence


def test_offline_optimum_matches_brute_force() -> None:
    params = MechanismParams(2, 2, 5.0)
    spec = sow.WorkloadSpec(sows=5, births=2, max_delay=1, max_slack=1)
    sows = sow.generate(spec, params, 3)
    real = sow.sample_realisation(sows, np.random.default_rng(3))
    cap = 2
    opt = sow.offline_optimum({"gpu": cap}, sows, real)
    insts = [i for s in sows for i in sow.instances(s)]
    choices = []
    for inst in insts:
        a, d = real[inst.job]
        opts: list[int | None] = [None, *range(a, a + 6)]
        choices.append(opts)
    best = 0.0
    for combo in itertools.product(*choices):
        load = np.zeros(20)
        val = 0.0
        for inst, s in zip(insts, combo, strict=True):
            if s is None:
                continue
            a, d = real[inst.job]
            load[s : s + d] += inst.demands[0].concurrency
            val += inst.value(s + d - inst.release)
        if load.max() <= cap:
            best = max(best, val)
    assert opt.welfare == pytest.approx(best)


def test_throughput_shortens_runs_and_types_are_chosen() -> None:
    params = MechanismParams(2, 4, 4.0)
    fast = sow.TypeDemand("a100", 1, throughput=2.0)
    slow = sow.TypeDemand("k80", 1, throughput=1.0)
    job = StatementOfWork(
        "t", 0, (slow, fast), ValueFunction.deadline(2, 4.0), Distribution.fixed(0, 4)
    )
    ledger, (adm,) = sow.admit(Ledger.empty(params, {"a100": 1, "k80": 4}), job)
    # Only the fast type (4 / 2 = 2 rounds) meets the deadline of 2.
    assert adm.plan.entries[0].gpu_type == "a100" and adm.plan.entries[0].start == 0
    ledger, rep = sow.step(ledger, {"t#0": None})
    ledger, rep = sow.step(ledger, {}, {"t#0"})
    assert rep.completed == ("t#0",) and ledger.job("t#0").value == 4.0


def test_recurrence_expands_into_instances_born_together() -> None:
    params = MechanismParams(1, 2, 4.0)
    job = StatementOfWork.single(
        "r",
        0,
        1,
        ValueFunction.deadline(3, 4.0),
        Distribution.of([(0, 1, 0.5), (1, 2, 0.5)]),
        recurrence=sow.Recurrence(3, 5),
    )
    ledger, adms = sow.admit(Ledger.empty(params, {"gpu": 1}), job)
    assert [a.instance.release for a in adms] == [0, 5, 10]
    assert [a.sequence for a in adms] == [0, 1, 2]
    assert all(a.instance.birth == 0 for a in adms)
    assert ledger.usage[0].sum() == pytest.approx(3 * (0.5 * 1 + 0.5 * 2))


# ---------------------------------------------------------------------------------------------
# The ledger's rounds and its history-conditioned estimates against the literal LIFO oracle


def _play(ledger: Ledger, real: sow.Realisation, until: int) -> Ledger:
    for tau in range(ledger.time, until):
        arrivals: dict[str, int | None] = {
            j.job: None for j in ledger.jobs if j.phase is Phase.PENDING and real[j.job][0] == tau
        }
        ledger, _ = sow.start_round(ledger, arrivals)
        finished = [
            j.job
            for j in ledger.jobs
            if j.phase is Phase.RUNNING and (j.start or 0) + real[j.job][1] - 1 == tau
        ]
        ledger, _ = sow.end_round(ledger, finished)
    return ledger


def _paying_rounds(adm: sow.Admission, start: int, duration: int) -> int:
    """Rounds a job runs before unprofitable cancellation: the first δ whose completion
    ``v(s + δ − r) < P(s, k, δ)`` ends it after δ − 1 rounds (literal loop over δ, one type)."""
    inst, k = adm.instance, adm.instance.demands[0].concurrency
    for delta in range(1, duration + 1):
        if inst.value(start + delta - inst.release) < adm.menus[0].bundle(start, k, delta):
            return delta - 1
    return duration


def _sim_jobs(ledger: Ledger, real: sow.Realisation) -> list[H.SimJob]:
    """The ledger's jobs for the literal oracle; with the rule on, a run that would be
    cancelled as unprofitable lasts only its paying rounds (it holds GPUs until then)."""
    out = []
    for j in ledger.jobs:
        inst = j.admission.instance
        a, d = real[j.job]
        entry = j.admission.plan.lookup(inst.key(a, d))
        start = entry.start if entry is not None else None
        if start is not None and ledger.params.cancel_unprofitable:
            d = _paying_rounds(j.admission, start, d)
        out.append(H.SimJob(inst.demands[0].concurrency, a, start, d, inst.birth))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rounds_match_literal_lifo(seed: int) -> None:
    # Flat cheap prices and θ = 0.95 ignore most risks, so plans collide and LIFO has work to do.
    params = MechanismParams(K, D, V, seed=seed, theta=0.95, mu=1.0, p_min=0.01)
    spec = sow.WorkloadSpec(sows=8, births=1, max_delay=1, max_slack=2)
    sows = sow.generate(spec, params, seed)
    rng = np.random.default_rng(seed)
    failures = unprofitable = 0
    for _ in range(20):
        real = sow.sample_realisation(sows, rng)
        out = sow.run_market(params, {"gpu": 2}, sows, real)
        sim = _sim_jobs(out.ledger, real)
        fates = H.literal_lifo(sim, 2)
        # A shortened run that the literal replay completes is an unprofitable cancellation.
        fates = [
            "unprofitable" if f == "completed" and j.duration < real[job.job][1] else f
            for f, j, job in zip(fates, sim, out.ledger.jobs, strict=True)
        ]
        mine = {
            Phase.COMPLETED: "completed",
            Phase.EVICTED: "failed",
            Phase.CANCELLED: "failed",
            Phase.NOT_RUN: "not_run",
        }
        got = [("unprofitable" if j.unprofitable else mine[j.phase]) for j in out.ledger.jobs]
        assert got == fates
        failures += fates.count("failed")
        unprofitable += fates.count("unprofitable")
    assert failures > 0, "no eviction happened: the comparison would be vacuous"
    assert unprofitable > 0, "the cancellation rule never fired: that half would be vacuous"


@pytest.mark.parametrize("seed", [0, 1])
def test_failure_estimates_condition_on_history(seed: int) -> None:
    """A SoW born at t = 2 after two rounds: q̂ vs the exact Bayesian posterior.

    Exact: keep the joint outcomes of the earlier jobs whose literal replay shows the same
    events (arrivals, completions, failures) before t as the realised run, weight them by their
    prior probabilities (Bayes), and play the new job (born at t) by literal LIFO.
    Hoeffding with θ = 0, δ = 1e-4: every |q̂ − q| ≤ ε' = 0.05 w.p. ≥ 1 − 1e-4.
    """
    params = MechanismParams(K, D, V, seed=seed, theta=0.0, sample_confidence=1e-4)
    spec = sow.WorkloadSpec(sows=4, births=1, max_delay=2, max_slack=3)
    earlier = sow.generate(spec, params, seed + 40)
    ledger = admit_all(params, 2, earlier)
    real = sow.sample_realisation(earlier, np.random.default_rng(seed))
    t = 2
    ledger = _play(ledger, real, t)
    new = StatementOfWork.single(
        "new", t, 1, ValueFunction.deadline(6, 6.0), Distribution.of([(0, 1, 0.5), (1, 2, 0.5)])
    )
    _, (adm,) = sow.admit(ledger, new)
    _, seen = H.literal_trace(_sim_jobs(ledger, real), 2, 0, until=t)
    outs = [H.outcomes(j.admission) for j in ledger.jobs]
    table = adm.failure[0]
    worst = shift = 0.0
    for i, d in itertools.product(range(len(table.q)), table.durations):
        s = table.first_start + i
        me = H.SimJob(1, t, s, d, t)
        post = prior = post_w = prior_w = 0.0
        for combo in itertools.product(*outs):
            w = math.prod(f for f, _ in combo)
            jobs = [j for _, j in combo] + [me]
            fates, events = H.literal_trace(jobs, 2, 0, until=t)
            failed = fates[-1] == "failed"
            prior, prior_w = prior + w * failed, prior_w + w
            if [e for e in events if e[1] < len(outs)] == seen:
                post, post_w = post + w * failed, post_w + w
        q = post / post_w
        worst = max(worst, abs(q - table.at(s, d)))
        shift = max(shift, abs(q - prior / prior_w))
    print(f"seed {seed}: max |q̂ − q| = {worst:.4f}, max |posterior − prior| = {shift:.4f}")
    assert shift > 0.05, "history did not change any failure probability: vacuous instance"
    assert worst <= 0.05


def test_lifo_per_type_spares_running_jobs_on_other_types() -> None:
    # Two types of one GPU each. Birth order x (a), z (a), y (b), w (b, arrives late).
    # Round 1: type a holds x and z starts: 2 > 1. LIFO: w (not started) is cancelled, y runs
    # on b, which is not overloaded, so it stays although born after z; z is cancelled.
    params = MechanismParams(1, 2, 6.0, mu=1.0, p_min=0.01, theta=0.6)
    v = ValueFunction.linear(((0, 6.0), (8, 1.0)))

    def one(name: str, gpu: str, dist: Distribution) -> StatementOfWork:
        return StatementOfWork.single(name, 0, 1, v, dist, gpu_type=gpu)

    ledger = Ledger.empty(params, {"a": 1, "b": 1})
    for s in (
        one("x", "a", Distribution.of([(0, 2, 0.5), (3, 2, 0.5)])),
        one("z", "a", Distribution.fixed(1, 1)),
        one("y", "b", Distribution.fixed(0, 2)),
        one("w", "b", Distribution.fixed(5, 1)),
    ):
        ledger, _ = sow.admit(ledger, s)
    assert [j.admission.plan.entries[0].start for j in ledger.jobs] == [0, 1, 0, 5]
    ledger, r0 = sow.step(ledger, {"x#0": None, "y#0": None})
    assert r0.started == ("x#0", "y#0")
    ledger, r1 = sow.step(ledger, {"z#0": None}, {"x#0", "y#0"})
    assert r1.cancelled == ("z#0", "w#0") and r1.evicted == ()
    assert r1.completed == ("x#0", "y#0")


@given(st.integers(0, 10_000), st.integers(1, 4), st.booleans())
@settings(max_examples=15, deadline=None)
def test_realised_load_never_exceeds_capacity(seed: int, cap: int, revealed: bool) -> None:
    # Whatever the plans and realisations, LIFO keeps every round within capacity, and only
    # completed jobs pay.
    params = MechanismParams(K, D, V, seed=seed, theta=0.5, samples=64)
    spec = sow.WorkloadSpec(sows=6, births=4, max_delay=2, duration_revealed=revealed)
    sows = sow.generate(spec, params, seed)
    real = sow.sample_realisation(sows, np.random.default_rng(seed))
    out = sow.run_market(params, {"gpu": cap}, sows, real)
    load = np.zeros(64)
    for j in out.ledger.jobs:
        # Every job holds its GPUs from start to finish (an empty range if it never started).
        if j.start is not None and j.finish is not None:
            load[j.start : j.finish] += j.admission.instance.demands[0].concurrency
        if j.phase is not Phase.COMPLETED:
            assert j.charge == 0.0
    assert load.max() <= cap


def test_status_reports_plan_failure_probability() -> None:
    # C = 1. A arrives at 1 (½) or 5 (½) for one round. B (duration revealed) arrives at 0 and
    # runs 1 or 2 rounds (½ each), worth 6 if done by 2: both outcomes must start at 0. The
    # 2-round one fails exactly when A arrives at 1 (q = ½), the 1-round one never meets A
    # (q = 0). So failureProbability = (½·½ + ½·0)/1 = ¼, within ½·ε' of q̂ (Hoeffding, θ = 0).
    params = MechanismParams(1, 2, 6.0, theta=0.0, sample_confidence=1e-4)
    a = StatementOfWork.single(
        "a", 0, 1, ValueFunction.deadline(6, 6.0), Distribution.of([(1, 1, 0.5), (5, 1, 0.5)])
    )
    b = StatementOfWork.single(
        "b",
        0,
        1,
        ValueFunction.deadline(2, 6.0),
        Distribution.of([(0, 2, 0.5), (0, 1, 0.5)]),
        duration_revealed=True,
    )
    ledger = Ledger.empty(params, {"gpu": 1})
    ledger, _ = sow.admit(ledger, a)
    ledger, (adm,) = sow.admit(ledger, b)
    status = sow.admission_status(adm)
    assert [(p["duration"], p["start"]) for p in status["plan"]] == [(1, 0), (2, 0)]
    assert status["runProbability"] == pytest.approx(1.0)
    assert abs(status["failureProbability"] - 0.25) <= 0.5 * 0.05
    assert json.loads(json.dumps(status)) == status
    assert sow.job_status(ledger.job("b#0"))["phase"] == "pending"

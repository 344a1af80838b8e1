"""SoW mechanism acceptance and the simulator module (its CLI: test_sow_simulate_files).

Oracles: exact failure probabilities by enumerating the earlier jobs' outcomes under a literal
LIFO replay (``sow_helpers``), prices recomputed by hand from the formula, the LIFO rule stated on
the realised arrivals, and the hindsight optimum (a feasible-schedule upper bound on welfare).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
import sow_helpers as H  # noqa: N812 (short alias for the oracle module, as in test_sow)

from walras.allocator import sow
from walras.allocator.sow import (
    Distribution,
    Ledger,
    MechanismParams,
    Phase,
    StatementOfWork,
    ValueFunction,
)
from walras.sim import sow as sim_sow

# ---------------------------------------------------------------------------------------------
# Truthfulness by brute force over misreports (Theorem 3.2)
#
# Reporter = the last-born SoW; earlier SoWs fixed. For each report r the mechanism posts the
# same menu and the same Monte Carlo samples (seeded independently of the report) and picks the
# plan π_r; the reporter's TRUE expected utility U(π_r) is computed exactly (sow_helpers). Gain =
# U(π_r) − U(π_truth). Bounds, with Û the utility under the posted q̂ and U under the exact q,
# Δ = max_π |Û(π) − U(π)| over plans of the TRUE SoW at the true k:
#
# (a) k_r = k: π_truth maximises Û, so U(π_r) ≤ Û(π_r) + Δ ≤ Û(π_truth) + Δ ≤ U(π_truth) + 2Δ.
# (b) k_r < k: the job cannot do its work (value 0), so U(π_r) ≤ 0 ≤ Û(π_truth) ≤ U(π_truth) + Δ.
# (c) k_r > k, duration revealed: each plan key is ONE support point (a, d), whose term is
#     f(1 − q(k_r, s, d))(v − P(s, k_r, d)). q and P grow with k, so the term is ≤ the same start's
#     term at k when v ≥ P(k_r), and ≤ 0 (= "don't run") otherwise. Hence U(π_r) ≤ max_π U(π)
#     at k, i.e. gain ≤ headroom := max_π U(π) − U(π_truth) ≤ 2Δ by (a)'s argument.
# (d) k_r > k, no duration signal: a key groups several durations; a late one (v < P) has a
#     negative term that a larger k can turn into a free eviction ("insurance"). (c) fails; what
#     remains is gain ≤ 2Δ + N(π_r), N = expected charge beyond value at k (sow_helpers).
#
# So the paper's ε = 2Δ holds in the duration-revealed setting for every report, and without the
# signal for every report with k_r ≤ k; the rest of the no-signal setting is measured.
#
# With unprofitable cancellation (cancel_unprofitable, the default; walras.allocator.sow
# .cancellation) a running job is cancelled for free once no completion can pay under its
# report. Every term becomes f(1 − q)(v − P)⁺ for the true rule and ≤ that for any other rule, so
# with Δ⁺ = max_π |Û⁺(π) − U⁺(π)| (the same plans, (v − P)⁺ in place of v − P) (a)-(c) hold for
# every report in both settings: gain ≤ 2Δ⁺ (proof in the cancellation module's docstring). The
# oracles below model it literally: each earlier outcome's run lasts its paying rounds, and the
# reporter's outcome is worth 0 when its reported rule cancels it.

K, D, V = 2, 3, 6.0


def paying_rounds(inst: sow.Instance, menu: sow.PriceMenu, k: int, start: int, d: int) -> int:
    """Rounds run before the rule cancels: the first δ with ``v(s + δ − r) < P(s, k, δ)`` ends
    the run after δ − 1 rounds; ``d`` if every completion up to ``d`` pays (literal loop)."""
    for delta in range(1, d + 1):
        if inst.value(start + delta - inst.release) < menu.bundle(start, k, delta):
            return delta - 1
    return d


class CancellingOracle(H.ExactOracle):
    """Exact ``q`` against earlier jobs whose runs stop where the rule cancels them."""

    def __init__(self, earlier: list[sow.Admission], capacity: int) -> None:
        super().__init__(earlier, capacity)
        self.earlier = [
            [
                (f, j if j.start is None else replace(j, duration=self._paying(adm, j)))
                for f, j in H.outcomes(adm)
            ]
            for adm in earlier
        ]

    @staticmethod
    def _paying(adm: sow.Admission, j: H.SimJob) -> int:
        assert j.start is not None
        return paying_rounds(adm.instance, adm.menus[0], j.k, j.start, j.duration)


def utility_with_rule(
    oracle: H.ExactOracle, true_inst: sow.Instance, adm: sow.Admission, k_true: int
) -> float:
    """The reporter's expected TRUE utility when the rule runs on its REPORT (value, k, menu):
    a cancelled outcome (fewer paying rounds than its duration) is worth 0; otherwise as
    ``sow_helpers.true_utility``."""
    k_r = adm.instance.demands[0].concurrency

    def cancelled(start: int, d: int) -> bool:
        return paying_rounds(adm.instance, adm.menus[0], k_r, start, d) < d

    return H.true_utility(oracle, true_inst, adm, k_true, cancelled)


def plan_bounds_with_rule(
    oracle: H.ExactOracle,
    true_inst: sow.Instance,
    k: int,
    menu: sow.PriceMenu,
    table: sow.FailureTable,
) -> tuple[float, float]:
    """``(Δ⁺, max_π U⁺(π))`` over plans for the true SoW at the true ``k``.

    ``U⁺``/``Û⁺`` = ``Σ f (1 − q)(v − P)⁺`` with exact/posted ``q``; both separate over plan
    keys, so the max over plans is the sum over keys of the max over {don't run (0)} ∪ starts.
    """
    last = table.first_start + len(table.q) - 1
    groups: dict[tuple[int, ...], list[tuple[int, int, float]]] = {}
    for a, d, f in zip(
        true_inst.arrivals, true_inst.durations, true_inst.probabilities, strict=True
    ):
        groups.setdefault(true_inst.key(a, d), []).append((a, d, f))
    delta = best = 0.0
    for key, pts in groups.items():
        err_key = best_key = 0.0
        for s in range(key[0], last + 1):
            exact = est = 0.0
            for a, d, f in pts:
                plus = max(0.0, true_inst.value(s + d - true_inst.release) - menu.bundle(s, k, d))
                exact += f * (1.0 - oracle.failure(k, a, s, d)) * plus
                est += f * (1.0 - table.at(s, d)) * plus
            err_key, best_key = max(err_key, abs(est - exact)), max(best_key, exact)
        delta, best = delta + err_key, best + best_key
    return delta, best


def report_space(true: StatementOfWork, params: MechanismParams) -> list[StatementOfWork]:
    """Concurrency × value function × distribution misreports within the market's bounds."""
    k_max, d_max, v_max = params.max_concurrency, params.max_duration, params.max_value
    values = [true.value]
    values += [
        ValueFunction.deadline(dl, v)
        for dl in range(1, d_max + 3)
        for v in (v_max / 4, v_max / 2, v_max)
    ]
    values += [ValueFunction.linear(((0, v_max), (dl, params.min_value))) for dl in (1, d_max + 1)]
    dist = true.distribution
    offsets = sorted(set(dist.arrivals) | {0, 1})
    dists = [dist]
    dists += [Distribution.fixed(a, d) for a in offsets for d in range(1, d_max + 1)]
    n = len(dist.probabilities)
    dists.append(Distribution(dist.arrivals, dist.durations, (1.0 / n,) * (n - 1) + (1 / n,)))
    for shift in (-1, 1):
        durs = tuple(min(d_max, max(1, d + shift)) for d in dist.durations)
        dists.append(Distribution(dist.arrivals, durs, dist.probabilities))
    return [
        StatementOfWork.single(
            true.name, true.birth, k, v, f, duration_revealed=true.duration_revealed
        )
        for k, v, f in itertools.product(range(1, k_max + 1), values, dists)
    ]


@dataclass
class Gains:
    """Largest gains of one instance's brute force, and the bounds' ingredients."""

    reports: int
    gain: float  # over every report
    gain_k_not_inflated: float  # over reports with k_r ≤ k
    excess_over_2delta: float  # largest gain − 2Δ over every report
    excess_over_corrected: float  # largest gain − (2Δ + N) over every report
    allowance: float  # 2Δ
    headroom: float
    u_truth: float


def brute_force(
    params: MechanismParams, cap: int, earlier: tuple[StatementOfWork, ...], true: StatementOfWork
) -> Gains:
    """Largest gains; with ``params.cancel_unprofitable`` through the rule-aware oracles (Δ⁺,
    ``N = 0``), without it through ``sow_helpers`` (the paper's mechanism as written)."""
    ledger = Ledger.empty(params, {"gpu": cap})
    for s in earlier:
        ledger, _ = sow.admit(ledger, s)
    rule = params.cancel_unprofitable
    adms = [j.admission for j in ledger.jobs]
    oracle = CancellingOracle(adms, cap) if rule else H.ExactOracle(adms, cap)
    _, (truthful,) = sow.admit(ledger, true)
    inst, k = truthful.instance, true.concurrency
    menu, table = truthful.menus[0], truthful.failure[0]
    utility = utility_with_rule if rule else H.true_utility
    u_truth = utility(oracle, inst, truthful, k)
    if rule:
        delta, best = plan_bounds_with_rule(oracle, inst, k, menu, table)
    else:
        delta = H.estimation_slack(oracle, inst, k, menu, table)
        best = H.optimal_utility(oracle, inst, k, menu, table.first_start + len(table.q) - 1)
    headroom = best - u_truth
    g = Gains(0, -math.inf, -math.inf, -math.inf, -math.inf, 2 * delta, headroom, u_truth)
    for report in report_space(true, params):
        _, (adm,) = sow.admit(ledger, report)
        gain = utility(oracle, inst, adm, k) - u_truth
        insured = report.concurrency > k and not rule
        late = H.late_charge(oracle, inst, adm, k) if insured else 0.0
        g.reports += 1
        g.gain = max(g.gain, gain)
        if report.concurrency <= k:
            g.gain_k_not_inflated = max(g.gain_k_not_inflated, gain)
        g.excess_over_2delta = max(g.excess_over_2delta, gain - 2 * delta)
        g.excess_over_corrected = max(g.excess_over_corrected, gain - 2 * delta - late)
    return g


def generated(
    seed: int, revealed: bool, n_sows: int, samples: int | None, cancel: bool = True
) -> tuple[MechanismParams, tuple[StatementOfWork, ...]]:
    params = MechanismParams(K, D, V, seed=seed, samples=samples, cancel_unprofitable=cancel)
    # Odd seeds: every arrival at offset 0, so several durations share one plan key unless the
    # duration is revealed.
    spec = sow.WorkloadSpec(
        sows=n_sows, births=1, max_delay=1 - seed % 2, max_slack=2, duration_revealed=revealed
    )
    return params, sow.generate(spec, params, seed)


# (seed, SoWs, Monte Carlo samples, C). Few samples make q̂ noisy (large Δ), which is where a
# misreport can gain at all (headroom > 0); None = the Hoeffding count (accurate q̂). No-signal
# seed 19 on C = 3 is a generated instance where inflating k buys insurance (found by a scan of
# 200 generated instances per setting; the revealed setting had no instance above its bound).
REVEALED_CASES = [(15, 6, 8, 2), (9, 5, 20, 2), (5, 5, None, 2), (1, 5, None, 2)]
NO_SIGNAL_CASES = [(21, 4, 8, 2), (5, 5, None, 2), (6, 5, 20, 2), (19, 6, 8, 3)]


def _line(setting: str, rows: list[Gains]) -> str:
    return (
        f"{setting}: {sum(r.reports for r in rows)} reports on {len(rows)} instances; largest "
        f"gain {max(r.gain for r in rows):.6f}; per instance (gain, 2Δ, headroom, U_truth): "
        + ", ".join(
            f"({r.gain:.4f}, {r.allowance:.4f}, {r.headroom:.4f}, {r.u_truth:.4f})" for r in rows
        )
    )


def test_truthful_within_paper_bound_when_duration_is_revealed() -> None:
    """The setting where Theorem 3.2's ε = 2Δ holds for every report (cases (a)-(c) above)."""
    rows = []
    for seed, n_sows, samples, cap in REVEALED_CASES:
        params, sows = generated(seed, True, n_sows, samples)
        rows.append(brute_force(params, cap, sows[:-1], sows[-1]))
    print(_line("duration revealed (paper bound 2Δ)", rows))
    for r in rows:
        assert r.gain <= r.headroom + 1e-9, r  # (c), and (a)/(b) through the headroom
        assert r.headroom <= r.allowance + 1e-9, r
        assert r.excess_over_2delta <= 1e-9, r
    assert any(r.gain > 1e-4 for r in rows), "no report gained anything: nothing was measured"
    assert any(r.u_truth > 0 for r in rows)


def _insurance_instance(cancel: bool) -> Gains:
    # The smallest instance with insurance (test_sow's counterexample, here brute-forced): C = 2,
    # earlier job k = 1 at round 1; reporter k = 1 at round 0 for 1 or 2 rounds, worth 1 by 1.
    params = MechanismParams(2, 2, 1.0, cancel_unprofitable=cancel)
    a = StatementOfWork.single("a", 0, 1, ValueFunction.deadline(2, 1.0), Distribution.fixed(1, 1))
    b = StatementOfWork.single(
        "b", 0, 1, ValueFunction.deadline(1, 1.0), Distribution.of([(0, 1, 0.5), (0, 2, 0.5)])
    )
    return brute_force(params, 2, (a,), b)


def test_no_signal_gap_without_the_rule() -> None:
    """The paper's mechanism as written (``cancel_unprofitable=False``), no duration signal: 2Δ
    for k_r ≤ k; k inflation gains up to 2Δ + N (d), and beyond 2Δ on two instances."""
    rows = []
    for seed, n_sows, samples, cap in NO_SIGNAL_CASES:
        params, sows = generated(seed, False, n_sows, samples, cancel=False)
        rows.append(brute_force(params, cap, sows[:-1], sows[-1]))
    insurance = _insurance_instance(cancel=False)
    rows.append(insurance)
    print(_line("no duration signal, rule off (2Δ for k_r ≤ k; 2Δ + N for k_r > k)", rows))
    print(
        f"no duration signal: largest excess over the paper's 2Δ "
        f"{max(r.excess_over_2delta for r in rows):.6f} (insurance instance "
        f"{insurance.excess_over_2delta:.6f})"
    )
    for r in rows:
        assert r.gain_k_not_inflated <= r.allowance + 1e-9, r  # (a), (b)
        assert r.excess_over_corrected <= 1e-9, r  # (d)
    # The gap is real: on the insurance instance q̂ = q (Δ = 0) and inflating k still gains; it
    # also shows up on a generated instance (seed 19).
    assert insurance.allowance == pytest.approx(0.0, abs=1e-12)
    assert insurance.excess_over_2delta > 0
    assert rows[-2].excess_over_2delta > 0


def test_no_signal_truthful_with_unprofitable_cancellation() -> None:
    """The same instances with the rule (the default): no report gains more than 2Δ⁺, including
    seed 19 and the insurance instance, where the rule-off mechanism exceeds 2Δ."""
    rows = []
    for seed, n_sows, samples, cap in NO_SIGNAL_CASES:
        params, sows = generated(seed, False, n_sows, samples)
        rows.append(brute_force(params, cap, sows[:-1], sows[-1]))
    insurance = _insurance_instance(cancel=True)
    rows.append(insurance)
    print(_line("no duration signal, rule on (bound 2Δ⁺ for every report)", rows))
    print(
        f"no duration signal, rule on: largest excess over 2Δ⁺ "
        f"{max(r.excess_over_2delta for r in rows):.6f} (seed 19 {rows[-2].excess_over_2delta:.6f}"
        f", insurance instance {insurance.excess_over_2delta:.6f})"
    )
    for r in rows:
        assert r.excess_over_2delta <= 1e-9, r  # (a)-(c) with (v − P)⁺
        assert r.gain <= r.headroom + 1e-9, r
        assert r.headroom <= r.allowance + 1e-9, r
    # On the insurance instance q̂ = q (Δ⁺ = 0): truthful is exactly optimal now.
    assert insurance.allowance == pytest.approx(0.0, abs=1e-12)
    assert insurance.gain <= 1e-12
    assert any(r.u_truth > 0 for r in rows)


def test_rule_never_fires_under_truthful_reports_with_duration_revealed() -> None:
    # With the signal every plan key is one outcome, planned only if v − P > 0, so nothing is
    # ever cancelled as unprofitable, and the market plays exactly as without the rule. Cheap
    # flat prices and θ = 0.95 (as in test_sow's LIFO test) make plans collide, so LIFO runs.
    # The same workloads without the signal are the control: there the rule does fire.
    removed = fired_without_signal = 0
    for seed in range(6):
        on = MechanismParams(K, D, V, seed=seed, theta=0.95, mu=1.0, p_min=0.5)
        off = replace(on, cancel_unprofitable=False)
        for revealed in (True, False):
            spec = sow.WorkloadSpec(
                sows=8, births=3, max_delay=1, max_slack=1, duration_revealed=revealed
            )
            sows = sow.generate(spec, on, seed)
            rng = np.random.default_rng(seed)
            for _ in range(4):
                real = sow.sample_realisation(sows, rng)
                a = sow.run_market(on, {"gpu": 2}, sows, real)
                if not revealed:
                    fired_without_signal += a.unprofitable
                    continue
                b = sow.run_market(off, {"gpu": 2}, sows, real)
                assert a.unprofitable == 0
                assert [r.unprofitable for r in a.reports] == [()] * len(a.reports)
                assert [(j.phase, j.start, j.finish, j.charge) for j in a.ledger.jobs] == [
                    (j.phase, j.start, j.finish, j.charge) for j in b.ledger.jobs
                ]
                assert (a.welfare, a.revenue) == (b.welfare, b.revenue)
                removed += a.evicted + a.cancelled
    assert removed > 0, "LIFO never removed a job: the markets did not collide"
    assert fired_without_signal > 0, "the control never fired the rule: the check is vacuous"


# ---------------------------------------------------------------------------------------------
# Menus monotone in committed load; earlier-born jobs unaffected by later submissions


def _spread_workload(
    seed: int, colliding: bool = False
) -> tuple[MechanismParams, tuple[StatementOfWork, ...]]:
    # colliding: flat cheap prices and θ = 0.95 ignore most risks, so plans collide and LIFO
    # evicts (the paper's prices keep evictions rare).
    extra = {"theta": 0.95, "mu": 1.0, "p_min": 0.01} if colliding else {}
    params = MechanismParams(2, 4, 8.0, seed=seed, **extra)
    spec = sow.WorkloadSpec(sows=14, births=8, max_delay=2, gpu_types=("a100", "v100"))
    return params, tuple(sorted(sow.generate(spec, params, seed), key=lambda s: (s.birth, s.name)))


def _play_round(ledger: Ledger, real: sow.Realisation) -> Ledger:
    t = ledger.time
    arrivals: dict[str, int | None] = {}
    for j in ledger.jobs:
        a, d = real[j.job]
        if j.phase is Phase.PENDING and a == t:
            arrivals[j.job] = d if j.admission.instance.duration_revealed else None
    ledger, _ = sow.start_round(ledger, arrivals)
    finished = []
    for j in ledger.jobs:
        if j.phase is Phase.RUNNING and j.start is not None and j.gpu_type is not None:
            dem = next(x for x in j.admission.instance.demands if x.gpu_type == j.gpu_type)
            if j.start + dem.duration_on(real[j.job][1]) - 1 == t:
                finished.append(j.job)
    ledger, _ = sow.end_round(ledger, finished)
    return ledger


@pytest.mark.parametrize("seed", [0, 3])
def test_posted_prices_are_a_monotone_function_of_committed_load(seed: int) -> None:
    # Births spread over 8 rounds on two types: at every admission the posted unit price of each
    # type and round is p_min·μ^{y/C'} with y read from the ledger BEFORE the admission (by
    # hand), y never decreases, and so a later-born job never sees a lower price for a round.
    params, sows = _spread_workload(seed)
    caps = {"a100": 5, "v100": 3}
    real = sow.sample_realisation(sows, np.random.default_rng(seed))
    ledger = Ledger.empty(params, caps)
    seen: dict[tuple[str, int], float] = {}
    pairs: list[tuple[float, float, int]] = []
    c_prime = {g: 0.9 * c for g, c in caps.items()}
    for s in sows:
        while ledger.time < s.birth:
            ledger = _play_round(ledger, real)
        before = ledger
        ledger, admissions = sow.admit(ledger, s)
        for y_new, y_old in zip(ledger.usage, before.usage, strict=True):
            assert np.all(y_new[: y_old.size] >= y_old - 1e-12)
        for menu in admissions[0].menus:
            y = before.usage[before.type_index(menu.gpu_type)]
            for tau in range(s.birth, s.birth + 12):
                load = float(y[tau]) if tau < y.size else 0.0
                p = params.unit_price_min * params.price_base ** (load / c_prime[menu.gpu_type])
                assert menu.unit(tau) == pytest.approx(p, rel=1e-12)
                key = (menu.gpu_type, tau)
                assert menu.unit(tau) >= seen.get(key, 0.0) - 1e-12
                seen[key] = menu.unit(tau)
                pairs.append((load, menu.unit(tau), caps[menu.gpu_type]))
    # Monotone in load: for one capacity, more committed load never means a lower price.
    for cap in set(caps.values()):
        pts = sorted((y, p) for y, p, c in pairs if c == cap)
        assert all(b[1] >= a[1] - 1e-12 for a, b in itertools.pairwise(pts))
        assert pts[-1][0] > 0, "no committed load was ever seen: vacuous"


def test_earlier_jobs_keep_their_posted_view_when_later_jobs_arrive() -> None:
    # Submit the first SoWs, record what each job was posted (menu, q̂, plan), play rounds,
    # submit more (born later), compare. Then replay without the later SoWs: the earlier jobs'
    # realised fates are the same (LIFO: later-born jobs never displace earlier ones).
    params, sows = _spread_workload(1, colliding=True)
    caps = {"a100": 3, "v100": 2}
    early = tuple(s for s in sows if s.birth < 4)
    late = tuple(s for s in sows if s.birth >= 4)
    assert early and late
    rng = np.random.default_rng(1)
    later_failed = 0
    for _ in range(6):
        real = sow.sample_realisation(sows, rng)
        ledger = Ledger.empty(params, caps)
        recorded: dict[str, dict[str, object]] = {}
        for s in sows:
            while ledger.time < s.birth:
                ledger = _play_round(ledger, real)
            ledger, admissions = sow.admit(ledger, s)
            if s in early:
                for adm in admissions:
                    recorded[adm.job] = json.loads(json.dumps(sow.admission_status(adm)))
        for _ in range(40):
            ledger = _play_round(ledger, real)
        alone = sow.run_market(params, caps, early, real)
        for job_id, status in recorded.items():
            assert sow.admission_status(ledger.admission(job_id)) == status
            mine, solo = ledger.job(job_id), alone.ledger.job(job_id)
            assert (mine.phase, mine.start, mine.finish, mine.charge) == (
                solo.phase,
                solo.start,
                solo.finish,
                solo.charge,
            )
        later_failed += sum(
            ledger.job(i.job).phase in (Phase.EVICTED, Phase.CANCELLED)
            for s in late
            for i in sow.instances(s)
        )
    assert later_failed > 0, "no later job was ever evicted: the comparison would be vacuous"


# ---------------------------------------------------------------------------------------------
# The simulator module: accounting and welfare against the offline optimum


def test_sim_accounting_and_offline_bound() -> None:
    counts = {"a100": 3, "v100": 2}
    workload = sim_sow.generated_workload(10, counts, seed=4)
    result = sim_sow.run(workload, realisations=4, seed=4, offline="on")
    s = result.summary()
    rows = result.job_rows()
    assert len(rows) == 4 * workload.n_jobs
    # Rates and totals recounted from the per-job rows (the ledgers' final phases).
    for phase, key in (
        ("completed", "completed_rate"),
        ("evicted", "evicted_rate"),
        ("cancelled", "cancelled_rate"),
        ("not_run", "not_run_rate"),
        ("unprofitable", "unprofitable_rate"),
    ):
        assert s[key] == pytest.approx(sum(r["phase"] == phase for r in rows) / len(rows))
    assert s["welfare_mean"] == pytest.approx(sum(r["value"] for r in rows) / 4)
    assert s["revenue_mean"] == pytest.approx(sum(r["charge"] for r in rows) / 4)
    # Completed jobs form a feasible schedule in hindsight, so no run beats the offline optimum.
    for run in result.runs:
        assert run.offline is not None
        assert run.outcome.welfare <= run.offline + 1e-7
    assert 0 < s["ratio_min"] <= s["ratio_median"] <= 1 + 1e-9
    assert s["ratio_x_log"] == pytest.approx(s["ratio_of_means"] * math.log(2 * 4 * 8.0))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("revealed", "cancel"),
    [(True, True), (False, True), (False, False)],
    ids=["duration-revealed", "no-signal", "no-signal-rule-off"],
)
def test_truthfulness_sweep_over_generated_instances(revealed: bool, cancel: bool) -> None:
    # 12 generated instances per setting (6 SoWs on C = 3, M = 8 samples: noisy q̂); the same
    # bounds as above: (a)-(c) with the signal or the rule, (a), (b), (d) without either.
    rows = []
    for seed in range(12, 24):
        params, sows = generated(seed, revealed, 6, 8, cancel)
        rows.append(brute_force(params, 3, sows[:-1], sows[-1]))
    print(_line(f"sweep, revealed={revealed}, rule={'on' if cancel else 'off'}", rows))
    print(f"largest excess over 2Δ: {max(r.excess_over_2delta for r in rows):.6f}")
    for r in rows:
        assert r.gain_k_not_inflated <= r.allowance + 1e-9, r
        assert r.excess_over_corrected <= 1e-9, r
        if revealed or cancel:
            assert r.gain <= r.headroom + 1e-9 and r.headroom <= r.allowance + 1e-9, r
    assert any(r.u_truth > 0 for r in rows)

"""walras.core.restarts: restart cost and steps lost per job, from hand-made pod facts.

Oracle: the definitions in the module docstring applied by hand to each scenario (creation time,
the readings and when they were seen); the numbers are worked out in the comments.
"""

from __future__ import annotations

from typing import Any

from tests.unit.one_gpu_helpers import ROUND
from tests.unit.one_gpu_helpers import apply_plan as _apply
from tests.unit.one_gpu_helpers import store_one_gpu_two_jobs as _store

from walras.core import cycle, model, policies, restarts

BASE = 1.8e9  # epoch seconds; the scenarios' times are relative to it (0 means "no time")


class Tracker(restarts.Tracker):
    """The tracker with the scenarios' relative times."""

    def observe(self, uid: str, pods: Any, now: float, **kw: Any) -> list[restarts.Sample]:
        return super().observe(uid, pods, BASE + now, **kw)


def pod(round_no: int, created: float, steps: str = "", replica: int = 0) -> model.PodInfo:
    return model.PodInfo(
        namespace="ns",
        name=f"j-r{round_no}-{replica}",
        uid=f"uid-{round_no}-{replica}",
        job="j",
        replica=replica,
        node="n0",
        planned_node="n0",
        group="v100",
        phase="Running",
        terminating=False,
        round=round_no,
        requests={},
        steps_done=steps,
        created=BASE + created if created >= 0 else 0.0,
    )


def test_the_docstring_example() -> None:
    t = Tracker()
    assert t.observe("u", [pod(1, 0.0, "0")], 2.0) == []
    [first] = t.observe("u", [pod(1, 0.0, "1200")], 50.0)
    assert first == restarts.Sample(1, 50.0, None)  # first start: 0 → 50 s, nothing to lose
    # Preempted; the next start's pod is created at 100 s, restores 1,000, progresses at 112 s.
    assert t.observe("u", [pod(2, 100.0)], 101.0) == []
    assert t.observe("u", [pod(2, 100.0, "1000")], 104.0) == []
    [second] = t.observe("u", [pod(2, 100.0, "1050")], 112.0)
    assert second == restarts.Sample(2, 12.0, 200)  # 112 − 100; 1,200 − 1,000
    stats = t.stats("u")
    assert stats.costs == (50.0, 12.0) and stats.median == 31.0
    assert (stats.steps_lost, stats.fallbacks, stats.restores) == (200, 1, 1)


def test_a_restore_from_a_fresh_checkpoint_loses_nothing() -> None:
    t = Tracker()
    t.observe("u", [pod(1, 0.0, "500")], 30.0)
    t.observe("u", [pod(2, 40.0, "500")], 45.0)  # checkpointed on SIGTERM at 500
    [s] = t.observe("u", [pod(2, 40.0, "520")], 49.0)
    assert s == restarts.Sample(2, 9.0, 0)
    assert (t.stats("u").steps_lost, t.stats("u").fallbacks, t.stats("u").restores) == (0, 0, 1)


def test_a_workload_that_does_not_report_at_start() -> None:
    t = Tracker()
    t.observe("u", [pod(1, 0.0, "1000")], 30.0)
    # Its first reading (1,100) is above what the job had: the restart ended by then (30 s);
    # the restore itself is not seen, so no steps-lost sample.
    [s] = t.observe("u", [pod(2, 200.0, "1100")], 230.0)
    assert s == restarts.Sample(2, 30.0, None)
    assert t.stats("u").restores == 0


def test_one_sample_per_gang_whichever_replica_reports() -> None:
    t = Tracker()
    t.observe("u", [pod(1, 0.0, "10")], 5.0)
    gang = [pod(2, 20.0, "10", 0), pod(2, 21.0, "", 1)]
    assert t.observe("u", gang, 22.0) == []
    gang = [pod(2, 20.0, "15", 0), pod(2, 21.0, "15", 1)]
    # Created at the earliest of its pods (20 s), resumed when first seen above 10 (26 s).
    assert t.observe("u", gang, 26.0) == [restarts.Sample(2, 6.0, 0)]
    assert t.observe("u", [pod(2, 20.0, "30", 0), pod(2, 21.0, "30", 1)], 40.0) == []


def test_a_start_stopped_before_progress_gives_no_sample() -> None:
    t = Tracker()
    t.observe("u", [pod(1, 0.0, "10")], 5.0)
    t.observe("u", [pod(2, 20.0, "10")], 25.0)
    t.observe("u", [pod(3, 60.0, "10")], 65.0)  # round 2 ended before any progress
    [s] = t.observe("u", [pod(3, 60.0, "11")], 70.0)
    assert s == restarts.Sample(3, 10.0, 0)
    assert t.stats("u").costs == (5.0, 10.0)


def test_the_median_of_the_last_few_prices_the_job() -> None:
    t = Tracker()
    [job] = [j for j in _store().freeze(now=0.0).jobs if j.name == "a"]
    uid = job.uid
    assert t.cost(uid, 10.0) == 10.0 and t.costs([job]) == {}  # the flag before any sample
    start, steps = 0.0, 0
    for r, cost in enumerate([10.0, 50.0, 12.0, 11.0, 13.0, 100.0], start=1):
        t.observe(uid, [pod(r, start, str(steps))], start + 1)
        steps += 5
        t.observe(uid, [pod(r, start, str(steps))], start + cost)
        start += 200.0
    # The last KEEP = 5 costs are 50, 12, 11, 13, 100: median 13 (the 100 s outlier does not
    # move it).
    assert t.stats(uid).costs == (50.0, 12.0, 11.0, 13.0, 100.0)
    assert t.cost(uid, 10.0) == 13.0
    assert t.costs([job]) == {("ns", "a"): 13.0}


def test_bad_readings_and_missing_creation_times_are_skipped() -> None:
    t = Tracker()
    assert t.observe("u", [pod(1, 0.0, "lots")], 5.0) == []
    assert t.observe("u", [pod(2, -1.0, "5")], 6.0) == []  # no creation time: not measured
    assert t.stats("u") == restarts.RestartStats()


def test_a_restarted_operator_keeps_the_samples_and_the_peak() -> None:
    t = Tracker()
    t.observe("u", [pod(1, 0.0, "0")], 1.0)
    t.observe("u", [pod(1, 0.0, "80")], 8.0)
    fields = t.status_fields("u")
    assert fields == {
        "restartSeconds": [8.0],
        "stepsLost": 0,
        "fallbacks": 0,
        "restores": 0,
        "restartCostSeconds": 8.0,
    }
    again = Tracker()
    status = {"progress": {**fields, "stepsDone": 100}}
    # The next start restores 90 of the 100 steps the job had reported: 10 lost.
    again.observe("u", [pod(2, 50.0, "90")], 52.0, status=status)
    [s] = again.observe("u", [pod(2, 50.0, "95")], 56.0)
    assert s == restarts.Sample(2, 6.0, 10)
    assert again.stats("u").costs == (8.0, 6.0)


def _runners(restart_costs: dict[model.JobKey, float] | None) -> tuple[list[str], list[float]]:
    """Who runs in rounds 0 and 1 (two one-GPU jobs, one GPU) with a 10 s restart flag, and
    each running job's productive start."""
    store, state = _store(), cycle.CycleState()
    policy = policies.create("max-min-fairness")
    runners, productive = [], []
    for n in range(2):
        now = n * ROUND
        plan = cycle.plan(
            state,
            policy,
            store.freeze(now=now),
            now=now,
            round_no=n + 1,
            options=cycle.CycleOptions(restart_s=10.0),
            restart_costs=restart_costs,
        )
        [key] = [k for k, jr in plan.realisation.jobs.items() if jr.group]
        runners.append(key[1])
        productive.append(plan.histories[key].productive_from or 0.0)
        _apply(store, plan)
    return runners, productive


def test_each_job_is_priced_at_its_own_measured_cost() -> None:
    # Round 1 (t = 360 s, targets ½ each, 1 GPU: oversubscribed, so the credit is the hold):
    # the running job's balanced key is (½·360 − 360)/√½ + θ = −254.6 + θ, the waiting one's
    # (½·360 − 0)/√½ = 254.6; the running job stays iff θ ≥ 509 s. At the flag's 10 s,
    # θ = 72 · 10 = 720: it stays. Measured at 2 s, θ = 144: it is switched.
    flag, _ = _runners(None)
    assert flag[0] == flag[1]
    measured = {("ns", "a"): 2.0, ("ns", "b"): 2.0}
    runners, productive = _runners(measured)
    assert runners[0] != runners[1]
    # The accounting's reload time is the job's own cost too: productive 2 s after each start
    # (rounds start at 0 and 360 s).
    assert productive == [2.0, ROUND + 2.0]


def test_status_fields_satisfy_the_crd_schema() -> None:
    import pathlib

    import jsonschema
    import yaml

    crd = yaml.safe_load(
        (pathlib.Path(__file__).resolve().parents[2] / "crds" / "fungiblejob.yaml").read_text()
    )
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    progress_schema = schema["properties"]["status"]["properties"]["progress"]
    t = Tracker()
    t.observe("u", [pod(1, 0.0, "10")], 1.0)
    t.observe("u", [pod(2, 20.0, "5")], 22.0)
    t.observe("u", [pod(2, 20.0, "9")], 26.0)
    fields = t.status_fields("u")
    # First start: its first reading (10) is already progress, 1 s after creation; second:
    # restored 5 of 10 (5 lost), progress seen 6 s after creation.
    assert fields["stepsLost"] == 5 and fields["restartSeconds"] == [1.0, 6.0]
    jsonschema.Draft4Validator(progress_schema).validate({**fields, "stepsDone": 10.0})
    # Every field is declared (the API server prunes undeclared ones from a structural schema).
    assert set(fields) <= set(progress_schema["properties"])

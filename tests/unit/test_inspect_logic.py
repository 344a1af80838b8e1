"""The computations behind ``walras explain`` / ``walras status`` on plain API dicts.

The per-type alternative is checked against the closed-form best responses of one job facing
one price (independent of the allocator's code): log utility ``x = min(1, w / (p d))``, linear
``x = 1 if w a > p d else 0``, anything at price 0 takes the whole type.
"""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from walras.cli import inspect_cmd


def job(
    throughput: dict[str, float],
    *,
    replicas: int = 1,
    gpus: int | None = None,
    utility: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "metadata": {"namespace": "team-a", "name": "j"},
        "spec": {
            "replicas": replicas,
            "throughput": throughput,
            "utility": utility or {"kind": "log"},
            "template": {"spec": {"containers": [container]}},
        },
        "status": status or {},
    }


def pool(gpu_type: str, capacity: int, price: float, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"pool-{gpu_type}"},
        "spec": {"gpuType": gpu_type},
        "status": {"capacity": capacity, "price": price, "nodes": capacity // 4, **status},
    }


POOLS = [pool("v100", 8, 2.0), pool("k80", 8, 0.0), pool("p100", 8, 0.25)]


def by_type(
    alternatives: tuple[inspect_cmd.Alternative, ...],
) -> dict[str, inspect_cmd.Alternative]:
    return {a.gpu_type: a for a in alternatives}


def test_log_utility_alternatives_match_the_closed_form() -> None:
    # d = 2 replicas x 2 GPUs = 4; w = 1.5.
    j = job(
        {"v100": 10.0, "k80": 2.0, "p100": 6.0},
        replicas=2,
        gpus=2,
        utility={"kind": "log", "weight": 1.5},
    )
    alts = by_type(inspect_cmd.alternatives(j, inspect_cmd.pool_views(POOLS)))
    assert alts["v100"].fraction == pytest.approx(min(1.0, 1.5 / (2.0 * 4)))
    assert alts["p100"].fraction == pytest.approx(min(1.0, 1.5 / (0.25 * 4)))
    assert alts["k80"].fraction == pytest.approx(1.0)  # free
    assert alts["v100"].throughput == pytest.approx(10.0 * alts["v100"].fraction)


def test_linear_utility_takes_all_or_nothing() -> None:
    # w a vs p d: v100 10 > 2*1 -> all; p100 0.1 < 0.25*1 -> nothing.
    j = job({"v100": 10.0, "p100": 0.1}, utility={"kind": "linear"})
    alts = by_type(inspect_cmd.alternatives(j, inspect_cmd.pool_views(POOLS)))
    assert alts["v100"].fraction == pytest.approx(1.0)
    assert alts["p100"].fraction == pytest.approx(0.0)


def test_types_without_throughput_or_room_say_why() -> None:
    j = job({"v100": 5.0, "p100": 3.0}, replicas=3, gpus=4)  # needs 12 GPUs, pools have 8
    alts = by_type(inspect_cmd.alternatives(j, inspect_cmd.pool_views(POOLS)))
    assert alts["k80"].note == "no throughput on this type"
    assert "needs 12 GPUs" in alts["v100"].note
    assert alts["v100"].fraction == 0.0


def test_pending_reason_follows_the_lifecycle_order() -> None:
    conditions = [
        {"type": "Bound", "status": "False", "reason": "NoNodes", "message": "m2"},
        {"type": "Admitted", "status": "True", "reason": "Valid"},
        {"type": "Allocated", "status": "False", "reason": "InsufficientShare", "message": "m1"},
    ]
    assert inspect_cmd.pending_reason(job({}, status={"conditions": conditions})) == (
        "InsufficientShare",
        "m1",
    )
    assert inspect_cmd.pending_reason(job({}))[0] == "NotYetScheduled"
    # False on the informational conditions is not a reason to wait.
    informational = [
        {"type": "Admitted", "status": "True", "reason": "Valid"},
        {"type": "Allocated", "status": "True", "reason": "Allocated"},
        {"type": "Bound", "status": "True", "reason": "PodsBound"},
        {"type": "TimeSliced", "status": "False", "reason": "FullShare"},
        {"type": "Preempted", "status": "False", "reason": "Running"},
    ]
    assert inspect_cmd.pending_reason(job({}, status={"conditions": informational})) == ("", "")


def test_top_pending_reasons_counts_only_pending_jobs_in_stable_order() -> None:
    def pending(reason: str, phase: str = "Pending") -> dict[str, Any]:
        cond = {"type": "Allocated", "status": "False", "reason": reason}
        return job({}, status={"phase": phase, "conditions": [cond]})

    jobs = [pending("B"), pending("A"), pending("B"), pending("C", "Running"), pending("A")]
    assert inspect_cmd.top_pending_reasons(jobs) == [("A", 2), ("B", 2)]


def test_explain_collects_status_and_renders() -> None:
    status = {
        "phase": "Running",
        "allocation": [{"gpuType": "v100", "fraction": 0.75, "nodes": ["n1", "n2"]}],
        "expectedThroughput": 7.5,
        "price": 2.0,
        "fairShare": 0.75,
        "conditions": [{"type": "Allocated", "status": "True", "reason": "Allocated"}],
    }
    e = inspect_cmd.explain(job({"v100": 10.0}, status=status), POOLS)
    assert (e.job, e.tenant, e.phase, e.reason) == ("team-a/j", "team-a", "Running", "")
    assert e.allocation == (("v100", 0.75, "n1,n2"),)
    assert [p.gpu_type for p in e.pools] == ["k80", "p100", "v100"]
    console = Console(record=True, width=160)
    inspect_cmd.render_explanation(console, e)
    text = console.export_text()
    assert "Expected throughput 7.5/s at price 2" in text
    assert "n1,n2" in text and "On one GPU type alone" in text
    assert "Waiting" not in text  # running jobs do not wait
    assert "Conditions" in text


def test_explain_shows_the_measured_restart_cost_and_steps_lost() -> None:
    status = {
        "progress": {
            "stepsDone": 1050,
            "restartSeconds": [10.0, 14.0, 12.0],
            "restartCostSeconds": 12.0,
            "stepsLost": 200,
            "fallbacks": 1,
            "restores": 2,
        }
    }
    assert inspect_cmd.restart_summary(status) == (
        "cost 12.0 s (median of the last 3: 10.0, 14.0, 12.0 s); 200 steps lost in 1 of 2 restores"
    )
    assert inspect_cmd.restart_summary({"progress": {"stepsDone": 3}}) == ""
    job = {"metadata": {"namespace": "ns", "name": "j"}, "status": status}
    assert inspect_cmd.explain(job, []).restarts.startswith("cost 12.0 s")

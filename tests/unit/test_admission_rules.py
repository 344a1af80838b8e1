"""The admission rules (walras.core.admission) on hand-made snapshots, no API and no loop.

Oracles are the rules as the module states them: a pod is Walras's only when its controller uid
is its labelled job's; a failed pod is counted once by uid and, while the count is within
``spec.backoffLimit``, hidden and deleted; a disrupted pod is hidden and deleted without
counting; a held job sits out as a ``spec.template`` defect until its retry time, which doubles
from ``RETRY_FIRST_S`` per attempt up to ``RETRY_MAX_S``, and a new generation releases it.
"""

from __future__ import annotations

from typing import Any

from walras.core import admission, snapshot

NOW = 1000.0


def job(name: str = "train", uid: str = "u1", generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": generation},
        "spec": {
            "replicas": 1,
            "throughput": {"g": 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def pod(name: str, phase: str = "Running", uid: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": uid or f"p-{name}",
            "labels": {"walras.dev/job": "train", "walras.dev/replica": "0"},
            "annotations": {"walras.dev/round": "1", "walras.dev/node": "n0"},
        },
        "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase},
    }


def store_with(*pods: dict[str, Any]) -> snapshot.Store:
    store = snapshot.Store()
    store.upsert("job", job())
    for p in pods:
        store.upsert("pod", p)
    return store


def test_a_pod_whose_controller_is_not_its_job_is_foreign() -> None:
    store = store_with(pod("ours"), pod("theirs"))
    facts = admission.Facts(owner={("ns", "ours"): "u1", ("ns", "theirs"): "someone-else"})
    out = admission.Admission(lambda: NOW).apply(store.freeze(NOW), NOW, facts)
    assert [p.name for p in out.snapshot.pods] == ["ours"]
    assert [p.name for p in out.snapshot.foreign_pods] == ["theirs"]


def test_failed_pods_count_once_and_are_retried_up_to_the_limit() -> None:
    rules = admission.Admission(lambda: NOW)
    facts = admission.Facts(backoff={("ns", "train"): 1})
    first = pod("train-r1-0", "Failed", uid="a")
    facts.owner[("ns", "train-r1-0")] = "u1"
    out = rules.apply(store_with(first).freeze(NOW), NOW, facts)
    # One failure, limit 1: retried (hidden from the plan and deleted), one Event.
    assert out.snapshot.pods == ()
    assert [p.name for p in out.retry_deletes] == ["train-r1-0"]
    assert [e[1] for e in out.retry_events] == ["PodFailed"]
    assert rules.failures("u1") == 1
    # The same pod seen again (its deletion not yet delivered) is not counted again.
    again = rules.apply(store_with(first).freeze(NOW), NOW, facts)
    assert rules.failures("u1") == 1 and again.retry_events == []
    # A second failed pod (another uid) makes 2 > 1: no longer hidden, the job fails.
    second = pod("train-r2-0", "Failed", uid="b")
    facts.owner[("ns", "train-r2-0")] = "u1"
    past = rules.apply(store_with(second).freeze(NOW), NOW, facts)
    assert rules.failures("u1") == 2
    assert [p.name for p in past.snapshot.pods] == ["train-r2-0"]
    assert past.retry_deletes == []
    assert "backoffLimit reached" in past.retry_events[0][2]


def test_a_disrupted_pod_is_cleaned_up_without_counting() -> None:
    rules = admission.Admission(lambda: NOW)
    facts = admission.Facts(owner={("ns", "p"): "u1"}, disrupted={("ns", "p")})
    out = rules.apply(store_with(pod("p", "Failed")).freeze(NOW), NOW, facts)
    assert out.snapshot.pods == ()
    assert [p.name for p in out.retry_deletes] == ["p"]
    assert out.retry_events == [] and rules.failures("u1") == 0


def test_a_held_job_sits_out_with_a_doubling_back_off() -> None:
    clock = [NOW]
    rules = admission.Admission(lambda: clock[0])
    store = store_with()
    spec = store.freeze(NOW).jobs[0]
    delays = []
    for _ in range(8):
        delays.append(rules.hold(spec, "QuotaExceeded", "exceeded quota").retry_at - clock[0])
    # 5 s doubling per attempt, capped at 300 s.
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    held = rules.apply(store.freeze(NOW), NOW, admission.Facts())
    assert held.snapshot.jobs == ()
    [defect] = held.snapshot.defects
    assert (defect.field, defect.reason) == ("spec.template", "QuotaExceeded")
    # After the retry time the job is planned again.
    later = NOW + 300.0
    assert [
        j.name for j in rules.apply(store.freeze(later), later, admission.Facts()).snapshot.jobs
    ] == ["train"]


def test_a_new_generation_releases_a_held_job_at_once() -> None:
    rules = admission.Admission(lambda: NOW)
    store = store_with()
    rules.hold(store.freeze(NOW).jobs[0], "QuotaExceeded", "exceeded quota")
    store.upsert("job", job(generation=2))
    out = rules.apply(store.freeze(NOW), NOW, admission.Facts())
    assert [j.name for j in out.snapshot.jobs] == ["train"]
    assert rules.blocked == {}

"""Pods whose containers never start (walras.core.model.stuck_reason, walras.core.admission).

Oracles, by hand: the kubelet waiting reasons that do not resolve by themselves are
ErrImageNeverPull, ErrImagePull, ImagePullBackOff, InvalidImageName, CreateContainerConfigError
and CreateContainerError; ContainerCreating and PodInitializing are the normal way to running. A
job with such a pod has all its pods deleted and hidden from the plan and is held as a
``spec.template`` defect with reason PodsNotStarting, the message naming the container, the
kubelet's reason and its message; the hold lasts ``STUCK_FIRST_S`` and then the job is planned
again.
"""

from __future__ import annotations

from typing import Any

import pytest

from walras.core import admission, model, snapshot

NOW = 1000.0
NEVER_PULL = 'Container image "localhost/missing:1" is not present with pull policy of Never'


def job(generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "train", "uid": "u1", "generation": generation},
        "spec": {
            "replicas": 2,
            "throughput": {"g": 1.0},
            "template": {"spec": {"containers": [{"name": "train", "image": "i"}]}},
        },
    }


def pod(
    name: str, replica: int, waiting: str = "", message: str = "", init: bool = False
) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = []
    if waiting:
        state = {"waiting": {"reason": waiting, "message": message}}
        statuses = [{"name": "setup" if init else "train", "state": state}]
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"p-{name}",
            "labels": {"walras.dev/job": "train", "walras.dev/replica": str(replica)},
            "annotations": {"walras.dev/round": "1", "walras.dev/node": "n0"},
        },
        "spec": {"nodeName": "n0", "containers": [{"name": "train", "image": "i"}]},
        "status": {
            "phase": "Pending",
            ("initContainerStatuses" if init else "containerStatuses"): statuses,
        },
    }


@pytest.mark.parametrize(
    "reason",
    [
        "ErrImageNeverPull",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    ],
)
def test_reasons_that_do_not_resolve_name_the_container(reason: str) -> None:
    parsed = model.parse_pod(pod("a", 0, reason, "it says why"))
    assert parsed.stuck == f"container train: {reason}: it says why"


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", ""])
def test_reasons_on_the_way_to_running_are_not_stuck(reason: str) -> None:
    assert model.parse_pod(pod("a", 0, reason, "wait")).stuck == ""


def test_a_stuck_init_container_is_named() -> None:
    parsed = model.parse_pod(pod("a", 0, "ErrImagePull", "no such tag", init=True))
    assert parsed.stuck == "container setup: ErrImagePull: no such tag"


def test_a_status_without_container_statuses_is_not_stuck() -> None:
    obj = pod("a", 0)
    obj["status"] = {"phase": "Pending", "containerStatuses": "garbage"}
    assert model.parse_pod(obj).stuck == ""


def apply(rules: admission.Admission, store: snapshot.Store, now: float) -> admission.Admitted:
    facts = admission.Facts(owner={("ns", "a"): "u1", ("ns", "b"): "u1"})
    return rules.apply(store.freeze(now), now, facts)


def test_a_job_with_a_pod_that_never_starts_is_held_and_its_gang_deleted() -> None:
    store = snapshot.Store()
    store.upsert("job", job())
    store.upsert("pod", pod("a", 0, "ErrImageNeverPull", NEVER_PULL))
    store.upsert("pod", pod("b", 1, "ContainerCreating"))
    clock = [NOW]
    rules = admission.Admission(lambda: clock[0])
    out = apply(rules, store, NOW)
    # Both pods of the gang go (their GPUs are freed), not only the stuck one.
    assert sorted(p.name for p in out.retry_deletes) == ["a", "b"]
    assert out.snapshot.pods == ()
    assert out.snapshot.jobs == ()
    [defect] = out.snapshot.defects
    assert defect.reason == "PodsNotStarting"
    assert defect.field == "spec.template"
    assert defect.message == f"pod a never starts: container train: ErrImageNeverPull: {NEVER_PULL}"
    # Seen again before the deletes land: still hidden, the hold not extended.
    clock[0] = NOW + 1
    again = apply(rules, store, NOW + 1)
    assert sorted(p.name for p in again.retry_deletes) == ["a", "b"]
    assert rules.blocked["u1"].attempts == 1
    assert rules.blocked["u1"].retry_at == NOW + admission.STUCK_FIRST_S
    # Once the pods are gone, the job sits out until its retry time, then is planned again.
    store.delete("pod", "ns", "a")
    store.delete("pod", "ns", "b")
    late = NOW + admission.STUCK_FIRST_S - 1
    assert [d.reason for d in apply(rules, store, late).snapshot.defects] == ["PodsNotStarting"]
    retry = NOW + admission.STUCK_FIRST_S
    assert [j.name for j in apply(rules, store, retry).snapshot.jobs] == ["train"]


def test_a_new_generation_of_a_held_job_retries_at_once() -> None:
    store = snapshot.Store()
    store.upsert("job", job())
    store.upsert("pod", pod("a", 0, "InvalidImageName", "bad ref"))
    rules = admission.Admission(lambda: NOW)
    apply(rules, store, NOW)
    store.delete("pod", "ns", "a")
    store.upsert("job", job(generation=2))
    assert [j.name for j in apply(rules, store, NOW + 1).snapshot.jobs] == ["train"]

"""The operator's SoW helpers (``walras.operator.sow``) that need no API server: configuration
from the environment, status comparison, pod parsing and the pod manifest of a gang member.
The round itself is exercised on the control plane (tests/integration/test_operator_sow.py)."""

from __future__ import annotations

from typing import Any

from walras.core import crd
from walras.core import sow_shell as shell
from walras.operator import sow


def test_config_from_env_sets_the_papers_constants() -> None:
    config = sow.SowConfig.from_env(
        {
            "WALRAS_SOW_MAX_CONCURRENCY": "2",
            "WALRAS_SOW_MAX_DURATION": "4",
            "WALRAS_SOW_MAX_VALUE": "10",
        }
    )
    params = config.params()
    # p_min = v_min / (2KD) = 1/16 and μ = 4KDV / v_min = 320 (walras.allocator.sow.params).
    assert params.unit_price_min == 1 / 16
    assert params.price_base == 320
    assert sow.SowConfig.from_env({}) == sow.SowConfig()


def test_same_status_ignores_nulls_round_and_transition_times() -> None:
    ours = {
        "phase": "Admitted",
        "round": 7,
        "instances": [{"index": 0, "start": None, "phase": "pending"}],
        "conditions": [{"type": "Admitted", "status": "True"}],
    }
    stored = {
        "phase": "Admitted",
        "round": 5,
        "instances": [{"index": 0, "phase": "pending"}],
        "conditions": [
            {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ],
    }
    assert sow._same(ours, stored)
    # Only the round moved: the merge patch carries it alone (the admissions are not re-sent).
    assert sow._delta(ours, stored) == {"round"}
    moved = {**ours, "instances": [{"index": 0, "start": 3, "phase": "running"}]}
    assert not sow._same(moved, stored)
    assert sow._delta(moved, stored) == {"round", "instances"}


def pod(phase: str, finished: str | None, owner: str = "uid-s") -> dict[str, Any]:
    statuses = []
    if finished is not None:
        statuses = [{"name": "c", "state": {"terminated": {"finishedAt": finished}}}]
    return {
        "metadata": {
            "name": "s-1-r3-0",
            "namespace": "ns",
            "labels": {crd.LABEL_JOB: "s-1", shell.LABEL_SOW: "s", shell.LABEL_INSTANCE: "1"},
            "ownerReferences": [{"kind": shell.KIND, "uid": owner, "controller": True}],
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "containerStatuses": statuses},
    }


def test_sow_pod_names_its_instance_owner_and_finish() -> None:
    p = sow._sow_pod(pod("Succeeded", "2026-11-24T10:00:30Z"))
    assert p is not None
    assert (p.sow, p.index, p.job, p.owner) == ("ns/s", 1, "ns/s#1", "uid-s")
    assert p.finished_at is not None and p.finished_at % 60 == 30
    running = sow._sow_pod(pod("Running", None))
    assert running is not None and running.finished_at is None and running.live


def test_gang_pod_is_a_fungiblejob_pod_owned_by_the_sow_on_its_node() -> None:
    obj = shell.SowObject(
        namespace="ns",
        name="s",
        uid="uid-s",
        created=0.0,
        generation=1,
        spec={"template": {"spec": {"containers": [{"name": "c", "image": "registry/i:1"}]}}},
        status={},
        annotations={},
    )
    job = shell.gang_template(obj, 1, "g")
    gang = shell.Gang("ns/s#1", "ns/s", 1, "g", start=3, pods=2, per_pod=1)
    manifest = sow._manifest(obj, job, gang, 1, "n1", "s-1-r3-1", "nvidia.com/gpu")
    meta, spec = manifest["metadata"], manifest["spec"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": crd.API_VERSION,
            "kind": shell.KIND,
            "name": "s",
            "uid": "uid-s",
            "controller": True,
        }
    ]
    assert meta["labels"][crd.LABEL_JOB] == "s-1" and meta["labels"][shell.LABEL_INSTANCE] == "1"
    assert spec["nodeName"] == "n1" and spec["schedulerName"] == crd.SCHEDULER_NAME
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # Parsed back as the operator lists it: the instance, its SoW and the controller uid.
    parsed = sow._sow_pod({**manifest, "status": {"phase": "Pending"}})
    assert parsed is not None and (parsed.job, parsed.owner) == ("ns/s#1", "uid-s")

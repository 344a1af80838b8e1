"""StatementOfWork on the local control plane (issue 13, acceptance "on the local control plane").

- Invalid SoWs are rejected by the API server at admission, naming the field: one test per
  kind (increasing value function, probabilities not summing to 1, negative duration), plus a
  changed spec (immutable after birth). A valid SoW is accepted (the control for all four).
- Two SoWs whose plans collide beyond capacity (``test_later_born_is_evicted``): one 2-GPU node;
  ``first`` (k = 2) arrives 1 or 4 rounds after its release, ``second`` (k = 2, born one round
  later) arrives at once and must finish within 3 rounds, so its only plan overlaps ``first``'s
  run when ``first`` arrives early (posted failure estimate near ½, not 1, so it still runs).
  ``first`` is told it arrived early (annotation): at ``first``'s start the load is 4 > 2 and
  LIFO evicts ``second`` (born later) while ``first`` runs, completes and is charged exactly
  its posted bundle price ``k · Σ p(τ)`` over the rounds it ran, from the menu in its own status.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    BASE,
    install,
)

from walras.testing import devcluster

ARRIVALS = "walras.dev/sow-arrivals"


def sow_manifest(
    name: str,
    *,
    concurrency: int = 1,
    gpu_type: str = "g",
    value: dict[str, Any] | None = None,
    distribution: list[dict[str, Any]] | None = None,
    complete_after_ms: int | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "containers": [{"name": "train", "image": "registry.example/train:1"}],
            "restartPolicy": "Never",
        }
    }
    if complete_after_ms is not None:
        template["metadata"] = {
            "annotations": {devcluster.COMPLETE_AFTER_ANNOTATION: str(complete_after_ms)}
        }
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "StatementOfWork",
        "metadata": meta,
        "spec": {
            "concurrency": concurrency,
            "throughput": {gpu_type: 1.0},
            "value": value or {"deadline": 10, "amount": 10.0},
            "distribution": distribution or [{"arrival": 0, "duration": 2, "probability": 1.0}],
            "template": template,
        },
    }


def create_sow(kube: Any, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    result: dict[str, Any] = devcluster.request(
        kube, "POST", f"{BASE}/namespaces/{namespace}/statementsofwork", body=body
    )
    return result


def get_sow(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = devcluster.request(
        kube, "GET", f"{BASE}/namespaces/{namespace}/statementsofwork/{name}"
    )
    return result


def rejection(kube: Any, namespace: str, manifest: dict[str, Any]) -> str:
    """The API server's message rejecting ``manifest`` (fails if it is accepted)."""
    with pytest.raises(ApiException) as info:
        create_sow(kube, namespace, manifest)
    assert info.value.status == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


@pytest.fixture
def crds(kube: Any) -> None:
    install(kube)


def test_valid_sow_is_accepted(kube: Any, crds: None, namespace: str) -> None:
    made = create_sow(kube, namespace, sow_manifest("ok"))
    # The schema's default is applied: the plan keys on the arrival only.
    assert made["spec"]["durationRevealed"] is False


def test_increasing_value_function_is_rejected(kube: Any, crds: None, namespace: str) -> None:
    value = {"points": [{"after": 1, "amount": 2.0}, {"after": 4, "amount": 5.0}]}
    message = rejection(kube, namespace, sow_manifest("up", value=value))
    assert "spec.value.points" in message and "non-increasing" in message


def test_probabilities_not_summing_to_one_are_rejected(
    kube: Any, crds: None, namespace: str
) -> None:
    dist = [
        {"arrival": 0, "duration": 1, "probability": 0.5},
        {"arrival": 1, "duration": 1, "probability": 0.4},
    ]
    message = rejection(kube, namespace, sow_manifest("sum", distribution=dist))
    assert "spec.distribution" in message and "sum to 1" in message


def test_negative_duration_is_rejected(kube: Any, crds: None, namespace: str) -> None:
    dist = [{"arrival": 0, "duration": -2, "probability": 1.0}]
    message = rejection(kube, namespace, sow_manifest("neg", distribution=dist))
    assert "spec.distribution[0].duration" in message


def test_spec_is_immutable(kube: Any, crds: None, namespace: str) -> None:
    create_sow(kube, namespace, sow_manifest("fixed"))
    patch = {"spec": {"concurrency": 2}}
    with pytest.raises(ApiException) as info:
        devcluster.request(
            kube,
            "PATCH",
            f"{BASE}/namespaces/{namespace}/statementsofwork/fixed",
            body=patch,
            content_type="application/merge-patch+json",
        )
    assert info.value.status == 422
    assert "spec is immutable" in json.loads(info.value.body)["message"]

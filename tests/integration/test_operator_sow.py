"""StatementOfWork on the local control plane.

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
  A third SoW whose value exceeds the operator's bound ``V`` (which no CRD rule knows) is
  rejected by the operator with ``Admitted=False`` naming ``spec.value``; ``walras explain sow``
  shows the plan with its posted price.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    BASE,
    alive,
    create_job,
    create_nodes,
    create_pool,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)
from typer.testing import CliRunner

from walras.cli import app
from walras.testing import devcluster


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


def printed(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    """The SoW's row as ``kubectl get sow`` shows it (the API server's Table rendering)."""
    path = f"{BASE}/namespaces/{namespace}/statementsofwork/{name}"
    verb, url, headers, _, _ = kube.param_serialize(
        method="GET",
        resource_path=path,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    table = json.loads(kube.call_api(verb, url, header_params=headers).read())
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


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


def instance(sow: dict[str, Any], index: int = 0) -> dict[str, Any]:
    for view in (sow.get("status") or {}).get("instances") or []:
        if view["index"] == index:
            return dict(view)
    return {}


def posted_price(sow: dict[str, Any], start: int, finish: int) -> float:
    """``P(s, k, d) = k Σ_{τ=s}^{s+d−1} p(τ)`` from the menu posted in the SoW's own status."""
    adm = sow["status"]["admissions"][0]
    menu = adm["menu"]["g"]
    k = adm["failure"]["g"]["concurrency"]
    prices = menu["unitPrices"]

    def unit(tau: int) -> float:
        i = tau - menu["origin"]
        return float(prices[i]) if 0 <= i < len(prices) else float(menu["pMin"])

    return float(k * sum(unit(t) for t in range(start, finish)))


def small_market(kube: Any, monkeypatch: pytest.MonkeyPatch, prefix: str) -> str:
    """A clean cluster with one 2-GPU node of type ``g`` and its pool, mechanism bounds
    K = 2, D = 4, V = 10 for the operator started next, and a fresh namespace (returned)."""
    install(kube)
    namespace = devcluster.unique_name(prefix)
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, prefix, "g", 1, 2)
    create_pool(kube, pool_manifest("g", "g"))
    for name, value in (("MAX_CONCURRENCY", "2"), ("MAX_DURATION", "4"), ("MAX_VALUE", "10")):
        monkeypatch.setenv(f"WALRAS_SOW_{name}", value)
    return namespace


@pytest.mark.slow
def test_later_born_is_evicted(
    kube: Any,
    control_plane: devcluster.ControlPlane,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Bounds K = 2, D = 4, V = 10: p_min = 1/16, μ = 320, so `second` pays about 1.5 per GPU in
    # the rounds where `first` expects one GPU-pair half the time, and still gains by running.
    namespace = small_market(kube, monkeypatch, "t-sow")
    first = sow_manifest(
        "first",
        concurrency=2,
        distribution=[
            {"arrival": 2, "duration": 1, "probability": 0.5},
            {"arrival": 8, "duration": 1, "probability": 0.5},
        ],
        complete_after_ms=1500,
    )
    second = sow_manifest(
        "second",
        concurrency=2,
        value={"deadline": 3, "amount": 10.0},
        distribution=[{"arrival": 0, "duration": 3, "probability": 1.0}],
        complete_after_ms=600_000,
    )
    op = start_operator(control_plane, tmp_path, round_seconds=3.0)
    try:
        create_sow(kube, namespace, first)
        born = wait_for(
            lambda: (
                get_sow(kube, namespace, "first").get("status", {}).get("birth") is not None
                and get_sow(kube, namespace, "first")
            ),
            60,
            "`first` to be born",
        )
        create_sow(kube, namespace, second)
        # Beyond what the CRD can check: a value above the bound V = 10 is rejected by the
        # operator with the field named, and nothing else is disturbed.
        create_sow(kube, namespace, sow_manifest("greedy", value={"deadline": 5, "amount": 50.0}))
        later = wait_for(
            lambda: (
                instance(get_sow(kube, namespace, "second")).get("phase") == "running"
                and get_sow(kube, namespace, "second")
            ),
            60,
            "`second` to run",
        )
        b1, b2 = born["status"]["birth"], later["status"]["birth"]
        # `first` arrives at b1 + 2 (its earliest support point): inside `second`'s run
        # [b2, b2 + 2] only if `second` was born in the next round (creation right after birth).
        assert b2 == b1 + 1, (b1, b2)
        q = later["status"]["failureProbability"]
        assert 0 < q < 1, q  # posted: `first` collides only when it arrives early
        assert len(list_pods(kube, namespace, "second-0")) == 2

        done = wait_for(
            lambda: (
                instance(get_sow(kube, namespace, "first")).get("phase") == "completed"
                and get_sow(kube, namespace, "first")
            ),
            60,
            "`first` to complete",
        )
        evicted = get_sow(kube, namespace, "second")
        ev = instance(evicted)
        assert ev["phase"] == "evicted" and ev["finish"] == b1 + 2, ev
        assert ev["charge"] == 0.0
        assert evicted["status"]["charged"] == 0.0
        fin = instance(done)
        assert fin["start"] == b1 + 2 and fin["finish"] > fin["start"], fin
        expected = posted_price(done, fin["start"], fin["finish"])
        assert expected > 0
        assert abs(fin["charge"] - expected) <= 1e-9 * expected, (fin, expected)
        assert done["status"]["charged"] == fin["charge"]
        assert done["status"]["phase"] == "Done"
        row = printed(kube, namespace, "first")
        assert (row["Birth"], row["GPU type"], row["Phase"]) == (b1, "g", "Done")
        assert row["Charged"] == fin["charge"] and row["Run prob"] == 1
        wait_for(
            lambda: not [p for p in list_pods(kube, namespace, "second-0") if alive(p)],
            30,
            "the evicted instance's pods to go",
        )
        assert "statements of work failed" not in op.log_text()
        events = devcluster.request(kube, "GET", f"/api/v1/namespaces/{namespace}/events")
        reasons = {
            (e["involvedObject"]["name"], e["reason"])
            for e in events["items"]
            if e["involvedObject"].get("kind") == "StatementOfWork"
        }
        assert {("first", "Born"), ("second", "Evicted"), ("first", "Completed")} <= reasons
        assert ("greedy", "InvalidSpec") in reasons
        greedy = get_sow(kube, namespace, "greedy")["status"]
        assert greedy["phase"] == "Rejected"
        admitted = next(c for c in greedy["conditions"] if c["type"] == "Admitted")
        assert admitted["status"] == "False" and admitted["message"].startswith("spec.value:")
        # `walras explain sow` shows the plan with the posted price of the planned start.
        result = CliRunner().invoke(
            app,
            [
                "explain",
                "sow",
                f"{namespace}/first",
                "--kubeconfig",
                control_plane.admin_kubeconfig,
            ],
            env={"COLUMNS": "200"},
        )
        assert result.exit_code == 0, result.output
        assert "Launch plan" in result.output and "completed" in result.output
        assert f"{posted_price(done, b1 + 2, b1 + 3):.4g}" in result.output
    finally:
        op.terminate()
        devcluster.delete_namespace(kube, namespace)


@pytest.mark.slow
def test_restart_rebuilds_the_ledger(
    kube: Any,
    control_plane: devcluster.ControlPlane,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGKILL while an instance runs; the next operator rebuilds the ledger from the statuses:
    the posted admission is kept (no second birth), the gang is not created twice, and the
    instance completes and pays its posted price for the rounds its pods ran."""
    namespace = small_market(kube, monkeypatch, "t-sow-restart")
    # Pods run 7.5 s = 2.5 rounds of 3 s: the kill and restart fall inside the run.
    solo = sow_manifest(
        "solo",
        concurrency=1,
        distribution=[{"arrival": 1, "duration": 3, "probability": 1.0}],
        complete_after_ms=7500,
    )
    op = start_operator(control_plane, tmp_path, round_seconds=3.0, name="first")
    try:
        create_sow(kube, namespace, solo)
        running = wait_for(
            lambda: (
                instance(get_sow(kube, namespace, "solo")).get("phase") == "running"
                and get_sow(kube, namespace, "solo")
            ),
            60,
            "`solo` to run",
        )
        wait_for(lambda: list_pods(kube, namespace, "solo-0"), 30, "its pod")
    finally:
        op.kill()
    op = start_operator(control_plane, tmp_path, round_seconds=3.0, name="second")
    try:
        done = wait_for(
            lambda: (
                instance(get_sow(kube, namespace, "solo")).get("phase") == "completed"
                and get_sow(kube, namespace, "solo")
            ),
            60,
            "`solo` to complete after the restart",
        )
        assert done["status"]["admissions"] == running["status"]["admissions"]
        assert done["status"]["birth"] == running["status"]["birth"]
        pods = list_pods(kube, namespace, "solo-0")
        assert len({p["metadata"]["uid"] for p in pods}) <= 1, [p["metadata"]["name"] for p in pods]
        fin = instance(done)
        # 7.5 s of pods from a start in the first third of a 3 s round end two rounds later or
        # in the round after: 3 or 4 rounds charged, never fewer (that would be a lost round).
        assert fin["finish"] - fin["start"] >= 3, fin
        expected = posted_price(done, fin["start"], fin["finish"])
        assert abs(fin["charge"] - expected) <= 1e-9 * expected, (fin, expected)
        assert "statements of work failed" not in op.log_text()
    finally:
        op.terminate()
        devcluster.delete_namespace(kube, namespace)


@pytest.mark.slow
def test_reservation_comes_before_the_policy(
    kube: Any,
    control_plane: devcluster.ControlPlane,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A FungibleJob holds the only node's 2 GPUs; a SoW instance (k = 2) that starts takes
    them: the policy sees them reserved, the job's pods go, the SoW's gang runs, and the job
    runs again once the instance completed."""
    namespace = small_market(kube, monkeypatch, "t-sow-share")
    create_job(kube, namespace, job_manifest("filler", {"g": 1.0}, replicas=2))
    op = start_operator(control_plane, tmp_path, round_seconds=3.0)
    try:
        wait_for(
            lambda: (
                len([p for p in list_pods(kube, namespace, "filler") if p["spec"].get("nodeName")])
                == 2
            ),
            60,
            "the FungibleJob to hold both GPUs",
        )
        create_sow(
            kube,
            namespace,
            sow_manifest(
                "batch",
                concurrency=2,
                distribution=[{"arrival": 1, "duration": 1, "probability": 1.0}],
                complete_after_ms=2000,
            ),
        )

        def sow_running_alone() -> bool:
            gang = [p for p in list_pods(kube, namespace, "batch-0") if alive(p)]
            filler = [p for p in list_pods(kube, namespace, "filler") if alive(p)]
            return len(gang) == 2 and not filler

        wait_for(sow_running_alone, 60, "the SoW gang to replace the FungibleJob's pods")
        wait_for(
            lambda: instance(get_sow(kube, namespace, "batch")).get("phase") == "completed",
            60,
            "the SoW instance to complete",
        )
        wait_for(
            lambda: len([p for p in list_pods(kube, namespace, "filler") if alive(p)]) == 2,
            60,
            "the FungibleJob to run again",
        )
        assert "statements of work failed" not in op.log_text()
    finally:
        op.terminate()
        devcluster.delete_namespace(kube, namespace)

"""``walras explain`` and ``walras status`` against the real API server.

The objects are written as the operator would leave them (spec through the API, status through
the status subresource), then the CLI reads them back over HTTPS with an admin kubeconfig. The
per-type alternative is checked against the closed-form log-utility best response
``x = min(1, w / (p d))``. The examples in ``examples/`` are validated by the server itself
(``kubectl apply --dry-run=server``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from walras.cli import app
from walras.testing import devcluster

REPO = Path(__file__).resolve().parents[2]
BASE = "/apis/walras.dev/v1alpha1"


@pytest.fixture(scope="module")
def crds(kube: Any) -> None:
    devcluster.install_crds(kube, sorted((REPO / "crds").glob("*.yaml")))


@pytest.fixture
def pools(kube: Any, crds: None, namespace: str) -> Iterator[dict[str, str]]:
    """Two pools with GPU types unique to this test (pools are cluster-scoped and shared)."""
    types = {"fast": f"{namespace}-fast", "slow": f"{namespace}-slow"}
    status = {"fast": (8, 2.0, 0.75), "slow": (4, 0.5, 0.25)}
    for key, gpu_type in types.items():
        body = {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "ResourcePool",
            "metadata": {"name": gpu_type},
            "spec": {"gpuType": gpu_type, "nodeSelector": {"walras.dev/gpu-type": gpu_type}},
        }
        devcluster.request(kube, "POST", f"{BASE}/resourcepools", body=body)
        capacity, price, utilisation = status[key]
        patch = {
            "status": {
                "nodes": capacity // 4,
                "capacity": capacity,
                "allocated": capacity * utilisation,
                "price": price,
                "utilisation": utilisation,
            }
        }
        devcluster.request(
            kube,
            "PATCH",
            f"{BASE}/resourcepools/{gpu_type}/status",
            body=patch,
            content_type="application/merge-patch+json",
        )
    try:
        yield types
    finally:
        for gpu_type in types.values():
            devcluster.request(kube, "DELETE", f"{BASE}/resourcepools/{gpu_type}")


def make_job(
    kube: Any, namespace: str, name: str, spec: dict[str, Any], status: dict[str, Any]
) -> None:
    body = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    path = f"{BASE}/namespaces/{namespace}/fungiblejobs"
    devcluster.request(kube, "POST", path, body=body)
    devcluster.request(
        kube,
        "PATCH",
        f"{path}/{name}/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )


def template(gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus}
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}


def table_rows(output: str) -> list[list[str]]:
    """Body rows of the rich tables in ``output`` as lists of stripped cells."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in output.splitlines()
        if line.startswith("│")
    ]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_explain_pending_job(
    kube: Any, control_plane: devcluster.ControlPlane, namespace: str, pools: dict[str, str]
) -> None:
    fast, slow = pools["fast"], pools["slow"]
    spec = {
        "replicas": 2,
        "template": template(2),
        "throughput": {fast: 10.0, slow: 3.0},
        "utility": {"kind": "log", "weight": 2.0},
    }
    message = f"your share of {fast} is 0.12 at price 2; on {slow} you would get 1"
    status = {
        "phase": "Pending",
        "conditions": [
            {"type": "Admitted", "status": "True", "reason": "Valid", "message": "ok"},
            {
                "type": "Allocated",
                "status": "False",
                "reason": "InsufficientShare",
                "message": message,
            },
        ],
    }
    make_job(kube, namespace, "waiting", spec, status)
    code, out = run(
        "explain", f"{namespace}/waiting", "--kubeconfig", control_plane.admin_kubeconfig
    )
    assert code == 0, out
    assert f"{namespace}/waiting" in out and "phase=Pending" in out
    assert "InsufficientShare" in out and message in out
    # d = 2 replicas x 2 GPUs = 4, w = 2: fast min(1, 2/(2*4)) = 0.25 -> 2.5/s; slow 2/(0.5*4) -> 1.
    rows = table_rows(out)
    assert [fast, "2", "0.250", "2.5", ""] in rows
    assert [slow, "0.5", "1.000", "3", ""] in rows


def test_explain_running_job_and_missing_job(
    kube: Any, control_plane: devcluster.ControlPlane, namespace: str, pools: dict[str, str]
) -> None:
    fast = pools["fast"]
    status = {
        "phase": "Running",
        "allocation": [{"gpuType": fast, "fraction": 0.5, "nodes": ["node-x"]}],
        "expectedThroughput": 5.0,
        "price": 2.0,
        "fairShare": 0.5,
        "conditions": [{"type": "Allocated", "status": "True", "reason": "Allocated"}],
    }
    make_job(
        kube,
        namespace,
        "running",
        {"replicas": 1, "template": template(1), "throughput": {fast: 10.0}},
        status,
    )
    code, out = run(
        "explain", f"{namespace}/running", "--kubeconfig", control_plane.admin_kubeconfig
    )
    assert code == 0, out
    assert "node-x" in out and "Expected throughput 5/s at price 2" in out
    assert "Waiting" not in out
    code, out = run(
        "explain", f"{namespace}/absent", "--kubeconfig", control_plane.admin_kubeconfig
    )
    assert code == 1 and "not found" in out
    code, out = run("explain", "no-slash", "--kubeconfig", control_plane.admin_kubeconfig)
    assert code != 0


def test_status_lists_pools_and_top_pending_reasons(
    kube: Any, control_plane: devcluster.ControlPlane, namespace: str, pools: dict[str, str]
) -> None:
    fast, slow = pools["fast"], pools["slow"]
    for i, reason in enumerate(["NoFit", "InsufficientShare", "InsufficientShare"]):
        cond = {"type": "Allocated", "status": "False", "reason": reason, "message": "m"}
        spec = {"replicas": 1, "template": template(1), "throughput": {fast: 1.0}}
        make_job(kube, namespace, f"job-{i}", spec, {"phase": "Pending", "conditions": [cond]})
    code, out = run("status", "--kubeconfig", control_plane.admin_kubeconfig)
    assert code == 0, out
    rows = table_rows(out)
    # Pool, GPU type, Nodes, Capacity, Allocated, Price, Utilisation
    assert [fast, fast, "2", "8", "6.00", "2", "75%"] in rows
    assert [slow, slow, "1", "4", "1.00", "0.5", "25%"] in rows
    reasons = [line for line in out.splitlines() if "InsufficientShare" in line or "NoFit" in line]
    # At least our jobs (other tests may add more): InsufficientShare is listed before NoFit.
    assert len(reasons) == 2 and "InsufficientShare" in reasons[0]


def test_examples_pass_server_side_validation(kube: Any, crds: None, namespace: str) -> None:
    """The API server itself (schema, defaults, CEL) accepts every Walras object in examples/."""
    checked = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or not str(doc.get("apiVersion", "")).startswith("walras.dev/"):
                continue
            plural = {
                "FungibleJob": "fungiblejobs",
                "ResourcePool": "resourcepools",
                "StatementOfWork": "statementsofwork",
                "Tenant": "tenants",
            }[doc["kind"]]
            if doc["kind"] in ("FungibleJob", "StatementOfWork"):
                doc["metadata"]["namespace"] = namespace  # the sample's namespace is not here
                url = f"{BASE}/namespaces/{namespace}/{plural}"
            else:
                url = f"{BASE}/{plural}"
            answer = devcluster.request(kube, "POST", url, body=doc, query={"dryRun": "All"})
            assert answer["metadata"]["name"] == doc["metadata"]["name"]
            checked.append(doc["kind"])
    assert sorted(set(checked)) == ["FungibleJob", "ResourcePool", "StatementOfWork", "Tenant"]

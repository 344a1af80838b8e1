"""Install paths of the Helm chart on the real local control plane: upgrade and uninstall.

Upgrade: the chart as of commit eec9749 (the previous chart version, 0.1.0; its packaged archive in
``tests/data/charts/``) is installed, a FungibleJob is scheduled by an operator authenticated only
by the chart's controller ServiceAccount, and its pod runs on a kwok GPU node. ``helm upgrade`` to
this checkout's chart must keep that pod: the same pod (uid) on the same node, still Running, its
slice not restarted (``status.runningSince`` unchanged), while the operator keeps running rounds
with the upgraded RBAC, and after the operator is replaced by a new process (what the Deployment's
rollout does in a cluster).

Uninstall: after ``helm uninstall`` no cluster-scoped object of the release is left (neither those
the chart renders nor any carrying its instance label), while the CRDs stay (Helm never deletes
crds/; docs/operations.md says how to remove them).

Not covered: the CRDs and the operator's code are this checkout's throughout (Helm never upgrades
crds/: docs/operations.md has the upgrade apply them first with kubectl), so this is the chart's
objects (RBAC, ServiceAccounts, Deployments, DaemonSet) changing under a running job.

The control plane has no kube-scheduler, so the chart's own Deployment never runs a pod here; the
operator runs as a local process instead (as in test_chart_install.py). Each test uses a release
and namespace of its own, so cluster-scoped names collide with no other test's.
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_helpers import (
    BASE,
    OperatorProcess,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "walras"
PREVIOUS_COMMIT = "eec9749"  # the chart as released at version 0.1.0
PREVIOUS_ARCHIVE = Path(__file__).parents[1] / "data" / "charts" / "walras-0.1.0.tgz"
GPU_TYPE = "upgradetest"  # a GPU type no other test uses
NODE = "upgrade-gpu-0"
DEADLINE_S = 90.0
INSTANCE_LABEL = "app.kubernetes.io/instance"


def helm(cp: devcluster.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(devcluster.tool("helm")), *args],
        env=cp.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc


def kubectl(cp: devcluster.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(devcluster.tool("kubectl")), *args],
        env=cp.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def chart_version(chart: Path) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text())["version"])


@pytest.fixture(scope="module")
def previous_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release of the chart, unpacked from its packaged archive.

    ``tests/data/charts/walras-0.1.0.tgz`` is ``helm package`` of charts/walras as of
    PREVIOUS_COMMIT: a release artefact, so the test needs no git history (CI may clone shallow).
    """
    out = tmp_path_factory.mktemp("previous-chart")
    with tarfile.open(PREVIOUS_ARCHIVE) as tar:
        tar.extractall(out, filter="data")
    chart = out / "walras"
    # The test is about an upgrade: the checkout's chart must carry a newer version.
    assert chart_version(chart) != chart_version(CHART), "bump charts/walras/Chart.yaml version"
    return chart


@pytest.fixture
def release(request: pytest.FixtureRequest, control_plane: Any, kube: Any) -> Iterator[str]:
    """A release name, also its namespace; uninstalled and deleted afterwards.

    First a clean cluster with this checkout's CRDs (operator_helpers.install), as the documented
    upgrade applies the new CRDs before ``helm upgrade`` (Helm never upgrades crds/).
    """
    install(kube)
    name = str(request.param)
    helm(control_plane, "uninstall", name, "--namespace", name, "--ignore-not-found")
    try:
        yield name
    finally:
        helm(control_plane, "uninstall", name, "--namespace", name, "--ignore-not-found")
        devcluster.delete_namespace(kube, name)


def helm_install(cp: Any, release: str, chart: Path, *, verb: str = "install") -> None:
    proc = helm(
        cp,
        verb, release, str(chart),
        "--namespace", release,
        # The CRDs are this checkout's already (the release fixture), as after the documented
        # first step of an upgrade; Helm 4 would server-side apply an older crds/ over them.
        *(["--create-namespace", "--skip-crds"] if verb == "install" else []),
        "--set", "agent.enabled=true",
        "--wait=false",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def deployed_chart(cp: Any, release: str) -> str:
    proc = helm(cp, "list", "--namespace", release, "--output", "yaml")
    assert proc.returncode == 0, proc.stderr
    (entry,) = [r for r in yaml.safe_load(proc.stdout) if r["name"] == release]
    assert entry["status"] == "deployed", entry
    return str(entry["chart"])


@pytest.fixture
def jobs_namespace(kube: Any, release: str) -> Iterator[str]:
    """Where the test's FungibleJob lives (after ``release``: its reset deletes namespaces)."""
    name = f"{release}-jobs"
    devcluster.create_namespace(kube, name)
    try:
        yield name
    finally:
        devcluster.delete_namespace(kube, name)


@pytest.fixture
def pool(kube: Any, release: str) -> Iterator[str]:
    """A ResourcePool of GPU_TYPE over one kwok node, NODE, with 4 GPUs (after ``release``)."""
    (node,) = create_nodes(kube, NODE.rsplit("-", 1)[0], GPU_TYPE, 1, 4)
    assert node == NODE
    create_pool(kube, pool_manifest(GPU_TYPE, GPU_TYPE))
    try:
        yield GPU_TYPE
    finally:
        devcluster.request(kube, "DELETE", f"{BASE}/resourcepools/{GPU_TYPE}")
        devcluster.delete_nodes(kube, [NODE])


def chart_operator(cp: Any, release: str, log_dir: Path, name: str) -> OperatorProcess:
    """`walras operator` authenticated only by a token of the chart's controller ServiceAccount.

    start_operator passes the admin kubeconfig first; a repeated option's last value wins (click),
    so the ServiceAccount's kubeconfig given in ``extra`` is the one used.
    """
    kubeconfig = devcluster.service_account_kubeconfig(
        cp, release, "walras-controller", str(log_dir / f"{name}.kubeconfig")
    )
    return start_operator(
        cp, log_dir, name=name, round_seconds=1.0, extra=["--kubeconfig", kubeconfig]
    )


def running_pod(kube: Any, namespace: str, job: str) -> dict[str, Any] | None:
    """The job's one pod when it is bound and Running (kwok runs pods on its nodes)."""
    pods = list_pods(kube, namespace, job)
    if len(pods) != 1:
        return None
    pod = pods[0]
    if not pod["spec"].get("nodeName") or pod.get("status", {}).get("phase") != "Running":
        return None
    return pod


def after_rounds(op: OperatorProcess, rounds: int) -> None:
    start = op.rounds()
    wait_for(lambda: op.rounds() >= start + rounds, DEADLINE_S, f"{rounds} more rounds")


@pytest.mark.parametrize("release", ["walras-upgrade"], indirect=True)
def test_upgrade_from_the_previous_chart_keeps_the_job_running(
    control_plane: Any,
    kube: Any,
    release: str,
    previous_chart: Path,
    jobs_namespace: str,
    pool: str,
    tmp_path: Path,
) -> None:
    helm_install(control_plane, release, previous_chart)
    assert deployed_chart(control_plane, release) == f"walras-{chart_version(previous_chart)}"
    create_job(kube, jobs_namespace, job_manifest("steady", gpus=1, throughput={GPU_TYPE: 1.0}))

    op = chart_operator(control_plane, release, tmp_path, "operator-before")
    try:
        pod = wait_for(
            lambda: running_pod(kube, jobs_namespace, "steady"), DEADLINE_S, "steady's pod Running"
        )
        assert pod["spec"]["nodeName"] == NODE
        since = wait_for(
            lambda: get_job(kube, jobs_namespace, "steady").get("status", {}).get("runningSince"),
            DEADLINE_S,
            "status.runningSince",
        )
        uid = pod["metadata"]["uid"]
        # Baseline: without an upgrade the pod stays put over rounds (else the test proves nothing).
        after_rounds(op, 3)
        assert (running_pod(kube, jobs_namespace, "steady") or {}).get("metadata", {}).get(
            "uid"
        ) == uid

        # The previous chart's ClusterRole may lack what this operator reads (a 403 said once
        # before the upgrade); only what the operator logs under the upgraded one counts.
        before_upgrade = len(op.log_text())
        helm_install(control_plane, release, CHART, verb="upgrade")
        assert deployed_chart(control_plane, release) == f"walras-{chart_version(CHART)}"
        after_rounds(op, 3)
        # Rounds after the upgrade: a write refused under the new ClusterRole is logged in them.
        after = op.log_text()[before_upgrade:].lower()
        assert "forbidden" not in after and "http 403" not in after, after[-4000:]
    finally:
        op.terminate()
    pod = running_pod(kube, jobs_namespace, "steady")
    assert pod is not None and pod["metadata"]["uid"] == uid

    # The upgraded Deployment's rollout replaces the operator: a new process adopts the job.
    op = chart_operator(control_plane, release, tmp_path, "operator-after")
    try:
        after_rounds(op, 3)
        assert "forbidden" not in op.log_text().lower(), op.log_text()[-4000:]
    finally:
        op.terminate()
    pod = running_pod(kube, jobs_namespace, "steady")
    assert pod is not None, list_pods(kube, jobs_namespace, "steady")
    assert (pod["metadata"]["uid"], pod["spec"]["nodeName"]) == (uid, NODE)
    status = get_job(kube, jobs_namespace, "steady")["status"]
    assert status["runningSince"] == since  # the same slice: never restarted
    assert status.get("phase") == "Running", status


def cluster_scoped_kinds(cp: Any) -> dict[str, str]:
    """Kind -> resource (plural.group) of every cluster-scoped, listable API resource."""
    proc = kubectl(cp, "api-resources", "--namespaced=false", "--verbs=list", "--no-headers")
    assert proc.returncode == 0, proc.stderr
    kinds = {}
    for line in proc.stdout.splitlines():
        fields = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND
        name, api_version, kind = fields[0], fields[-3], fields[-1]
        group = api_version.rpartition("/")[0]
        kinds[kind] = f"{name}.{group}" if group else name
    return kinds


@pytest.mark.parametrize("release", ["walras-uninstall"], indirect=True)
def test_uninstall_leaves_no_cluster_scoped_objects_but_the_crds(
    control_plane: Any, kube: Any, release: str
) -> None:
    helm_install(control_plane, release, CHART)
    kinds = cluster_scoped_kinds(control_plane)
    rendered = helm(
        control_plane,
        "template", release, str(CHART),
        "--namespace", release,
        "--set", "agent.enabled=true",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    cluster_scoped = [(kinds[d["kind"]], d["metadata"]["name"]) for d in docs if d["kind"] in kinds]
    assert cluster_scoped, "the chart renders cluster-scoped objects (its ClusterRoles)"
    for resource, name in cluster_scoped:  # installed: the checks below can tell
        assert kubectl(control_plane, "get", resource, name).returncode == 0, (resource, name)
    crds = sorted(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (CHART / "crds").glob("*.yaml")
    )

    proc = helm(control_plane, "uninstall", release, "--namespace", release, "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    for resource, name in cluster_scoped:
        got = kubectl(control_plane, "get", resource, name, "--ignore-not-found", "--output=name")
        assert got.returncode == 0 and got.stdout.strip() == "", (resource, name, got.stderr)
    left = []
    for resource in sorted(set(kinds.values())):
        got = kubectl(
            control_plane, "get", resource, "--selector", f"{INSTANCE_LABEL}={release}",
            "--output=name",
        )  # fmt: skip
        if got.returncode == 0:
            left += got.stdout.split()
    assert left == [], f"cluster-scoped objects of {release} left after helm uninstall: {left}"
    present = kubectl(control_plane, "get", "customresourcedefinitions", *crds, "--output=name")
    assert present.returncode == 0, present.stderr
    assert len(present.stdout.split()) == len(crds)

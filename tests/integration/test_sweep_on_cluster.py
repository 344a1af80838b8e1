"""``walras simulate sweep SPEC.yaml --on-cluster`` on the local control plane with a real node.

The project image is built from this checkout (``hack/build-image.sh``: buildah, the dependency
layers cached), written as an archive and imported into a real node's containerd, as the workload
image is; the pods use it with ``imagePullPolicy: IfNotPresent`` (there is no registry). The
command runs in a subprocess, as a user runs it, against the control plane's admin kubeconfig.

The local control plane has no kube-scheduler (``walras.testing.devcluster``), so this test plays
it: a thread binds each Pending pod of the sweep's Job to the real node through ``pods/binding``.
Everything else is Kubernetes' own: the Job controller makes one pod per index, the kubelet runs
it in the image and records its termination message, which the command reads back.

Oracles: the local sweep of the same spec in this process (``run_sweep``): every row, the timing
fields left out, must be equal (the table and ``sweep.csv`` are drawn from the rows by the same
functions); the kubelet's account of each pod (Succeeded, on the real node, its index).

Run it under the machine-wide real-node lock:
``flock /tmp/walras-real-node.lock pytest tests/integration/test_sweep_on_cluster.py``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from walras.cli import sweep_cluster
from walras.sim import sweep
from walras.testing import devcluster, realnodes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/walras:sweep-test"  # a name with a registry part: the archive keeps it
TRACE = ROOT / "tests" / "data" / "gavel" / "small_test.trace"
TIMING_KEYS = {"wall_s", "solve_s_mean", "solve_s_p95", "solve_s_max"}


def _require(condition: bool, message: str) -> None:
    if condition:
        return
    required = [
        n
        for n in ("WALRAS_REQUIRE_REAL_NODES", "WALRAS_REQUIRE_APISERVER")
        if os.environ.get(n) == "1"
    ]
    if required:
        pytest.fail(f"{message} [{', '.join(required)}=1]", pytrace=False)
    pytest.skip(message)


@dataclass(frozen=True)
class Setup:
    cp: devcluster.ControlPlane
    node: realnodes.RealNode
    image_report: dict[str, str]


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory, real_cluster: realnodes.RealCluster
) -> Iterator[Setup]:
    _require(devcluster.binaries_available(), "kube-apiserver/etcd/kwok are not built: make tools")
    missing = realnodes.missing_capability()
    _require(missing is None, str(missing))
    _require(shutil.which("buildah") is not None, "buildah not installed: run `make tools`")
    archive = tmp_path_factory.mktemp("image") / "walras.tar"
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-image.sh"), "--tag", IMAGE, "--archive", str(archive)],
        capture_output=True,
        text=True,
        env={**os.environ, "WALRAS_IMAGE_ENGINE": "buildah"},
        timeout=2300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    report = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    report["image_step_s"] = f"{time.monotonic() - started:.1f}"  # build (or reuse) + archive
    # One more real node on the session's real-node control plane: the service address pods use
    # (10.96.0.1) can be held by one control plane per machine, so a second one could not start
    # nodes while the session's is up.
    cp = real_cluster.control_plane
    node = realnodes.add_real_node(
        cp, "sweep-0", gpu_type="fake-sweep", gpus=1, images=[str(archive)], timeout=900
    )
    try:
        yield Setup(cp, node, report)
    finally:
        realnodes.stop_real_node(cp, node)
        api = cp.admin_client()
        try:
            devcluster.delete_nodes(api, [node.name])
        finally:
            api.close()


class Binder(threading.Thread):
    """The scheduler this control plane lacks: binds the namespace's Pending pods to one node."""

    def __init__(self, api: Any, namespace: str, node: str) -> None:
        super().__init__(daemon=True)
        self.api, self.namespace, self.node = api, namespace, node
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            pods = devcluster.request(self.api, "GET", f"/api/v1/namespaces/{self.namespace}/pods")
            for pod in pods["items"]:
                if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    devcluster.bind_pod(
                        self.api, self.namespace, pod["metadata"]["name"], self.node
                    )
                except ApiException as exc:
                    if exc.status not in (404, 409):  # gone, or bound since the list
                        raise


def untimed(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in TIMING_KEYS}


def test_sweep_on_cluster_equals_the_local_sweep(setup: Setup, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"trace: {TRACE}\ncluster: '4:4:4'\n"
        "policies: [max_min_fairness_perf, fifo_perf, finish_time_fairness_perf]\n"
        "seeds: [0]\narrival_rates: [null]\nrestart_seconds: [10]\n"
    )
    api = setup.cp.admin_client()
    namespace = devcluster.unique_name("sweep")
    devcluster.create_namespace(api, namespace)
    binder = Binder(api, namespace, setup.node.name)
    binder.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from walras.console import main; main()",
                "simulate",
                "sweep",
                str(spec),
                "--on-cluster",
                "--image",
                IMAGE,
                "--namespace",
                namespace,
                "--kubeconfig",
                setup.cp.admin_kubeconfig,
                "--parallelism",
                "2",  # fewer than the cells: the Job controller starts the third later
                "--cell-cpu",
                "100m",  # the node's two shared cores must admit two pods
                "--json",
                "--out",
                str(tmp_path / "out"),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            timeout=1200,
            check=False,
        )
        run_s = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        binder.stopping.set()
        binder.join()
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    local = sweep.run_sweep(sweep.load_spec(spec), workers=1)
    assert [untimed(r) for r in rows] == [untimed(r) for r in local]
    assert (tmp_path / "out" / "sweep.png").read_bytes()[:4] == b"\x89PNG"

    pods = devcluster.request(api, "GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    indexes = sorted(
        int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for p in pods
    )
    assert indexes == [0, 1, 2]
    for pod in pods:
        assert pod["spec"]["nodeName"] == setup.node.name
        assert pod["status"]["phase"] == "Succeeded"
        (status,) = pod["status"]["containerStatuses"]
        assert status["image"].endswith("walras:sweep-test")
    jobs = devcluster.request(api, "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    (job,) = jobs
    assert job["status"]["completedIndexes"] == "0-2"
    cms = devcluster.request(api, "GET", f"/api/v1/namespaces/{namespace}/configmaps")["items"]
    (owned,) = [c for c in cms if c["metadata"].get("ownerReferences")]
    assert owned["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

    # What it cost, for docs/evaluation.md (printed, not asserted: no timed tests).
    cells_wall = [r["wall_s"] for r in rows]
    print(
        json.dumps(
            {
                "image_build_s": float(setup.image_report.get("build_s", "nan")),
                "image_build_and_archive_s": float(setup.image_report["image_step_s"]),
                "image_bytes": int(setup.image_report.get("size_bytes", 0)),
                "node_start_log": [
                    line
                    for line in setup.node.start_log.splitlines()
                    if "imported" in line or "containerd up" in line
                ],
                "command_wall_s": round(run_s, 1),
                "command_cpu_s": round(
                    after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2
                ),
                "cell_sim_wall_s_in_pods": [round(x, 3) for x in cells_wall],
                "cell_sim_wall_s_local": [round(r["wall_s"], 3) for r in local],
            }
        )
    )
    api.close()


def test_a_cell_that_fails_in_its_pod_is_reported_by_its_index(
    setup: Setup, tmp_path: Path
) -> None:
    # The command checks the spec before it creates anything, so a cell that fails in its pod is
    # made here: the shipped spec is edited after the check to name an unknown policy for cell 1.
    # What comes back is the real kubelet's record of a failed container (its exit code, and the
    # tail of its output as the message: FallbackToLogsOnError).
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"trace: {TRACE}\ncluster: '4:4:4'\npolicies: [fifo_perf, max_min_fairness_perf]\n"
    )
    _, data = sweep_cluster.bundle(spec)
    shipped = yaml.safe_load(data[sweep_cluster.SPEC_KEY])
    shipped["policies"] = ["fifo_perf", "nosuch"]
    data[sweep_cluster.SPEC_KEY] = yaml.safe_dump(shipped)
    api = setup.cp.admin_client()
    namespace = devcluster.unique_name("sweep-fail")
    devcluster.create_namespace(api, namespace)
    binder = Binder(api, namespace, setup.node.name)
    binder.start()
    options = sweep_cluster.Options(
        name="walras-sweep-fail", namespace=namespace, image=IMAGE, parallelism=2, cpu="100m"
    )
    try:
        rows, failures = sweep_cluster.run_on_cluster(
            sweep_cluster.KubeSweepApi(api), options, data, 2, poll_s=1.0, timeout_s=900
        )
    finally:
        binder.stopping.set()
        binder.join()
        api.close()
    local = sweep.run_sweep(sweep.load_spec(spec), workers=1)
    assert [untimed(r) for r in rows] == [untimed(local[0])]
    (failure,) = failures
    assert failure.index == 1
    assert failure.reason.startswith("exit 2: error: ")
    assert "unknown policy 'nosuch'" in failure.reason


def test_an_image_the_node_cannot_get_ends_the_wait_with_exit_1(
    setup: Setup, tmp_path: Path
) -> None:
    # The node has no such image and no registry to pull it from: the kubelet leaves the pod
    # waiting (ErrImagePull, then ImagePullBackOff) and the Job would wait for ever.
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"trace: {TRACE}\ncluster: '4:4:4'\npolicies: [fifo_perf]\n")
    api = setup.cp.admin_client()
    namespace = devcluster.unique_name("sweep-noimage")
    devcluster.create_namespace(api, namespace)
    binder = Binder(api, namespace, setup.node.name)
    binder.start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from walras.console import main; main()",
                "simulate",
                "sweep",
                str(spec),
                "--on-cluster",
                "--image",
                "localhost/walras:absent",
                "--namespace",
                namespace,
                "--kubeconfig",
                setup.cp.admin_kubeconfig,
                "--cell-cpu",
                "100m",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            timeout=600,
            check=False,
        )
    finally:
        binder.stopping.set()
        binder.join()
        api.close()
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    assert "(cell 0) cannot start: ErrImagePull" in proc.stderr or (
        "(cell 0) cannot start: ImagePullBackOff" in proc.stderr
    ), proc.stderr

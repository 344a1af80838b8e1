"""``walras simulate sweep --on-cluster``: the Indexed Job, what its pods run, how rows come back.

Oracles: the local sweep on the same spec (``run_sweep``), which the shipped spec must reproduce
cell by cell; the Job API's documented fields (an Indexed Job's ``completedIndexes`` and
``failedIndexes`` are compressed interval lists, a pod's index is its
``batch.kubernetes.io/job-completion-index`` annotation); the exit-status contract (2 for a bad
spec before any request, 1 for an unreachable cluster, one line, no traceback).

The fake API below plays the Job controller and the kubelet: it runs each started index's command
for real, in this process, on the ConfigMap's files written to a directory, and records what the
kubelet would show (the termination message, or for a failed cell the output's tail, as
``FallbackToLogsOnError`` does).
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from sim_helpers import TRACES

from walras.cli import sweep_cluster
from walras.sim import sweep

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMING_KEYS = {"wall_s", "solve_s_mean", "solve_s_p95", "solve_s_max"}


def write_spec(tmp: pathlib.Path, extra: str = "") -> pathlib.Path:
    spec = tmp / "spec.yaml"
    spec.write_text(
        f"trace: {TRACES['D1']}\ncluster: '4:4:4'\npolicies: [max_min_fairness_perf, fifo_perf]\n"
        f"seeds: [0]\narrival_rates: [null, 30]\nrestart_seconds: [0, 10]\n{extra}"
    )
    return spec


def untimed(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in TIMING_KEYS}


def options(name: str = "walras-sweep-test", parallelism: int = 3) -> sweep_cluster.Options:
    return sweep_cluster.Options(
        name=name, namespace="sweeps", image="localhost/walras:test", parallelism=parallelism
    )


def test_job_manifest_is_indexed_one_completion_per_cell() -> None:
    job = sweep_cluster.job_manifest(options(parallelism=3), cells=8)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == 8
    assert spec["parallelism"] == 3
    assert spec["backoffLimitPerIndex"] == 0
    assert spec["suspend"] is True
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # required by backoffLimitPerIndex
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["image"] == "localhost/walras:test"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert '--cell "$JOB_COMPLETION_INDEX"' in container["command"][2]
    assert container["command"][2].endswith("> /dev/termination-log")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["sweep"]["configMap"]["name"] == "walras-sweep-test"
    assert f"{mounts['sweep']}/{sweep_cluster.SPEC_KEY}" in container["command"][2]
    # Never more pods at once than cells.
    assert sweep_cluster.job_manifest(options(parallelism=50), cells=4)["spec"]["parallelism"] == 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, []), ("", []), ("3", [3]), ("0,2-4,7", [0, 2, 3, 4, 7]), ("1-2,5-6", [1, 2, 5, 6])],
)
def test_parse_indexes(text: str | None, expected: list[int]) -> None:
    assert sweep_cluster.parse_indexes(text) == expected


def materialise(data: Mapping[str, str], directory: pathlib.Path) -> pathlib.Path:
    """The ConfigMap as the kubelet mounts it: one file per key."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in data.items():
        (directory / key).write_text(value)
    return directory / sweep_cluster.SPEC_KEY


def run_index_command(job: Mapping[str, Any], mounted: pathlib.Path, index: int) -> tuple[int, str]:
    """The container's shell command, run here with the mount path replaced; (exit, message)."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    script = container["command"][2].replace(sweep_cluster.SPEC_DIR, str(mounted))
    message = mounted / f"termination-{index}"
    script = script.replace("/dev/termination-log", str(message))
    python = f"{sys.executable} -c 'from walras.console import main; main()'"
    script = script.replace("walras ", python + " ", 1)
    env = {
        **os.environ,
        "JOB_COMPLETION_INDEX": str(index),
        "PYTHONPATH": str(ROOT / "src"),
    }
    proc = subprocess.run(
        [*container["command"][:2], script],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    text = message.read_text() if message.exists() else ""
    if proc.returncode != 0 and not text:
        text = proc.stdout + proc.stderr  # FallbackToLogsOnError: the output's tail
    return proc.returncode, text


class FakeCluster:
    """The Job controller and kubelets, one index finishing per ``read_job``."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.tmp = tmp
        self.calls: list[str] = []
        self.job: dict[str, Any] | None = None
        self.configmap: dict[str, Any] | None = None
        self.pods: list[dict[str, Any]] = []
        self.next_index = 0

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append("create_job")
        self.job = copy.deepcopy(dict(body))
        self.job["metadata"]["uid"] = "job-uid-1"
        self.job["status"] = {}
        return copy.deepcopy(self.job)

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append("create_configmap")
        self.configmap = copy.deepcopy(dict(body))
        return copy.deepcopy(self.configmap)

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append("patch_job")
        assert self.job is not None
        self.job["spec"]["suspend"] = patch["spec"]["suspend"]
        return copy.deepcopy(self.job)

    def read_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("read_job")
        assert self.job is not None and self.configmap is not None
        cells = self.job["spec"]["completions"]
        if not self.job["spec"]["suspend"] and self.next_index < cells:
            self._run(self.next_index)
            self.next_index += 1
        status = self.job["status"]
        if self.next_index == cells:
            failed = bool(status.get("failedIndexes"))
            status["conditions"] = [{"type": "Failed" if failed else "Complete", "status": "True"}]
        return copy.deepcopy(self.job)

    def _run(self, index: int) -> None:
        assert self.job is not None and self.configmap is not None
        spec = materialise(self.configmap["data"], self.tmp / "mount")
        code, message = run_index_command(self.job, spec.parent, index)
        status = self.job["status"]
        key = "completedIndexes" if code == 0 else "failedIndexes"
        done = [*sweep_cluster.parse_indexes(status.get(key)), index]
        status[key] = ",".join(str(i) for i in done)
        self.pods.append(
            {
                "metadata": {
                    "name": f"{self.job['metadata']['name']}-{index}-x",
                    "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                },
                "status": {
                    "phase": "Succeeded" if code == 0 else "Failed",
                    "containerStatuses": [
                        {"state": {"terminated": {"exitCode": code, "message": message[-4096:]}}}
                    ],
                },
            }
        )

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append("list_pods")
        assert self.job is not None
        assert selector == f"{sweep_cluster.SWEEP_LABEL}={self.job['metadata']['name']}"
        return copy.deepcopy(self.pods)


@pytest.mark.slow  # eight cells, each a subprocess of the console script
def test_rows_from_the_cluster_equal_the_local_sweep(tmp_path: pathlib.Path) -> None:
    spec_path = write_spec(tmp_path)
    spec, data = sweep_cluster.bundle(spec_path)
    cells = len(sweep.runs(spec))
    assert cells == 8
    fake = FakeCluster(tmp_path)
    seen: list[tuple[int, int, int]] = []
    rows, failures = sweep_cluster.run_on_cluster(
        fake,
        options(),
        data,
        cells,
        progress=lambda *a: seen.append(a),
        sleep=lambda s: None,
    )
    assert failures == []
    local = sweep.run_sweep(sweep.load_spec(spec_path), workers=1)
    assert [untimed(r) for r in rows] == [untimed(r) for r in local]
    # The Job is created suspended, its ConfigMap then, owned by it, and only then resumed.
    assert fake.calls[:3] == ["create_job", "create_configmap", "patch_job"]
    assert fake.configmap is not None
    (owner,) = fake.configmap["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "walras-sweep-test", "job-uid-1")
    # The bar saw every index complete, one at a time.
    assert [done for done, _, _ in seen] == list(range(1, cells + 1))


def test_a_failed_index_is_reported_by_index_with_its_reason(tmp_path: pathlib.Path) -> None:
    # The cell's command prints one error line and exits 2; with an empty termination file the
    # kubelet keeps the output's tail as the message (FallbackToLogsOnError).
    spec_path = write_spec(tmp_path)
    _, data = sweep_cluster.bundle(spec_path)
    fake = FakeCluster(tmp_path)
    # Break the shipped trace for every cell: each index fails with the parser's line.
    data = {**data, sweep_cluster.TRACE_KEY: "not a trace\n"}
    rows, failures = sweep_cluster.run_on_cluster(fake, options(), data, 2, sleep=lambda s: None)
    assert rows == []
    assert [f.index for f in failures] == [0, 1]
    for failure in failures:
        assert failure.reason.startswith("exit 2: ")
        assert "sweep.trace:1" in failure.reason
        assert "Traceback" not in failure.reason


def test_collect_prefers_a_succeeded_pod_and_names_missing_indexes() -> None:
    row = {"policy": "fifo", "seed": 0, "arrival_rate": None, "restart_s": 0.0}

    def pod(index: int, phase: str, message: str, code: int) -> dict[str, Any]:
        return {
            "metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {
                "phase": phase,
                "containerStatuses": [
                    {"state": {"terminated": {"exitCode": code, "message": message}}}
                ],
            },
        }

    pods = [
        pod(0, "Failed", "error: OOM", 137),
        pod(0, "Succeeded", json.dumps(row), 0),
        pod(1, "Failed", "error: spec.yaml: bad", 2),
        pod(2, "Succeeded", "not json", 0),
    ]
    rows, failures = sweep_cluster.collect(pods, 5, failed=[1, 3])
    assert rows == {0: row}
    assert [(f.index, f.reason) for f in failures] == [
        (1, "exit 2: error: spec.yaml: bad"),
        (2, "succeeded without a result row (message 'not json')"),
        (3, "failed (no pod left to say why)"),
        (4, "no result (its pod is gone)"),
    ]


class ImagelessCluster(FakeCluster):
    """Nodes that lack the image: index 0's pod waits with ErrImageNeverPull, nothing finishes."""

    def read_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("read_job")
        assert self.job is not None
        self.pods = [
            {
                "metadata": {
                    "name": "walras-sweep-test-0-abc",
                    "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
                },
                "status": {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "state": {
                                "waiting": {
                                    "reason": "ErrImageNeverPull",
                                    "message": 'Container image "localhost/walras:test" is not '
                                    "present with pull policy of Never",
                                }
                            }
                        }
                    ],
                },
            }
        ]
        self.job["status"] = {"active": 1}
        return copy.deepcopy(self.job)


def test_a_pod_that_cannot_start_stops_the_wait_with_its_reason(tmp_path: pathlib.Path) -> None:
    # Such a pod never fails, so the Job would never finish: the command must not wait forever.
    _, data = sweep_cluster.bundle(write_spec(tmp_path))
    fake = ImagelessCluster(tmp_path)
    with pytest.raises(sweep_cluster.ClusterSweepError) as err:
        sweep_cluster.run_on_cluster(fake, options(), data, 8, sleep=lambda s: None)
    text = str(err.value)
    assert "pod walras-sweep-test-0-abc (cell 0) cannot start: ErrImageNeverPull" in text
    assert "localhost/walras:test" in text
    assert fake.calls.count("read_job") == 1


def test_shipped_spec_round_trips(tmp_path: pathlib.Path) -> None:
    spec_path = write_spec(tmp_path, "window: '2:9'\nround_seconds: 120\n")
    spec, data = sweep_cluster.bundle(spec_path)
    shipped = sweep.load_spec(materialise(data, tmp_path / "mount"))
    assert shipped.trace.read_text() == spec.trace.read_text()
    from dataclasses import replace

    assert replace(shipped, trace=spec.trace) == spec


def walras(args: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    environ["PYTHONPATH"] = str(ROOT / "src")
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", "from walras.console import main; main()", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("spec_text", "needle"),
    [
        ("trace: {trace}\npolicies: [fifo]\nseedz: [1]\n", "unknown key(s) seedz"),
        ("trace: {trace}\npolicies: [fifo, nosuch]\n", "policies: unknown policy 'nosuch'"),
        ("trace: {bad}\npolicies: [fifo]\n", "bad.trace:1"),
        ("trace: {trace}\ncluster: '4:4:4'\ngpus_per_node: '3'\npolicies: [fifo]\n", "per node"),
    ],
)
def test_bad_spec_exits_2_before_any_request(
    tmp_path: pathlib.Path, spec_text: str, needle: str
) -> None:
    # What every cell would find wrong is found here, once, not in every pod.
    bad = tmp_path / "bad.trace"
    bad.write_text("not a trace\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text.format(trace=TRACES["D1"], bad=bad))
    # A kubeconfig that does not exist: reaching for it would be exit 1, not 2.
    res = walras(
        ["simulate", "sweep", str(spec), "--on-cluster", "--kubeconfig", "/nonexistent"], {}
    )
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr
    assert "Traceback" not in res.stderr


def test_unreachable_cluster_exits_1_with_one_line(tmp_path: pathlib.Path) -> None:
    spec = write_spec(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    res = walras(
        ["simulate", "sweep", str(spec), "--on-cluster", "--kubeconfig", str(kubeconfig)], {}
    )
    assert res.returncode == 1, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "cannot reach the Kubernetes API server" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--parallelism", "0"], "--parallelism must be >= 1"),
        (["--cell", "0"], "--cell and --on-cluster"),
    ],
)
def test_bad_cluster_options_exit_2(tmp_path: pathlib.Path, args: list[str], needle: str) -> None:
    spec = write_spec(tmp_path)
    res = walras(["simulate", "sweep", str(spec), "--on-cluster", *args], {})
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr


def test_cluster_options_need_a_sweep() -> None:
    res = walras(["simulate", str(TRACES["D1"]), "--on-cluster"], {})
    assert res.returncode == 2, res.stderr
    assert "--on-cluster: only with `walras simulate sweep SPEC.yaml`" in res.stderr

"""The operator also runs under kopf's own CLI: ``kopf run -m walras.operator.kopf_entry``.

Configuration comes from the ``WALRAS_*`` variables; the test checks that a job gets scheduled
(pods bound, status Running), i.e. the same watchers and round loop are wired up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from operator_helpers import (
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow


def test_kopf_run_schedules_a_job(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-kopf")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "g", "g", 1, 4)
    create_pool(kube, pool_manifest("g", "g"))
    create_job(kube, namespace, job_manifest("train", {"g": 1.0}, replicas=2))
    env = {
        **os.environ,
        "WALRAS_KUBECONFIG": control_plane.admin_kubeconfig,
        "WALRAS_LEADER_ELECT": "false",
        "WALRAS_ROUND_SECONDS": "2",
        "WALRAS_POLICY_ARGS": "price-discovery.backend=numpy",
    }
    log = tmp_path / "kopf.log"
    command = [
        sys.executable,
        "-m",
        "kopf",
        "run",
        "--standalone",
        "--all-namespaces",
        "-m",
        "walras.operator.kopf_entry",
    ]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:

        def running() -> bool:
            assert process.poll() is None, log.read_text()
            status = get_job(kube, namespace, "train").get("status") or {}
            bound = [p for p in list_pods(kube, namespace, "train") if p["spec"].get("nodeName")]
            return status.get("phase") == "Running" and len(bound) == 2

        wait_for(running, 90, "kopf run to schedule the job")
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        devcluster.reset(kube)

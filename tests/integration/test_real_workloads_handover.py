"""The hand-over on real nodes: a gang that ignores SIGTERM holds its GPUs until the kubelet
kills it at the end of its grace period, and the next gang starts as soon as they are free.

This needs the operator's side of the contract in ``docs/workloads.md`` ("where the next gang
starts": GPUs of terminating pods are held back until free, and the next gang is placed as soon
as they are). Until the operator has it (its ``--min-run-seconds`` flag is part of the same
change), the module skips, saying so; without it, the next gang's pods reach the kubelet while
the devices are still held and its device manager refuses them.

Oracles: the runtimes' own container lists with the devices each container holds, sampled every
half second (:class:`walras.testing.runtime_observer.Observer`), and the pods'
``deletionTimestamp``, which the API server sets to the moment of deletion plus the grace period.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    CRDS,
    create_job,
    create_pool,
    get_job,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster, realnodes
from walras.testing.reference_jobs import setup_namespace, train_job
from walras.testing.runtime_observer import Observer

pytestmark = pytest.mark.slow

ROUND_S = 15.0
GRACE_S = 6


def _operator_keeps_gpus_of_terminating_pods() -> bool:
    help_text = subprocess.run(
        [sys.executable, "-c", "from walras.cli import main; main()", "operator", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    return "--min-run-seconds" in help_text


@pytest.fixture(scope="module", autouse=True)
def _contract() -> None:
    if not _operator_keeps_gpus_of_terminating_pods():
        pytest.skip(
            "the operator does not hold the GPUs of terminating pods back yet "
            "(docs/workloads.md, 'Where the next gang starts')"
        )


@pytest.fixture(scope="module")
def api(real_cluster: realnodes.RealCluster) -> Iterator[Any]:
    client = real_cluster.control_plane.admin_client()
    devcluster.install_crds(client, CRDS)
    try:
        create_pool(client, pool_manifest("real-a100", "fake-a100"))
    except ApiException as exc:  # created by another module of the session: same selector
        if exc.status != 409:
            raise
    try:
        yield client
    finally:
        client.close()


def _when(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_ignored_sigterm_is_killed_at_its_grace_period_and_the_next_gang_follows(
    api: Any, real_cluster: realnodes.RealCluster, tmp_path: Path
) -> None:
    ns = devcluster.unique_name("rw-handover")
    devcluster.create_namespace(api, ns)
    setup_namespace(api, ns)
    observer = Observer(real_cluster.control_plane, real_cluster.nodes, ns, interval=0.5)
    observer.start()
    # Both gangs take all 8 GPUs, so the second runs only on the first's devices.
    stubborn = train_job("stubborn", tmp_path / "stubborn", 10**9, gpus_per_pod=4, grace_s=GRACE_S)
    container = stubborn["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python3", "-c"]
    container["args"] = [
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "while True:\n"
        "    time.sleep(0.1)\n"
    ]
    follower = train_job("follower", tmp_path / "follower", 2000, gpus_per_pod=4)
    op = None
    try:
        create_job(api, ns, stubborn)
        op = start_operator(real_cluster.control_plane, tmp_path, round_seconds=ROUND_S)
        wait_for(
            lambda: any(
                c.pod.startswith("stubborn-")
                for s in observer.samples[-1:]
                for cs in s.containers.values()
                for c in cs
            ),
            180,
            "the stubborn gang to run",
        )
        create_job(api, ns, follower)
        wait_for(
            lambda: (get_job(api, ns, "follower").get("status") or {}).get("phase") == "Succeeded",
            300,
            "the follower to run and finish",
        )
    finally:
        if op is not None:
            op.terminate()
        time.sleep(1.0)
        observer.stop()
        devcluster.delete_namespace(api, ns, timeout=120)
    assert not observer.errors, observer.errors
    assert observer.over_committed({n.name: n.gpus for n in real_cluster.nodes}) == []
    first = observer.starts("stubborn")[0]
    assert first.deletion, "the stubborn gang was never preempted"
    killed_at = _when(first.deletion)  # deletion + grace, as the API server computes it

    def seen(prefix: str) -> list[float]:
        return [
            s.at
            for s in observer.samples
            if any(c.pod.startswith(prefix) for cs in s.containers.values() for c in cs)
        ]

    stubborn_seen = [t for t in seen(f"stubborn-r{first.round}-")]
    follower_seen = seen("follower-")
    assert follower_seen, [p for p in observer.pods.values() if p.job == "follower"]
    # It ran to the end of its grace period (it ignored SIGTERM): seen running within one
    # sampling interval plus the timestamp's one-second resolution of the kill time ...
    assert max(stubborn_seen) >= killed_at - 1.0 - observer.interval
    # ... and the follower's first container ran after it was gone (the devices were free), and
    # within the same round, not a round later.
    assert min(follower_seen) > max(stubborn_seen)
    assert min(follower_seen) - max(stubborn_seen) < ROUND_S
    # Its pods were never refused by a kubelet (no UnexpectedAdmissionError).
    assert all(p.phase != "Failed" for p in observer.pods.values() if p.job == "follower")

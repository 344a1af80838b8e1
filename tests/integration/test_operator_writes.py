"""Writes proportional to change, on the real local control plane.

Six single-GPU jobs on two 4-GPU nodes of one pool: everything fits, so once every pod runs no
job's visible status (phase, GPU type, share, conditions) changes from round to round. Oracles
are counts, read from the operator's own per-round report (one JSON log line per round):

- steady rounds patch no status, create and delete no pod, and write no history shard (no job's
  running state changed, so its persisted record still extrapolates exactly);
- the schedule history is in one ConfigMap of the namespace and holds every job;
- a job arriving changes only its own status and its pool's: the round patches at most 2;
- a restarted operator adopts the persisted history: it writes no history shard (a history it
  had rebuilt differently would differ from the persisted anchors and be written); it stamps
  every status once in its first round (its round number), and none after.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from operator_helpers import (
    alive,
    create_job,
    create_nodes,
    create_pool,
    install,
    job_manifest,
    list_jobs,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.operator import history_store
from walras.testing import devcluster

pytestmark = pytest.mark.slow

ROUND_LINE = re.compile(r"round (\{.*\})\s*$")
STEADY = 3  # rounds observed once everything runs


def reports(log: str) -> list[dict[str, Any]]:
    return [json.loads(m.group(1)) for m in map(ROUND_LINE.search, log.splitlines()) if m]


def all_running(kube: Any, namespace: str, jobs: int) -> bool:
    bound = [p for p in list_pods(kube, namespace) if alive(p) and p["spec"].get("nodeName")]
    phases = [(j.get("status") or {}).get("phase") for j in list_jobs(kube, namespace)]
    return len(bound) == jobs and phases == ["Running"] * jobs


def history_records(kube: Any, namespace: str) -> dict[str, Any]:
    name = f"{history_store.PREFIX}0"
    cm = devcluster.request(kube, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    assert cm["metadata"]["labels"] == {history_store.LABEL: history_store.LABEL_VALUE}
    return history_store.decode(cm["binaryData"][history_store.KEY])[1]


def settle(op: Any, kube: Any, namespace: str, jobs: int) -> list[dict[str, Any]]:
    """Wait until every job runs, then return the reports of STEADY further full rounds."""
    wait_for(lambda: all_running(kube, namespace, jobs), 90, "every job running")
    # One more round so that every status reflects the bindings the watch delivered.
    start = len(reports(op.log_text())) + 1
    wait_for(lambda: len(reports(op.log_text())) >= start + STEADY, 90, "steady rounds")
    return [r for r in reports(op.log_text())[start:] if not r["incremental"]]


def test_steady_rounds_write_nothing_and_restart_adopts_the_history(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-writes")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "w", "g", 2, 4)
    create_pool(kube, pool_manifest("g", "g"))
    for i in range(6):
        create_job(kube, namespace, job_manifest(f"job-{i}", {"g": 1.0}))
    op = start_operator(control_plane, tmp_path, round_seconds=1.0, name="first")
    second = None
    try:
        steady = settle(op, kube, namespace, 6)
        assert steady, "no full round observed"
        for rep in steady:
            assert rep["status_patches"] == 0, rep
            assert (rep["creates"], rep["deletes"], rep["history_writes"]) == (0, 0, 0), rep
            assert rep["errors"] == 0, rep
        uids = {j["metadata"]["uid"] for j in list_jobs(kube, namespace)}
        records = history_records(kube, namespace)
        assert set(records) == uids
        assert all(r.get("g") == "g" for r in records.values())

        # One arrival: its own status and its pool's change, nobody else's.
        seen = len(reports(op.log_text()))
        create_job(kube, namespace, job_manifest("late", {"g": 1.0}))
        wait_for(lambda: all_running(kube, namespace, 7), 90, "the late job running")
        arrival = reports(op.log_text())[seen:]
        assert sum(r["status_patches"] for r in arrival if r["creates"]) <= 2, arrival

        settle(op, kube, namespace, 7)
        op.terminate()
        before = history_records(kube, namespace)
        second = start_operator(control_plane, tmp_path, round_seconds=1.0, name="second")
        wait_for(lambda: len(reports(second.log_text())) >= 3, 90, "three rounds after restart")
        after = reports(second.log_text())
        assert after[0]["status_patches"] == 7 + 1, after[0]  # every job and the pool, once
        for rep in after[1:]:
            assert rep["status_patches"] == 0, rep
        for rep in after:
            assert (rep["creates"], rep["deletes"], rep["history_writes"]) == (0, 0, 0), rep
        # Nothing was rewritten: the persisted records are the ones the first operator left.
        assert history_records(kube, namespace) == before
        assert second.alive()
    finally:
        op.terminate()
        if second is not None:
            second.terminate()
        devcluster.reset(kube)


def test_restart_continues_elapsed_time(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    """Oversubscribed (3 jobs, 2 GPUs): slices rotate, so records are rewritten; after a restart
    the persisted elapsed time keeps growing from where it was (never reset to 0)."""
    install(kube)
    namespace = devcluster.unique_name("t-hist")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "h", "g", 1, 2)
    create_pool(kube, pool_manifest("g", "g"))
    for i in range(3):
        create_job(kube, namespace, job_manifest(f"job-{i}", {"g": 1.0}))
    op = start_operator(control_plane, tmp_path, round_seconds=1.0, name="first", wait_rounds=4)
    second = None
    try:
        op.kill()
        before = history_records(kube, namespace)
        t_kill = time.time()
        second = start_operator(control_plane, tmp_path, round_seconds=1.0, name="second")

        def rewritten() -> dict[str, Any] | None:
            now = history_records(kube, namespace)
            return now if any(now[u].get("a") != before[u].get("a") for u in now) else None

        after = wait_for(rewritten, 90, "a history record rewritten after the restart")
        for uid, rec in after.items():
            if rec.get("a") == before[uid].get("a"):
                continue
            # Elapsed grows by exactly the time between the two accountings (infinite
            # half-life; the job is eligible throughout), across the crash. Tolerance: three
            # values each rounded to 1 ms.
            expected = before[uid]["e"] + rec["a"] - before[uid]["a"]
            assert rec["e"] == pytest.approx(expected, abs=0.0015), (uid, before, after)
            assert rec["a"] > t_kill
    finally:
        op.kill()
        if second is not None:
            second.terminate()
        devcluster.reset(kube)

"""HadarE on the local control plane: a forkable job runs as copies on two GPU types at once.

``walras operator --policy hadare`` with one 2-GPU V100 node and one 2-GPU K80 node. ``forked``
(``spec.forkable: true``, one pod per gang, 2 work/s on V100 and 1 on K80) and ``solo`` (not
forkable, 1 work/s anywhere) arrive together. Hadar admits both (one GPU each); HadarE then gives
``forked`` one copy on every node with room where it has none, so it runs on both types at once.

Checked, from the API objects only:

- ``forked``'s first round has one pod per node, on both types, and every pod carries the fork
  environment of ``docs/forking.md``: distinct ``WALRAS_FORK_INDEX`` ``0 … COUNT−1``,
  ``WALRAS_FORK_COUNT`` = the number of copies, ``WALRAS_JOB_NAME``; the copies'
  ``WALRAS_FORK_STEPS`` add up to the job's remaining work (its whole ``totalWork`` in its first
  round, nothing done yet) and stand in the ratio of the copies' throughputs (both start in that
  round, so both lose the same restart time);
- ``forked`` completes by accounting (``TotalWorkDone``) with ``workDone ≥ totalWork`` and
  ``workDone`` larger than any single gang could have done: one gang earns at most its time held
  (``Σ status.received``) × the job's fastest throughput, so the excess proves that the copies'
  progress was summed;
- ``solo`` is never copied: in every round it is seen, it holds at most ``replicas`` pods and none
  carries the fork environment.

A second test checks the other way a job's progress is known: copies that report their steps
(``walras.dev/steps-done``, ``walras.core.progress``). A forked job on a 1-GPU V100 node and a
1-GPU K80 node runs one copy on each; each copy's pod reports the steps it ran, 60 % and 40 % of
``totalWork``. Neither alone reaches ``totalWork``, their sum does: the job completes, from the
reported steps.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from operator_helpers import (
    alive,
    condition,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    list_nodes,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.core import crd, progress
from walras.testing import devcluster

pytestmark = pytest.mark.slow

FORKED_RATES = {"v100": 2.0, "k80": 1.0}
TOTAL_WORK = 40.0
FORK_VARS = ("WALRAS_FORK_INDEX", "WALRAS_FORK_COUNT", "WALRAS_FORK_STEPS", "WALRAS_JOB_NAME")


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for container in pod["spec"]["containers"]:
        for item in container.get("env") or []:
            env[item["name"]] = str(item.get("value", ""))
    return env


def round_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"][crd.ANN_ROUND])


def test_forkable_job_runs_as_copies_and_completes_on_summed_work(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-fork")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "v100", "v100", 1, 2)
    create_nodes(kube, "k80", "k80", 1, 2)
    create_pool(kube, pool_manifest("v100", "v100"))
    create_pool(kube, pool_manifest("k80", "k80"))
    node_type = {
        n["metadata"]["name"]: n["metadata"]["labels"][devcluster.GPU_TYPE_LABEL]
        for n in list_nodes(kube)
    }
    op = start_operator(control_plane, tmp_path, policy="hadare", round_seconds=2.0)
    # The jobs arrive once the operator serves, so that the watch below sees the forked job's
    # first round (its pods are replaced when its copies change).
    forked = job_manifest("forked", FORKED_RATES, total_work=TOTAL_WORK)
    forked["spec"]["forkable"] = True
    create_job(kube, namespace, forked)
    # `solo` never finishes during the test: it is there to be (not) copied.
    create_job(kube, namespace, job_manifest("solo", {"v100": 1.0, "k80": 1.0}, total_work=1.0e9))
    seen: dict[str, dict[int, list[dict[str, Any]]]] = {"forked": {}, "solo": {}}

    def watch() -> None:
        """Record every pod seen, by job and round (pods of a round are created together)."""
        for job in seen:
            for pod in list_pods(kube, namespace, job):
                by_round = seen[job].setdefault(round_of(pod), [])
                names = [p["metadata"]["name"] for p in by_round]
                if pod["metadata"]["name"] not in names:
                    by_round.append(pod)
                elif pod["spec"].get("nodeName"):
                    # Pods are created, then bound: keep the newest view so the node shows.
                    by_round[names.index(pod["metadata"]["name"])] = pod

    def phase(name: str) -> str:
        return str((get_job(kube, namespace, name).get("status") or {}).get("phase"))

    try:

        def done() -> bool:
            watch()
            return phase("forked") == "Succeeded"

        wait_for(done, 120, "the forked job to succeed")
        watch()

        # Copies on both types in its first round, with the fork environment.
        # (The first round whose pods were all seen bound: a pod is created, then bound.)
        bound = [
            r for r, pods in seen["forked"].items() if all(p["spec"].get("nodeName") for p in pods)
        ]
        first = seen["forked"][min(bound)]
        nodes = [p["spec"]["nodeName"] for p in first]
        assert sorted(node_type[n] for n in nodes) == ["k80", "v100"], nodes
        envs = [env_of(p) for p in first]
        for env in envs:
            assert set(FORK_VARS) <= set(env), env
            assert env["WALRAS_FORK_COUNT"] == str(len(first))
            assert env["WALRAS_JOB_NAME"] == "forked"
        assert sorted(int(e["WALRAS_FORK_INDEX"]) for e in envs) == list(range(len(first)))
        steps = {
            node_type[n]: float(e["WALRAS_FORK_STEPS"]) for n, e in zip(nodes, envs, strict=True)
        }
        # Six significant digits are written (docs/forking.md): relative 1e-5 covers the rounding.
        assert sum(steps.values()) == pytest.approx(TOTAL_WORK, rel=1e-5)
        assert steps["v100"] / steps["k80"] == pytest.approx(
            FORKED_RATES["v100"] / FORKED_RATES["k80"], rel=1e-5
        )

        # Completed by the summed work of its copies.
        status = get_job(kube, namespace, "forked")["status"]
        assert condition(get_job(kube, namespace, "forked"), "Allocated")["reason"] == (
            "TotalWorkDone"
        )
        work = float(status["workDone"])
        held = sum(float(v) for v in (status.get("received") or {}).values())
        assert work >= TOTAL_WORK
        assert work > held * max(FORKED_RATES.values()), (work, held)

        # `solo` is never copied.
        assert seen["solo"], "solo never ran"
        for pods in seen["solo"].values():
            for pod in pods:
                assert not set(FORK_VARS) & set(env_of(pod)), env_of(pod)
            assert len(pods) <= 1, [p["metadata"]["name"] for p in pods]
        assert all(alive(p) for p in list_pods(kube, namespace, "solo"))
        assert phase("solo") == "Running"
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)


REPORTED_WORK = 3000.0


def test_forked_copies_reported_steps_are_summed(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-forkp")
    devcluster.create_namespace(kube, namespace)
    create_nodes(kube, "v100", "v100", 1, 1)
    create_nodes(kube, "k80", "k80", 1, 1)
    create_pool(kube, pool_manifest("v100", "v100"))
    create_pool(kube, pool_manifest("k80", "k80"))
    # 15 steps/s on both copies: accounting alone would need 200 s, far beyond this test.
    manifest = job_manifest("reported", {"v100": 10.0, "k80": 5.0}, total_work=REPORTED_WORK)
    manifest["spec"]["forkable"] = True
    op = start_operator(control_plane, tmp_path, policy="hadare", round_seconds=2.0)
    try:
        created = time.monotonic()
        create_job(kube, namespace, manifest)

        def copies() -> list[dict[str, Any]]:
            pods = [
                p
                for p in list_pods(kube, namespace, "reported")
                if alive(p) and p["spec"].get("nodeName")
            ]
            return pods if len(pods) == 2 else []

        pods = wait_for(copies, 60, "two copies of the forked job to run")
        # A first reading may not imply more than 10× the job's fastest rate since it was created
        # (progress.ABSURD_FACTOR): 60 % of 3,000 steps at ≤ 100 steps/s needs 18 s.
        fastest = 10.0
        wait = 0.6 * REPORTED_WORK / (progress.ABSURD_FACTOR * fastest)
        time.sleep(max(0.0, wait + 2.0 - (time.monotonic() - created)))
        for pod, share in zip(pods, (0.6, 0.4), strict=True):
            devcluster.request(
                kube,
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                body={
                    "metadata": {
                        "annotations": {progress.ANN_STEPS_DONE: str(int(share * REPORTED_WORK))}
                    }
                },
                content_type="application/merge-patch+json",
            )

        def phase() -> str:
            return str((get_job(kube, namespace, "reported").get("status") or {}).get("phase"))

        wait_for(lambda: phase() == "Succeeded", 60, "the forked job to complete")
        done = get_job(kube, namespace, "reported")
        allocated = condition(done, "Allocated")
        assert allocated is not None and allocated["reason"] == "TotalWorkDone"
        assert "(reported)" in allocated["message"], allocated
        assert float(done["status"]["progress"]["stepsDone"]) == REPORTED_WORK
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

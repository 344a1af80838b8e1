"""Bad input the API server accepts but a kubelet refuses: a job whose pod never starts.

kwok nodes run no containers, so the kubelet's verdict is written by hand: the test patches the
broken job's pod status with the waiting reason a real kubelet reports for an image missing on the
node (ErrImageNeverPull). Oracle, from the rule in ``walras.core.admission``: within two rounds
the job gets ``Admitted=False`` with reason PodsNotStarting and a message naming the container,
the reason and the kubelet's message; its pod is deleted, so a second job that needs the same
GPUs runs; one Warning Event names it; no pod of it is placed again while it is held (the hold
lasts ``STUCK_FIRST_S``, far longer than this test).
"""

from __future__ import annotations

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
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster

pytestmark = pytest.mark.slow

NEVER_PULL = 'Container image "localhost/missing:1" is not present with pull policy of Never'
ROUND_S = 2.0


def test_a_pod_that_never_starts_is_named_deleted_and_its_gpus_go_to_others(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    create_nodes(kube, "v100", "v100", 1, 4)
    create_pool(kube, pool_manifest("v100", "v100"))
    ns = devcluster.unique_name("t-stuck")
    devcluster.create_namespace(kube, ns)
    op = start_operator(control_plane, tmp_path, round_seconds=ROUND_S)
    try:
        # Both jobs need the node's 4 GPUs: while the broken one holds them the good one waits.
        create_job(kube, ns, job_manifest("broken", {"v100": 1.0}, gpus=4))

        def running() -> dict[str, Any]:
            pods = [p for p in list_pods(kube, ns, "broken") if p["spec"].get("nodeName")]
            assert pods and (pods[0].get("status") or {}).get("phase") == "Running"
            return pods[0]

        pod = wait_for(running, 60, "the broken job's pod on its node")
        name = pod["metadata"]["name"]
        # What a kubelet reports when the image is absent and the pull policy is Never.
        waiting = {"waiting": {"reason": "ErrImageNeverPull", "message": NEVER_PULL}}
        devcluster.request(
            kube,
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            body={"status": {"containerStatuses": [{"name": "train", "state": waiting}]}},
            content_type="application/strategic-merge-patch+json",
        )
        start = op.full_rounds()
        create_job(kube, ns, job_manifest("good", {"v100": 1.0}, gpus=4))

        def admitted() -> dict[str, Any] | None:
            return condition(get_job(kube, ns, "broken"), "Admitted")

        def named() -> bool:
            found = admitted()
            return found is not None and found["reason"] == "PodsNotStarting"

        # The report is on the API server once the PATCH returns. The first round that reads it
        # holds the job and writes the condition: a report landing while a full round runs is
        # read by the next one (or by an incremental round the good job's arrival runs in
        # between), so at the latest before a third full round ends after it; a round counts
        # once its log line is written, so the poll may see one more. Counted in rounds, not
        # seconds, so a loaded machine slows both sides alike; the wall limit only ends a hang.
        wait_for(lambda: named() or op.full_rounds() - start > 2, 120, "the condition")
        assert named(), f"{admitted()} after {op.full_rounds() - start} full rounds"
        held = admitted()
        assert held is not None and held["status"] == "False"
        assert f"container train: ErrImageNeverPull: {NEVER_PULL}" in held["message"]

        def good_runs() -> bool:
            pods = [p for p in list_pods(kube, ns, "good") if p["spec"].get("nodeName")]
            assert (
                pods and (get_job(kube, ns, "good").get("status") or {}).get("phase") == "Running"
            )
            return True

        wait_for(good_runs, 60, "the good job on the freed GPUs")
        assert [p for p in list_pods(kube, ns, "broken") if alive(p)] == []
        rounds = op.rounds()
        wait_for(lambda: op.rounds() >= rounds + 2, 30, "more rounds")
        # Held: never placed again, and named by one Warning Event.
        assert [p for p in list_pods(kube, ns, "broken") if alive(p)] == []
        events = devcluster.request(kube, "GET", f"/api/v1/namespaces/{ns}/events")["items"]
        reasons = [(e["involvedObject"]["name"], e["reason"]) for e in events]
        assert reasons.count(("broken", "PodsNotStarting")) == 1, reasons
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

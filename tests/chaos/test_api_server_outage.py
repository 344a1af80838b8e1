"""The API server goes away under a running operator: once for 20 s, then for 2 s three times in
a row. Afterwards a new job gets its status within a bounded number of operator rounds, and the
invariants hold (``walras.testing.invariants``: no node over its GPUs, no duplicate or partial
gang, no lost job, no traceback in the operator's log).

The bounds, in full rounds of ``ROUND_S`` = 10 s (rounds, not seconds, so a slow machine does not
make the test flaky; the operator's own full rounds are the clock, not its incremental rounds,
which run on events: ``chaos_helpers.rounds_until_status``):

- A watch that fails waits ``1 · 2^min(n, 5)`` s after its n-th failure in a row
  (``walras.kube.watch``), so after an outage of D seconds it retries at most D + 1 s after the
  server is back, and never later than its longest pause, 32 s. After the 20 s outage (which,
  with the API server's own stop and start, lasts longer than 20 s), the job's status therefore
  comes within 32 s of recovery plus two rounds: ⌈32 / 10⌉ + 2 = 6 rounds.
- The back-off starts over once the server answers again. Each 2 s outage (once the operator
  has caught up with the previous one) then costs at most its own length + 1 s of waiting, so a
  job created after it gets its status within two rounds (20 s ≥ the outage with the API
  server's stop and start, plus 1 s). Without that reset the pauses would grow from one outage
  to the next (1, 2, 4 s, then 8, 16 s, then 32 s) and the third job's status would wait.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from chaos_helpers import assert_invariants, gpu_cluster, has_status, operator, rounds_until_status
from operator_helpers import create_job, job_manifest, wait_for

from walras.testing import devcluster

ROUND_S = 10.0
LONG_PAUSE_S = 32.0


# Several minutes on two shared cores (20 operator starts; outages of half a minute each).
@pytest.mark.timeout(900)
def test_the_operator_catches_up_after_api_server_outages(
    chaos_plane: devcluster.ControlPlane, chaos_api: Any, tmp_path: Path
) -> None:
    ns = devcluster.unique_name("outage")
    devcluster.create_namespace(chaos_api, ns)
    gpu_type = gpu_cluster(chaos_api, ns, nodes=4, gpus=8)
    replicas = {}
    for i in range(6):
        create_job(chaos_api, ns, job_manifest(f"before-{i}", {gpu_type: 1.0}, replicas=2))
        replicas[(ns, f"before-{i}")] = 2
    op = operator(chaos_plane, tmp_path, identity="outage", round_seconds=ROUND_S)
    try:
        wait_for(
            lambda: all(has_status(chaos_api, ns, f"before-{i}") for i in range(6)),
            120,
            "every job's first status",
        )
        t0 = time.monotonic()
        devcluster.restart_component(chaos_plane, "kube-apiserver", down_s=20.0)
        back = time.monotonic()
        limit = int(-(-LONG_PAUSE_S // ROUND_S)) + 2
        used = rounds_until_status(op, chaos_api, ns, "after-long", gpu_type, limit)
        print(
            f"20 s outage: API server back {back - t0:.1f} s after the stop; new job's status "
            f"{time.monotonic() - back:.1f} s later, after {used} rounds"
        )
        assert used <= limit, f"no status within {limit} rounds of the 20 s outage"
        replicas[(ns, "after-long")] = 2

        # Three short outages in a row, each after the operator caught up with the last one
        # (its watches resumed: a new job got its status). The back-off starts over each time.
        for i in range(3):
            t0 = time.monotonic()
            devcluster.restart_component(chaos_plane, "kube-apiserver", down_s=2.0)
            back = time.monotonic()
            used = rounds_until_status(op, chaos_api, ns, f"after-short-{i}", gpu_type, 2)
            print(
                f"2 s outage {i + 1}: API server back {back - t0:.1f} s after the stop; new "
                f"job's status {time.monotonic() - back:.1f} s later, after {used} rounds"
            )
            assert used <= 2, f"no status within two rounds of 2 s outage {i + 1}"
            replicas[(ns, f"after-short-{i}")] = 2
        # Every job is still there with a status; the standing invariants hold after a round.
        start = op.rounds()
        wait_for(lambda: op.rounds() >= start + 1, 120, "one more round")
        assert all(has_status(chaos_api, ns, name) for _, name in replicas)
        assert_invariants(chaos_api, ns, replicas, op)
        assert op.alive()
    finally:
        op.terminate()

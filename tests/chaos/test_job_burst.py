"""2,000 FungibleJobs created in one burst: every one has a status within three rounds of the
burst's end, and the operator's memory stays within a bound derived from the objects it holds.

Rounds are counted by the operator's own counter (``ROUND_S`` = 10 s each). Three rounds: the
jobs arrive over the burst and each poke runs an incremental round; one full round after the
last arrival plans and writes them all (a cold round of 5,000 jobs takes under a minute, of
2,000 well under a round here plus its writes), one to spare for a status patch that the API
server answered late, and one for a round in progress when the burst ended.

The memory bound (resident set, ``/proc/PID/status``): per job the operator keeps a few copies of
what the API server sends it: its store holds the FungibleJob and its pod as parsed from the
watch, the frozen snapshot and the parsed ``JobSpec`` reference those, and the last status it
wrote, the schedule history and the Event it posted are each smaller than the job. ``COPIES`` =
10 copies of (job with its status + its pod), each sized here the way the operator holds it (a
Python object tree from ``json.loads``, measured with ``sys.getsizeof`` over the tree), bounds
the growth from the idle operator to the one holding every job.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos_helpers import assert_invariants, gpu_cluster, operator
from operator_helpers import create_job, job_manifest, list_pods, wait_for

from walras.testing import devcluster, invariants

JOBS = 2000
ROUND_S = 10.0
COPIES = 10


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def deep_size(obj: Any) -> int:
    """``sys.getsizeof`` over a JSON object tree (dicts, lists, strings, numbers)."""
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k) + deep_size(v) for k, v in obj.items())
    elif isinstance(obj, list):
        size += sum(deep_size(v) for v in obj)
    return size


def test_two_thousand_jobs_in_one_burst(
    chaos_plane: devcluster.ControlPlane, chaos_api: Any, tmp_path: Path
) -> None:
    ns = devcluster.unique_name("burst")
    devcluster.create_namespace(chaos_api, ns)
    gpu_type = gpu_cluster(chaos_api, ns, nodes=10, gpus=8)
    op = operator(chaos_plane, tmp_path, identity="burst", round_seconds=ROUND_S)
    try:
        idle = rss_bytes(op.process.pid)
        names = [f"b{i}" for i in range(JOBS)]
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda n: create_job(chaos_api, ns, job_manifest(n, {gpu_type: 1.0})), names
                )
            )
        start = op.rounds()

        def all_statuses() -> bool:
            return not invariants.lost_jobs(chaos_api, ns, names)

        wait_for(lambda: all_statuses() or op.rounds() > start + 3, 900, "every job's status")
        lost = invariants.lost_jobs(chaos_api, ns, names)
        assert not lost, f"{len(lost)} jobs without a status after three rounds: {lost[:5]}"
        print(f"burst: every status after {op.rounds() - start} rounds")
        held = rss_bytes(op.process.pid)
        job = invariants.jobs(chaos_api, ns)[names[0]]
        pods = list_pods(chaos_api, ns)
        pod = pods[0] if pods else {}
        per_job = deep_size(json.loads(json.dumps(job))) + deep_size(json.loads(json.dumps(pod)))
        bound = COPIES * per_job * JOBS
        print(
            f"burst: RSS {idle / 2**20:.0f} MiB idle, {held / 2**20:.0f} MiB with {JOBS} jobs "
            f"(+{(held - idle) / 2**20:.0f} MiB; bound +{bound / 2**20:.0f} MiB)"
        )
        assert held - idle <= bound
        assert_invariants(chaos_api, ns, {(ns, n): 1 for n in names}, op)
    finally:
        op.terminate()
        devcluster.delete_namespace(chaos_api, ns, timeout=300)

"""Two replicas under leader election: the leader is SIGTERMed, then (the first one back as the
standby) the new leader is SIGKILLed. Each time the standby takes the Lease and runs rounds.

Oracle: the Lease's own record (times the replicas stamp on the same host) and the replicas'
round counters; the bounds come from the election protocol (``walras.operator.leader``):

- SIGTERM: the leader releases the Lease (empty holder) as it stops; the standby, polling every
  ``RETRY_S`` = min(renew, 2 s), takes it at its next poll: acquireTime − the release's
  renewTime ≤ ``RETRY_S`` + ``API_S``.
- SIGKILL: nobody releases; the standby takes over once the record it saw last is
  ``LEASE_S`` old on its own clock: acquireTime − the last renewTime ≤ ``LEASE_S`` + ``RETRY_S``
  + ``API_S``, and never less than the leader's renew deadline (2/3 · ``LEASE_S``: no overlap);
  measured from the last renewal the test read before the kill, the leader may have renewed
  once more (``RENEW_S`` = 5 s later) before it died.

``API_S`` = 2 s covers one Lease read and one write on a loaded machine (the elector's own
request timeout is its renew period, 5 s, so a slower answer is counted a failure anyway).
The new leader's first round ends before its rounds counter moves, which the test waits for.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from chaos_helpers import LEASE_NAMESPACE, assert_invariants, gpu_cluster, operator
from operator_helpers import create_job, job_manifest, wait_for

from walras.testing import devcluster

LEASE_S, RENEW_S, RETRY_S, API_S = 15.0, 5.0, 2.0, 2.0
LEASE = "chaos-replicas"


def lease(api: Any) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE}"
    spec: dict[str, Any] = devcluster.request(api, "GET", path)["spec"]
    return spec


def stamp(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_the_standby_leads_after_the_leader_is_terminated_or_killed(
    chaos_plane: devcluster.ControlPlane, chaos_api: Any, tmp_path: Path
) -> None:
    ns = devcluster.unique_name("replicas")
    devcluster.create_namespace(chaos_api, ns)
    gpu_type = gpu_cluster(chaos_api, ns, nodes=2, gpus=4)
    for i in range(3):
        create_job(chaos_api, ns, job_manifest(f"j{i}", {gpu_type: 1.0}, replicas=2))

    def start(identity: str, leads: bool) -> Any:
        return operator(
            chaos_plane,
            tmp_path,
            identity=identity,
            round_seconds=5,
            lease=LEASE,
            wait_rounds=1 if leads else 0,
        )

    started = [start("replica-a", leads=True)]
    try:
        a = started[0]
        b = start("replica-b", leads=False)
        started.append(b)
        assert lease(chaos_api)["holderIdentity"] == "replica-a" and b.rounds() == 0
        # SIGTERM: a releases the Lease; b takes it at its next poll.
        a.terminate()
        released = lease(chaos_api)
        wait_for(lambda: lease(chaos_api).get("holderIdentity") == "replica-b", 60, "b to lead")
        taken = lease(chaos_api)
        waited = (stamp(taken["acquireTime"]) - stamp(released["renewTime"])).total_seconds()
        print(f"SIGTERM: the standby led {waited:.2f} s after the release")
        assert waited <= RETRY_S + API_S, waited
        wait_for(lambda: b.rounds() >= 1, 60, "b's first round")
        # a comes back as the standby; SIGKILL b: a waits the Lease out, then leads.
        a = start("replica-a", leads=False)
        started.append(a)
        assert a.rounds() == 0
        last = lease(chaos_api)
        b.kill()
        wait_for(lambda: lease(chaos_api).get("holderIdentity") == "replica-a", 60, "a to lead")
        taken = lease(chaos_api)
        waited = (stamp(taken["acquireTime"]) - stamp(last["renewTime"])).total_seconds()
        print(f"SIGKILL: the standby led {waited:.2f} s after the last renewal seen")
        # b may have renewed once more between that read and the kill (RENEW_S later).
        assert 2 / 3 * LEASE_S <= waited <= LEASE_S + RETRY_S + API_S + RENEW_S, waited
        wait_for(lambda: a.rounds() >= 1, 60, "a's first round as leader")
        assert taken["leaseTransitions"] == released.get("leaseTransitions", 0) + 2
        assert_invariants(chaos_api, ns, {(ns, f"j{i}"): 2 for i in range(3)}, a)
    finally:
        for op in started:
            op.terminate()
        devcluster.delete_namespace(chaos_api, ns)

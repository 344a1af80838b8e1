"""The round loop and a gang whose pods never start, against a scripted API (no Kubernetes).

Oracle: the rule of ``walras.core.admission`` read off the requests the loop sends. After the
watch reports a member waiting on ErrImageNeverPull, the next round deletes every member of the
gang, writes ``Admitted=False`` with reason PodsNotStarting and a message naming the container,
the kubelet's reason and message, posts one Warning Event, and creates nothing for the job until
``STUCK_FIRST_S`` has passed; then it places the gang again.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.unit.operator_fakes import FakeApi, gang_job, make_loop

from walras.core import admission
from walras.operator import handlers

NEVER_PULL = 'Container image "localhost/missing:1" is not present with pull policy of Never'


def stuck(manifest: dict[str, Any], waiting: str) -> dict[str, Any]:
    """The created pod as the watch would see it on its node, its container waiting."""
    obj = copy.deepcopy(manifest)
    obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
    obj["spec"]["nodeName"] = "n0"
    state = {"waiting": {"reason": waiting, "message": NEVER_PULL}}
    obj["status"] = {"phase": "Pending", "containerStatuses": [{"name": "c", "state": state}]}
    return obj


def test_a_gang_that_never_starts_is_deleted_named_and_held_until_its_back_off() -> None:
    api = FakeApi()
    clock = [1000.0]
    rounds = make_loop(api, clock=clock)
    watcher = handlers.Watcher(rounds.cache, rounds)
    watcher.apply("job", {"type": "ADDED", "object": gang_job("gang", "u1")})
    asyncio.run(rounds.run_round())
    members = sorted(api.names("create"))
    assert members == ["gang-r1-0", "gang-r1-1", "gang-r1-2"]
    for i, name in enumerate(members):
        # One member waits on a missing image; the others on their way to running.
        reason = "ErrImageNeverPull" if i == 1 else "ContainerCreating"
        watcher.apply("pod", {"type": "ADDED", "object": stuck(api.manifests[name], reason)})
    api.calls.clear()
    clock[0] = 1010.0
    asyncio.run(rounds.run_round())
    assert sorted(api.names("delete")) == members
    assert api.names("create") == [] and api.names("bind") == []
    cond = next(c for c in api.statuses["gang"]["conditions"] if c["type"] == "Admitted")
    assert (cond["status"], cond["reason"]) == ("False", "PodsNotStarting")
    assert f"container c: ErrImageNeverPull: {NEVER_PULL}" in cond["message"]
    assert [r for r, _ in api.events] == ["PodsNotStarting"]
    # Its pods gone, it sits out: no create, no second Event.
    for name in members:
        watcher.apply("pod", {"type": "DELETED", "object": stuck(api.manifests[name], "")})
    api.calls.clear()
    clock[0] = 1010.0 + admission.STUCK_FIRST_S - 1
    asyncio.run(rounds.run_round())
    assert api.names("create") == []
    assert [r for r, _ in api.events] == ["PodsNotStarting"]
    # After its back-off it is tried again (a fixed image would now start).
    clock[0] = 1010.0 + admission.STUCK_FIRST_S
    asyncio.run(rounds.run_round())
    assert len(api.names("create")) == 3

"""Status: ``Bound`` only when the whole gang is bound; empty pools reported."""

from __future__ import annotations

from typing import Any

import pytest
from filter_helpers import job_obj, node_obj, plan, pools

from walras.operator import status


def _conditions(core: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in core["conditions"]}


@pytest.mark.parametrize(
    ("bound", "state", "reason"),
    [(None, "False", "BindPending"), (1, "False", "BindPending"), (2, "True", "PodsBound")],
    ids=["planned-only", "half-gang", "whole-gang"],
)
def test_bound_only_when_the_whole_gang_is(bound: int | None, state: str, reason: str) -> None:
    job = job_obj("j", {"v100": 1.0})
    job["spec"]["replicas"] = 2
    planned = plan([*pools("v100"), ("node", node_obj("v0", "v100")), ("job", job)])
    sol = planned.solution
    jr = planned.realisation.jobs[sol.jobs[0].key]
    assert jr.group  # placed this round; the snapshot shows none of its pods bound
    core = status.solved_job_status(sol.jobs[0], 0, sol, jr, planned.view, False, bound=bound)
    got = _conditions(core)["Bound"]
    assert (got["status"], got["reason"]) == (state, reason)


def test_empty_pool_status_says_it_is_empty() -> None:
    planned = plan(
        [
            *pools("v100", "p100"),
            ("node", node_obj("v0", "v100")),
            ("job", job_obj("j", {"v100": 1.0})),
        ]
    )
    cores = status.pool_statuses(
        planned.snapshot, planned.view, planned.solution, planned.realisation.jobs, {}
    )
    empty = cores["p100"]
    assert (empty["nodes"], empty["capacity"]) == (0, 0)
    ready = _conditions(empty)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "NoNodes")
    assert ready["message"].startswith("empty: no node matches")
    full = cores["v100"]
    assert (full["nodes"], full["capacity"]) == (1, 4)
    assert _conditions(full)["Ready"]["status"] == "True"

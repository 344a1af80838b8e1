"""Readers shared by the tests that run the reference workload on real nodes under the operator
(``test_real_workloads.py``, ``test_real_adopted_jobs.py``; their fixtures ``api``, ``ns`` and
``observer`` are in this directory's ``conftest.py``): :func:`phase` and :func:`steps_done` of a
FungibleJob, :func:`cordon` of nodes.
"""

from __future__ import annotations

from typing import Any

from operator_helpers import get_job

from walras.testing import devcluster


def phase(api: Any, ns: str, name: str) -> str:
    """The FungibleJob's ``status.phase`` ('' before its first status)."""
    return str((get_job(api, ns, name).get("status") or {}).get("phase", ""))


def steps_done(api: Any, ns: str, name: str) -> float:
    """The FungibleJob's ``status.progress.stepsDone`` (0 before any report)."""
    status = get_job(api, ns, name).get("status") or {}
    return float((status.get("progress") or {}).get("stepsDone", 0))


def cordon(api: Any, nodes: list[str], cordoned: bool) -> None:
    for name in nodes:
        devcluster.request(
            api,
            "PATCH",
            f"/api/v1/nodes/{name}",
            body={"spec": {"unschedulable": cordoned}},
            content_type="application/merge-patch+json",
        )

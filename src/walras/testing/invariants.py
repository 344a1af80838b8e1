"""The invariants a scheduler must keep through faults, read off the API server (chaos tests).

- **No node over its GPUs**: :func:`walras.testing.devcluster.overcommitted_nodes` is empty.
- **No duplicate gang**: a job's live pods (neither being deleted nor finished) all belong to one
  round (one gang), and there are at most ``replicas`` of them.
- **No partial gang**: a gang (a job's live pods of one round) is bound whole or not at all;
  :func:`partial_gangs` lists those with some members bound and some not (a gang being committed
  is partial for the moment between its commit member and its last bind, so a test checks the
  gangs it saw partial again after a round, not at an arbitrary instant).
- **No lost job**: every FungibleJob created is still there and has a status.
- **No traceback** in the operator's log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from walras.testing import devcluster

BASE = "/apis/walras.dev/v1alpha1"
LABEL_JOB = "walras.dev/job"
ANN_ROUND = "walras.dev/round"

GangKey = tuple[str, str, int]  # namespace, job, round


def live(pod: Mapping[str, Any]) -> bool:
    """Neither being deleted nor finished."""
    phase = (pod.get("status") or {}).get("phase")
    return pod["metadata"].get("deletionTimestamp") is None and phase not in (
        "Succeeded",
        "Failed",
    )


def walras_pods(api_client: Any, namespace: str | None = None) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    items: list[dict[str, Any]] = devcluster.request(
        api_client, "GET", path, query={"labelSelector": LABEL_JOB}
    )["items"]
    return items


def gangs(pods: Iterable[Mapping[str, Any]]) -> dict[GangKey, list[Mapping[str, Any]]]:
    """Live Walras pods by (namespace, job, round)."""
    out: dict[GangKey, list[Mapping[str, Any]]] = {}
    for pod in pods:
        if not live(pod):
            continue
        meta = pod["metadata"]
        round_no = int((meta.get("annotations") or {}).get(ANN_ROUND) or 0)
        key = (meta["namespace"], (meta.get("labels") or {})[LABEL_JOB], round_no)
        out.setdefault(key, []).append(pod)
    return out


def partial_gangs(pods: Iterable[Mapping[str, Any]]) -> dict[GangKey, tuple[int, int]]:
    """Gangs with some live members bound and some not: ``{gang: (bound, members)}``."""
    out: dict[GangKey, tuple[int, int]] = {}
    for key, members in gangs(pods).items():
        bound = sum(bool((p.get("spec") or {}).get("nodeName")) for p in members)
        if 0 < bound < len(members):
            out[key] = (bound, len(members))
    return out


def duplicate_gangs(
    pods: Iterable[Mapping[str, Any]], replicas: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], list[int]]:
    """Jobs with live pods of more than one round, or more live pods than ``replicas``:
    ``{job: [rounds]}``."""
    rounds: dict[tuple[str, str], list[int]] = {}
    count: dict[tuple[str, str], int] = {}
    for (namespace, job, round_no), members in gangs(pods).items():
        rounds.setdefault((namespace, job), []).append(round_no)
        count[(namespace, job)] = count.get((namespace, job), 0) + len(members)
    return {
        job: sorted(found)
        for job, found in sorted(rounds.items())
        if len(found) > 1 or count[job] > replicas.get(job, count[job])
    }


def jobs(api_client: Any, namespace: str) -> dict[str, dict[str, Any]]:
    items = devcluster.request(api_client, "GET", f"{BASE}/namespaces/{namespace}/fungiblejobs")
    return {j["metadata"]["name"]: j for j in items["items"]}


def lost_jobs(api_client: Any, namespace: str, created: Iterable[str]) -> list[str]:
    """Jobs created that are gone or have no status yet."""
    present = jobs(api_client, namespace)
    return sorted(n for n in created if not (present.get(n) or {}).get("status"))


def tracebacks(log_text: str) -> list[str]:
    """The lines that start a Python traceback, with the line after the last frame."""
    lines = log_text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            tail = next((x for x in lines[i + 1 :] if not x.startswith(" ")), "")
            found.append(f"{line} ... {tail}")
    return found


def check(
    api_client: Any,
    namespace: str,
    replicas: Mapping[tuple[str, str], int],
    log_text: str = "",
) -> list[str]:
    """Every standing invariant (all but partial gangs, which a test checks per gang): a list
    of violations, empty when all hold."""
    problems: list[str] = []
    over = devcluster.overcommitted_nodes(api_client)
    if over:
        problems.append(f"nodes over their GPUs (requested, allocatable): {over}")
    dup = duplicate_gangs(walras_pods(api_client, namespace), replicas)
    if dup:
        problems.append(f"jobs with more than one live gang (their rounds): {dup}")
    for trace in tracebacks(log_text):
        problems.append(f"operator log: {trace}")
    return problems

"""What the chaos tests share: a GPU cluster in a namespace, the operator under leader election,
and waiting for a job's status counted in operator rounds (never a wall-clock bound)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from operator_helpers import (
    OperatorProcess,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    job_manifest,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.testing import devcluster, invariants

LEASE_NAMESPACE = "walras-system"


def gpu_cluster(api: Any, prefix: str, *, nodes: int, gpus: int) -> str:
    """``nodes`` kwok nodes of ``gpus`` GPUs of a type of their own, and its pool; the type."""
    gpu_type = f"{prefix}-gpu"
    create_nodes(api, prefix, gpu_type, nodes, gpus)
    create_pool(api, pool_manifest(gpu_type, gpu_type))
    return gpu_type


def operator(
    cp: devcluster.ControlPlane,
    log_dir: Path,
    *,
    identity: str,
    round_seconds: float,
    extra: Sequence[str] = (),
    wait_rounds: int = 1,
    lease: str = "",
) -> OperatorProcess:
    """``walras operator`` under leader election as ``identity``, on the Lease ``lease`` in
    walras-system (default: one of its own, ``chaos-<identity>``)."""
    return start_operator(
        cp,
        log_dir,
        name=identity,
        round_seconds=round_seconds,
        extra=[
            "--leader-elect",
            "--lease-namespace",
            LEASE_NAMESPACE,
            "--lease-name",
            lease or f"chaos-{identity}",
            "--identity",
            identity,
            *extra,
        ],
        wait_rounds=wait_rounds,
    )


def has_status(api: Any, namespace: str, name: str) -> bool:
    try:
        return bool((get_job(api, namespace, name).get("status") or {}).get("phase"))
    except Exception:  # the API server is still coming back
        return False


def rounds_until_status(
    op: OperatorProcess, api: Any, namespace: str, name: str, gpu_type: str, limit: int
) -> int:
    """Create job ``name`` and count the operator's full rounds that end before its status
    shows; gives up (returns ``limit + 1``) once ``limit + 1`` have ended without it.

    Full rounds only: they come one per round length, so they are a clock that a slow machine
    stretches with the operator. Incremental rounds run on events (a new leader runs one at once,
    then its first full round), so two can end within a second after an outage, before the
    watches have resumed: counting them would make the bound depend on when events arrive."""
    start = op.full_rounds()
    create_job(api, namespace, job_manifest(name, {gpu_type: 1.0}, replicas=2))

    def settled() -> int | None:
        ended = op.full_rounds() - start  # read first: a status seen after it is no later
        if has_status(api, namespace, name):
            return ended + 1  # +1: a truthy value for wait_for (subtracted below)
        return limit + 2 if ended > limit else None

    return int(wait_for(settled, 600, f"job {name}'s status or {limit + 1} rounds")) - 1


def assert_invariants(
    api: Any, namespace: str, replicas: dict[tuple[str, str], int], op: OperatorProcess
) -> None:
    problems = invariants.check(api, namespace, replicas, op.log_text())
    assert not problems, "\n".join(problems)
    partial = invariants.partial_gangs(invariants.walras_pods(api, namespace))
    assert not partial, f"gangs partially bound: {partial}"

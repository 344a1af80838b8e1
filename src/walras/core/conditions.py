"""Conditions on FungibleJobs and ResourcePools: stable reasons, messages with the numbers.

Called by ``walras.operator.status`` when it builds a status. Reasons are a closed vocabulary
(clients and ``walras explain`` match on them); messages carry the numbers behind a decision, e.g.
``share of v100 is 0.12 at price 3.4; on k80 you would get 0.90``. Floats are rounded to three
significant digits so that solver noise between rounds does not rewrite the status.

``lastTransitionTime`` changes only when a condition's ``status`` flips (Kubernetes convention).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

# Condition types.
ADMITTED: Final = "Admitted"
ALLOCATED: Final = "Allocated"
BOUND: Final = "Bound"
TIME_SLICED: Final = "TimeSliced"
PREEMPTED: Final = "Preempted"
READY: Final = "Ready"

# Reasons.
VALID: Final = "Valid"
ALLOCATED_REASON: Final = "Allocated"
INSUFFICIENT_SHARE: Final = "InsufficientShare"
WAITING_FOR_CAPACITY: Final = "WaitingForCapacity"
NO_SHARE: Final = "NoShare"
PODS_BOUND: Final = "PodsBound"
NOT_RUNNING: Final = "NotRunning"
SLICED: Final = "TimeSliced"
FULL_SHARE: Final = "FullShare"
SLICE_ENDED: Final = "SliceEnded"
RUNNING: Final = "Running"
COMPLETED: Final = "Completed"
WORK_DONE: Final = "TotalWorkDone"
POD_FAILED: Final = "PodFailed"
NODES_READY: Final = "NodesReady"
NO_NODES: Final = "NoNodes"
# Accounting, filters, empty pools: a planned gang not bound yet; a pool with nodes
# but no GPU Walras may use; the filter reasons are in walras.core.policies.eligibility.
BIND_PENDING: Final = "BindPending"
NO_CAPACITY: Final = "NoCapacity"
# Quotas (walras.core.tenant_usage): Allocated=False because the job's tenant or an ancestor is at
# its maximum of every type the job can use; Preempted=True because the owner of a guarantee took
# back GPUs the job's tenant had borrowed.
QUOTA_EXCEEDED: Final = "QuotaExceeded"
RECLAIMED: Final = "Reclaimed"


def num(x: float) -> float:
    """Three significant digits (status numbers; avoids rewrites on solver noise)."""
    if x == 0 or x != x:
        return 0.0
    return float(f"{x:.3g}")


def fmt(x: float) -> str:
    """Human form of a number in messages: 0.12, 3.4, 1.2e+03."""
    return f"{num(x):.3g}"


def condition(
    ctype: str, status: bool, reason: str, message: str, generation: int
) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def merge_times(
    new: Sequence[Mapping[str, Any]], old: Sequence[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Give each new condition its ``lastTransitionTime``: kept unless its status flipped."""
    before = {str(c.get("type")): c for c in old if isinstance(c, Mapping)}
    out: list[dict[str, Any]] = []
    for cond in new:
        prev = before.get(str(cond["type"]))
        stamp = now
        if prev is not None and prev.get("status") == cond["status"]:
            stamp = str(prev.get("lastTransitionTime") or now)
        out.append({**cond, "lastTransitionTime": stamp})
    return out


def same_conditions(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Equal apart from ``lastTransitionTime`` (which :func:`merge_times` derives)."""

    def strip(cs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs]

    return strip(a) == strip(b)


def insufficient_share_message(
    share: Mapping[str, float],
    prices: Mapping[str, float],
    alternatives: Mapping[str, float],
) -> str:
    """``share of v100 is 0.12 at price 3.4; on k80 you would get 0.90`` (PS-DSF: no prices).

    ``share``: the job's long-run fraction per GPU type; ``alternatives``: what each type alone
    would give it at the same prices (``pricing.best_response`` with the others masked).
    """
    parts: list[str] = []
    positive = {t: s for t, s in share.items() if s > 1e-3}
    if positive:
        for gpu_type, s in sorted(positive.items(), key=lambda kv: (-kv[1], kv[0])):
            text = f"share of {gpu_type} is {s:.2f}"
            if gpu_type in prices:
                text += f" at price {fmt(prices[gpu_type])}"
            parts.append(text)
    else:
        priced = ", ".join(f"{t} {fmt(p)}" for t, p in sorted(prices.items()))
        parts.append("no share at the current prices" + (f" ({priced})" if priced else ""))
    better = sorted(
        ((t, a) for t, a in alternatives.items() if a > positive.get(t, 0.0) + 1e-3),
        key=lambda kv: (-kv[1], kv[0]),
    )
    if better:
        parts.append("; ".join(f"on {t} you would get {a:.2f}" for t, a in better[:2]))
    return "; ".join(parts)


def issue_message(field: str, message: str) -> str:
    return f"{field}: {message}"

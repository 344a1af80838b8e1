"""What one round knows only while it runs (kube-scheduler's ``CycleState``).

Built at the start of a round and dropped at its end, so nothing of one round leaks into the
next through the long-lived loop: the round's number and clock, whether it is incremental and
whether it rewrites every status (the first round after start-up or Lease take-over), its
report, what the admission rules asked to delete and say, and the jobs held out during its
writes (their statuses say why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from walras.core import admission, model
from walras.operator.round_report import RoundReport


@dataclass(slots=True)
class RoundScratch:
    round_no: int
    now: float
    incremental: bool
    refresh: bool
    report: RoundReport
    retry_deletes: list[model.PodInfo] = field(default_factory=list)
    retry_events: list[tuple[model.JobSpec, str, str]] = field(default_factory=list)
    held: dict[model.JobKey, admission.Blocked] = field(default_factory=dict)
    # Mirrors whose workload ended (its own Complete/Failed condition): the adoption step writes
    # their final status; the status writer leaves them alone (its view of them is the plan's,
    # made before, which still has them running).
    ended: set[model.JobKey] = field(default_factory=set)

"""Per-job schedule history: time run per placement group, time eligible, work done.

The realiser's priority (``walras.allocator.rounds``) is ``target / (received / elapsed)``; it
needs, per job, how long it has run in each group and how long it has been schedulable. Time is
measured in seconds (the ratio is unit-free, and rounds triggered early by an arriving job are
shorter than ``--round-seconds``).

Persisting it costs nothing extra: the history is written into ``FungibleJob.status`` only along
with a status change the operator makes anyway (a slice starting or ending changes the job's
allocation). Between two such writes the job's running state is constant, so the values at any
time follow from the persisted ones::

    elapsed(t)     = status.elapsed + (t - status.accountedAt)
    received_g(t)  = status.received[g] + (t - status.accountedAt)   if g == status.runningGroup
    workDone(t)    = status.workDone + (t - max(status.accountedAt, status.productiveFrom))⁺
                     · throughput(type of g)

A gang that (re)starts — its first dispatch, or a new set of nodes — does no work for the first
``restart_s`` seconds (checkpoint reload; Hadar's restart cost, about 10 s): ``productiveFrom`` =
start + ``restart_s``. The time still counts as received (the GPUs are held), as in Gavel's restart
model that ``walras simulate`` reproduces.

A restarted operator calls :meth:`History.from_status` and continues the schedule. The round loop
calls :meth:`History.advance` at every round.

**Where it persists.** The operator keeps the authoritative copy in compressed ConfigMaps, many
jobs per write (``walras.operator.history_store``), as :meth:`History.record`: the same values in a
compact form (times as epoch seconds). A record is rewritten only when the job's running state
(group, start, productive start, rate) changes, since between such changes the formulas above
extrapolate it exactly. ``status_fields`` is still written into a job's status, but only along
with a status patch that a user-visible change causes (never a write of its own); a record and a
status both carry ``accountedAt``, and the later one wins on restart (an upgraded operator whose
ConfigMap does not exist yet continues from the statuses).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from walras.core import model


@dataclass(slots=True)
class History:
    """Mutable history of one job (owned by the round loop, keyed by job UID)."""

    received: dict[str, float] = field(default_factory=dict)
    elapsed: float = 0.0
    work_done: float = 0.0
    running_group: str = ""
    running_rate: float = 0.0  # work units per second in the running group
    running_since: float | None = None
    accounted_at: float | None = None
    productive_from: float | None = None
    # When the current gang was last placed afresh (its pods created): the minimum run time
    # (walras.core.realise) counts from here. Not in the status schema: only the record keeps it.
    started_at: float | None = None

    @classmethod
    def from_status(cls, status: Mapping[str, Any], rate_of: Mapping[str, float]) -> History:
        """Rebuild from a persisted status (``rate_of``: throughput per group name)."""
        received_raw = status.get("received") or {}
        received = {str(k): float(v) for k, v in dict(received_raw).items()}
        group = str(status.get("runningGroup") or "")
        return cls(
            received=received,
            elapsed=float(status.get("elapsed") or 0.0),
            work_done=float(status.get("workDone") or 0.0),
            running_group=group,
            running_rate=float(rate_of.get(group, 0.0)) if group else 0.0,
            running_since=model.parse_time(status.get("runningSince")),
            accounted_at=model.parse_time(status.get("accountedAt")),
            productive_from=model.parse_time(status.get("productiveFrom")),
        )

    def advance(self, now: float, half_life: float = math.inf) -> None:
        """Account the time since the last call: elapsed, and received/work if running.

        ``half_life`` (seconds): the realiser's memory. Elapsed and received time decay by
        ``2^(−dt/half_life)`` before the new interval is added, so the priority
        ``target · elapsed / received`` compares recent service with the *current* target; with
        the default (infinite) every second since the job arrived counts alike. Work done never
        decays.
        """
        if self.accounted_at is None:
            self.accounted_at = now
            return
        dt = max(0.0, now - self.accounted_at)
        if math.isfinite(half_life) and half_life > 0:
            # Integral of the decayed indicator over the interval, so a job running the whole
            # time keeps received == elapsed exactly.
            keep = 0.5 ** (dt / half_life)
            added = (1.0 - keep) * half_life / math.log(2.0) if dt > 0 else 0.0
            self.elapsed = self.elapsed * keep + added
            for group in self.received:
                self.received[group] *= keep
            if self.running_group:
                self.received[self.running_group] = (
                    self.received.get(self.running_group, 0.0) + added
                )
        else:
            self.elapsed += dt
            if self.running_group:
                self.received[self.running_group] = self.received.get(self.running_group, 0.0) + dt
        if self.running_group:
            self.work_done += self.productive_seconds(now) * self.running_rate
        self.accounted_at = now

    def productive_seconds(self, now: float) -> float:
        """Seconds of real work since the last accounting (restart time excluded)."""
        if self.accounted_at is None or not self.running_group:
            return 0.0
        begin = self.accounted_at
        if self.productive_from is not None:
            begin = max(begin, self.productive_from)
        return max(0.0, now - begin)

    def run_in(
        self,
        group: str,
        rate: float,
        now: float,
        *,
        restarted: bool = False,
        restart_s: float = 0.0,
    ) -> bool:
        """Set the running group from ``now`` on ('' = not running); True if it changed.

        ``restarted``: the gang starts on new nodes at ``now`` (first dispatch, a move, or a
        resume), so it works only from ``now + restart_s``.
        """
        if restarted and group:
            self.productive_from = now + restart_s
            self.started_at = now
        if group == self.running_group:
            # Same group, maybe a new rate: a forked job's copies (HadarE) or a throughput that
            # measurements replaced. Work up to ``now`` was accounted at the old rate by advance().
            if group:
                self.running_rate = rate
            return False
        self.running_group = group
        self.running_rate = rate if group else 0.0
        self.running_since = now if group else None
        if not group:
            self.productive_from = None
            self.started_at = None
        return True

    def status_fields(self) -> dict[str, Any]:
        """The persisted form (see the module docstring)."""
        return {
            "received": {k: round(v, 3) for k, v in sorted(self.received.items())},
            "elapsed": round(self.elapsed, 3),
            "workDone": round(self.work_done, 6),
            "runningGroup": self.running_group,
            "runningSince": (
                model.format_time(self.running_since) if self.running_since is not None else ""
            ),
            "accountedAt": (
                model.format_time(self.accounted_at) if self.accounted_at is not None else ""
            ),
            "productiveFrom": (
                model.format_time(self.productive_from) if self.productive_from is not None else ""
            ),
        }


def _time_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _record_rate(rate: float) -> float:
    """Three significant digits: a rate that only wobbles does not rewrite the record."""
    return float(f"{rate:.3g}") if rate else 0.0


def anchor(hist: History) -> tuple[str, float | None, float | None, float]:
    """What must change for the persisted record to go stale (see the module docstring)."""
    return (
        hist.running_group,
        hist.running_since,
        hist.productive_from,
        _record_rate(hist.running_rate),
    )


def record(hist: History) -> dict[str, Any]:
    """The compact persisted form (``walras.operator.history_store``), times in epoch seconds."""
    out: dict[str, Any] = {
        "r": {k: round(v, 3) for k, v in sorted(hist.received.items())},
        "e": round(hist.elapsed, 3),
        "w": round(hist.work_done, 6),
    }
    if hist.running_group:
        out["g"] = hist.running_group
    for key, value in (
        ("s", hist.running_since),
        ("a", hist.accounted_at),
        ("p", hist.productive_from),
        ("b", hist.started_at),
    ):
        if value is not None:
            out[key] = round(value, 3)
    return out


def from_record(raw: Mapping[str, Any], rate: float = 0.0) -> History:
    """Rebuild from :func:`record` (``rate``: the throughput of its running group).

    Raises ``ValueError`` or ``TypeError`` on a malformed record (the caller skips it).
    """
    received = {str(k): float(v) for k, v in dict(raw.get("r") or {}).items()}
    group = str(raw.get("g") or "")
    return History(
        received=received,
        elapsed=float(raw.get("e") or 0.0),
        work_done=float(raw.get("w") or 0.0),
        running_group=group,
        running_rate=rate if group else 0.0,
        running_since=_time_or_none(raw.get("s")),
        accounted_at=_time_or_none(raw.get("a")),
        productive_from=_time_or_none(raw.get("p")),
        started_at=_time_or_none(raw.get("b")),
    )


def realised_share(status: Mapping[str, Any], now: float) -> dict[str, float]:
    """Share of time a job has run per group, from its status alone (tests and ``explain``)."""
    hist = History.from_status(status, {})
    if hist.accounted_at is not None:
        hist.advance(now)
    if hist.elapsed <= 0:
        return {}
    return {g: v / hist.elapsed for g, v in hist.received.items()}

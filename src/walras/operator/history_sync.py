"""Schedule histories between the round loop and their ConfigMaps (``history_store``).

- **Restore** when the process starts or wins the Lease: one LIST of the persisted records; they
  replace the histories this process had (the previous leader's are newer). Without RBAC for
  ConfigMaps, or with an API stand-in that has none, nothing is loaded and the histories are
  rebuilt from the job statuses.
- **Adopt** a loaded record as the job's history when the job is next planned, unless the job's
  status is more recent than the record (``accountedAt`` later: written by an operator without
  ConfigMaps), in which case the core rebuilds the history from the status. Records of held-out
  jobs wait until those are planned again.
- **Save** after every round the histories whose running state changed (writes proportional to
  change), only while leading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from walras.core import cycle, history, model, snapshot
from walras.kube import writes as kubeapi
from walras.operator import history_store
from walras.operator.round_report import RoundReport

logger = logging.getLogger("walras.operator.history_sync")


class HistorySync:
    """Loads, adopts and saves the persisted schedule histories (module docstring)."""

    def __init__(self, api: kubeapi.Api, namespace: str, is_leader: Callable[[], bool]) -> None:
        self.api = api
        # "" = each job's records in its own namespace; a name = all in that namespace.
        self.namespace = namespace
        self.is_leader = is_leader
        self.store = history_store.HistoryStore()
        self.restored: dict[str, dict[str, Any]] = {}  # job uid -> record, until adopted

    async def restore(self, state: cycle.CycleState) -> None:
        """Load the persisted histories (one LIST); they replace what this process had."""
        client = getattr(self.api, "client", None)
        if not hasattr(self.api, "put_configmap") or client is None:
            return  # a stand-in API without ConfigMaps: histories come from the statuses
        try:
            if not await asyncio.to_thread(history_store.permitted, client, self.namespace):
                if not self.store.forbidden:
                    logger.info(
                        "no RBAC for configmaps (list, create, patch): the schedule history "
                        "persists in job statuses only"
                    )
                self.store.forbidden = True
                return
            self.store.forbidden = False
            loaded = await asyncio.to_thread(history_store.load, client, self.namespace)
        except Exception as exc:  # not fatal: the statuses carry the pre-ConfigMap history
            logger.warning("schedule history not loaded (%s); continuing from job statuses", exc)
            return
        self.store.adopt(loaded)
        self.restored = loaded.records
        state.histories.clear()

    def adopt(self, snap: snapshot.Snapshot, state: cycle.CycleState) -> None:
        """Loaded records become the histories of the jobs planned now (module docstring)."""
        if not self.restored:
            return
        for job in snap.jobs:
            raw = self.restored.pop(job.uid, None)
            if raw is None or job.uid in state.histories:
                continue
            try:
                hist = history.from_record(raw)
            except (TypeError, ValueError):
                continue
            from_status = model.parse_time(job.status.get("accountedAt"))
            if from_status is not None and (
                hist.accounted_at is None or from_status > hist.accounted_at + 1e-3
            ):
                continue  # the cycle rebuilds it from the status
            if hist.running_group:
                hist.running_rate = cycle.rate(job, hist.running_group, snap)
            state.histories[job.uid] = hist
        # Held-out jobs (defects) are adopted once they are planned again.
        waiting = {d.uid for d in snap.defects}
        self.restored = {u: r for u, r in self.restored.items() if u in waiting}

    async def save(self, planned: cycle.CyclePlan, report: RoundReport) -> None:
        """Persist the histories whose running state changed (writes proportional to change)."""
        if not hasattr(self.api, "put_configmap") or not self.is_leader() or self.store.forbidden:
            return
        snap = planned.snapshot

        def where(namespace: str) -> str:
            return self.namespace or namespace

        live: dict[str, set[str]] = {}
        for key, uid in [
            *((j.key, j.uid) for j in snap.jobs),
            *((d.key, d.uid) for d in snap.defects),
        ]:
            live.setdefault(where(key[0]), set()).add(uid)
        by_key = {j.key: j for j in planned.active}
        self.store.update(
            (
                (where(by_key[key].namespace), by_key[key].uid, hist)
                for key, hist in sorted(planned.histories.items())
                if key in by_key
            ),
            live,
        )
        written, errors = await self.store.flush(self.api, planned.round_no)
        report.history_writes = written
        report.errors += errors

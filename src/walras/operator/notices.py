"""The advance notice on pods: ``walras.dev/stop-at`` where the forecast says a gang stops.

After a round is planned and carried out, ``walras.core.notice.next_stops`` forecasts which
running gangs the next full round stops and when (the start of that round). This module makes
their pods say so, as soon as the round is planned:

- every live pod of such a gang carries ``walras.dev/stop-at: <RFC 3339>``
  (``walras.core.model.format_time``);
- a pod that carries one while the latest forecast keeps its gang has it removed (a forecast is
  not a promise: the next round solves again);
- only a change is written: a pod whose annotation already says the forecast time (or to which
  this process already sent it, while the watch has not shown it back) is not patched, so a
  steady cluster writes no notices at all.

The time a notice names is the next full round: ``round_seconds`` after a full round, and after
an incremental round whatever is left until the full one (incremental rounds never stop a
running gang). Pods being deleted are left alone: they receive SIGTERM now. Patches go through
``walras.kube.writes.Api`` (fenced, retried, its thread pool bounds how many are in flight); a
failed one is counted in the round's errors and retried by the next round's comparison.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from walras.core import cycle, model, notice
from walras.kube import writes as kubeapi
from walras.operator import cache
from walras.operator.round_scratch import RoundScratch

logger = logging.getLogger("walras.operator.notices")


def wanted(
    planned: cycle.CyclePlan, stops: Mapping[model.JobKey, float]
) -> dict[model.JobKey, tuple[str, str]]:
    """Pod key → (job name, the notice it should carry: RFC 3339, or "" for none), for every
    Walras pod that lives on after this round (kept, or created by it)."""
    deleted = {d.pod.key for d in planned.realisation.deletes}
    out: dict[model.JobKey, tuple[str, str]] = {}
    for pod in planned.snapshot.pods:
        if pod.key in deleted or pod.terminating or pod.finished:
            continue
        when = stops.get(pod.job_key)
        out[pod.key] = (pod.job, "" if when is None else model.format_time(when))
    for c in planned.realisation.creates:
        when = stops.get(c.job.key)
        out[(c.job.namespace, c.name)] = (
            c.job.name,
            "" if when is None else model.format_time(when),
        )
    return out


class NoticeWriter:
    """Writes the advance notices of one operator process (module docstring)."""

    def __init__(self, api: kubeapi.Api, cluster: cache.ClusterCache) -> None:
        self.api = api
        self.cluster = cluster
        # What this process last sent per pod, until the watch shows it back.
        self.sent: dict[model.JobKey, str] = {}

    async def write(
        self,
        planned: cycle.CyclePlan,
        stops: Mapping[model.JobKey, float],
        scratch: RoundScratch,
    ) -> int:
        """Patch the pods whose notice changes; returns how many patches were sent."""
        want = wanted(planned, stops)
        self.sent = {k: v for k, v in self.sent.items() if k in want}
        patches: list[tuple[model.JobKey, str]] = []
        for key, (job, value) in sorted(want.items()):
            if (key[0], job) in scratch.held:
                continue  # its gang could not be created or bound this round
            pod = self.cluster.store.pods.get(key)
            have = pod.stop_at if pod is not None else ""
            if have == value:
                self.sent.pop(key, None)
                continue
            if self.sent.get(key) == value:
                continue  # sent already; the watch has not shown it back yet
            patches.append((key, value))
        if not patches:
            return 0
        results = await kubeapi.gather_limited(
            self.api.annotate_pod(ns, name, {notice.ANN_STOP_AT: value or None})
            for (ns, name), value in patches
        )
        for (key, value), result in zip(patches, results, strict=True):
            if result.ok or result.outcome == kubeapi.Outcome.GONE:
                self.sent[key] = value
            elif result.outcome == kubeapi.Outcome.ERROR:
                scratch.report.errors += 1
                logger.warning("advance notice on pod %s/%s: %s", *key, result.message)
        return len(patches)

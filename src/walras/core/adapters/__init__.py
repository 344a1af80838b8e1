"""Workload adapters: the kinds Walras adopts through suspend (``walras.core.adapters.base``).

Adding a kind: a module with its adapter class, and one line in ``ADAPTERS`` below.
"""

from __future__ import annotations

from collections.abc import Mapping

from walras.core.adapters import base, batch_job, jobset, trainjob
from walras.core.adapters.base import Adapter, BadWorkloadError, Gang, Kind, Outcome, Start

ADAPTERS: tuple[Adapter, ...] = (
    batch_job.BatchJob(),
    jobset.JobSet(),
    trainjob.TrainJob(),
)


def by_kind(api_version: str, kind: str) -> Adapter | None:
    """The adapter of ``kind`` in ``api_version`` (None: not a kind Walras adopts)."""
    for adapter in ADAPTERS:
        if (adapter.kind.api_version, adapter.kind.kind) == (api_version, kind):
            return adapter
    return None


def replica_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
    """The replica of an adopted workload's pod (None: not one), asked of each adapter."""
    kind = annotations.get(base.ANN_WORKLOAD_KIND)
    for adapter in ADAPTERS:
        if adapter.kind.kind == kind:
            return adapter.replica(labels, annotations)
    return None


__all__ = ["ADAPTERS", "Adapter", "BadWorkloadError", "Gang", "Kind", "Outcome", "Start", "by_kind"]

"""kopf's per-event bookkeeping, reduced to what an operator of ``@kopf.on.event`` handlers uses.

For every watch event kopf computes the object's "essence" and its diff against the last handled
one (``kopf._core.reactor.processing._detect_causes``), whether or not any handler reacts to
changes: a deep copy of the whole body (``DiffBaseStorage.build``) and two more of the essence
(``ProgressStorage.clear``). Those serve ``on.create/update/resume/delete/field`` handlers and
daemons, which Walras does not register: its handlers are ``on.event`` only
(``walras.operator.handlers``; ``tests/unit/test_kopf_storage.py`` fails if that changes). A
round that starts many gangs delivers several events per pod and job (a pod's creation, its
binding, its Running status; each job's status patch), so those copies would grow with the
cluster for nothing.

So the essence is empty and clearing it copies nothing. Reading still works as kopf's defaults do
(``fetch``: an annotation nobody writes here returns ``None``), and nothing is written: with no
changing handlers kopf stores no progress and no diff base.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf


class EventOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff base with an empty essence (no deep copy of each event's body)."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})


class EventOnlyProgress(kopf.SmartProgressStorage):
    """kopf's progress storage whose ``clear`` returns the (empty) essence without copying."""

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return essence


def configure(settings: kopf.OperatorSettings) -> None:
    """Install the event-only storages (both entry points call this)."""
    settings.persistence.diffbase_storage = EventOnlyDiffBase()
    settings.persistence.progress_storage = EventOnlyProgress()

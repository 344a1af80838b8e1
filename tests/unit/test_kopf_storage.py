"""The event-only kopf storages (``walras.operator.kopf_storage``) are only right while Walras
registers no handler that needs a diff base or progress records; these tests hold both halves.

Oracle: kopf's own registries (which handler kinds exist) and kopf's own default storages (what
``fetch`` answers on the same body).
"""

from __future__ import annotations

import importlib
from typing import Any

import kopf

from walras.operator import handlers, kopf_storage, main


def _registries() -> list[kopf.OperatorRegistry]:
    """The registry ``walras operator`` builds and the one ``kopf run -m ...kopf_entry`` uses."""
    registry = kopf.OperatorRegistry()
    handlers.register(registry, handlers.Watcher.__new__(handlers.Watcher))
    importlib.import_module("walras.operator.kopf_entry")
    return [registry, kopf.get_default_registry()]


def test_walras_registers_only_event_handlers() -> None:
    for registry in _registries():
        assert registry._watching.get_all_handlers(), "the on.event handlers are registered"
        # on.create/update/resume/delete/field and daemons/timers would need kopf's diff base
        # and progress records, which kopf_storage empties: use kopf's defaults if one is added.
        assert not registry._changing.get_all_handlers()
        assert not registry._spawning.get_all_handlers()


def test_both_entry_points_install_the_event_only_storages() -> None:
    settings = main.kopf_settings()
    assert isinstance(settings.persistence.diffbase_storage, kopf_storage.EventOnlyDiffBase)
    assert isinstance(settings.persistence.progress_storage, kopf_storage.EventOnlyProgress)


def test_the_essence_is_empty_and_fetch_answers_as_kopfs_default() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b"}, "annotations": {"x": "y"}},
        "spec": {"nodeName": "n0"},
    }
    body = kopf.Body(raw)
    ours, default = kopf_storage.EventOnlyDiffBase(), kopf.AnnotationsDiffBaseStorage()
    assert ours.build(body=body) == {}
    assert default.build(body=body) != {}  # what the default would have copied
    assert ours.fetch(body=body) == default.fetch(body=body)
    essence = ours.build(body=body)
    assert kopf_storage.EventOnlyProgress().clear(essence=essence) is essence

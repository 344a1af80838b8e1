"""``walras.kube.client.throttled``: the token refresh hook runs at most once per period.

Oracle: the kubeconfig loader's contract as read in its source (its hook re-installs a fresh hook
of itself on every run), reproduced by a stand-in; a monotonic clock we set.
"""

from __future__ import annotations

from typing import Any

import pytest

from walras.kube import client


class Config:
    refresh_api_key_hook: Any = None


def test_hook_runs_once_per_period_and_stays_throttled(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: now[0])
    runs: list[float] = []
    config = Config()

    def loader_hook(configuration: Any) -> None:
        runs.append(now[0])
        configuration.refresh_api_key_hook = loader_hook  # what the kubeconfig loader does

    config.refresh_api_key_hook = client.throttled(loader_hook, 10.0)
    for t in (100.0, 101.0, 109.9, 110.0, 115.0, 120.5):
        now[0] = t
        config.refresh_api_key_hook(config)
    assert runs == [100.0, 110.0, 120.5]
    assert config.refresh_api_key_hook is not loader_hook  # still the throttled wrapper

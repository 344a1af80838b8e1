"""One way to build a ``kubernetes`` ApiClient, shared by ``walras operator``, ``walras agent``,
``walras explain`` and ``walras status``.

Order: the ``--kubeconfig`` file when given; else the in-cluster service account (the chart's pods);
else ``$KUBECONFIG`` / ``~/.kube/config`` (a laptop). The kubernetes client is imported lazily so
that ``walras --help`` stays fast.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# How often the loaders' token refresh hook may run. The kubernetes client calls it before every
# request; the kubeconfig loader's hook re-applies the whole configuration each time (a third of
# the client's CPU per write, measured with cProfile). Tokens it refreshes expire in minutes.
REFRESH_SECONDS = 10.0


def throttled(hook: Callable[[Any], None], period: float) -> Callable[[Any], None]:
    """``hook`` run at most once per ``period`` seconds (the first call always runs it)."""
    lock = threading.Lock()
    last = [-float("inf")]

    def refresh(configuration: Any) -> None:
        now = time.monotonic()
        with lock:
            if now - last[0] < period:
                return
            last[0] = now
        hook(configuration)
        # The kubeconfig loader's hook installs a fresh (unthrottled) hook of itself each run.
        configuration.refresh_api_key_hook = refresh

    return refresh


def api_client(kubeconfig: str | None, *, pool_size: int = 16) -> Any:
    """A configured ``kubernetes.client.ApiClient`` with ``pool_size`` pooled connections."""
    from kubernetes import client, config

    # kubernetes.config carries no annotations; typing it as Any keeps mypy --strict honest.
    loader: Any = config
    configuration = client.Configuration()
    if kubeconfig:
        loader.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            loader.load_incluster_config(client_configuration=configuration)
        except loader.ConfigException:
            loader.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = throttled(hook, REFRESH_SECONDS)
    return client.ApiClient(configuration)

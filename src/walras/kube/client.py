"""One way to build a ``kubernetes`` ApiClient, shared by ``walras operator``, ``walras agent``,
``walras explain`` and ``walras status``.

Order: the ``--kubeconfig`` file when given; else the in-cluster service account (the chart's pods);
else ``$KUBECONFIG`` / ``~/.kube/config`` (a laptop). The kubernetes client is imported lazily so
that ``walras --help`` stays fast.
"""

from __future__ import annotations

from typing import Any


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
    return client.ApiClient(configuration)

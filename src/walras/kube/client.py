"""One way to build a ``kubernetes`` ApiClient, shared by ``walras operator``, ``walras agent``,
``walras explain`` and ``walras status``.

Order: the ``--kubeconfig`` file when given; else the in-cluster service account (the chart's pods);
else ``$KUBECONFIG`` / ``~/.kube/config`` (a laptop). The kubernetes client is imported lazily so
that ``walras --help`` stays fast.

A kubeconfig that cannot be used (missing, not a file, unreadable, not YAML, not a mapping, or
refused by the kubernetes loader) raises :class:`KubeconfigError`, whose text is one line naming
the file and the problem; the console script prints it and exits 1, never a traceback.
"""

from __future__ import annotations

import os
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


class KubeconfigError(Exception):
    """A kubeconfig that cannot be used; ``str()`` is one line naming the file and the problem."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def check_kubeconfig(path: str, *, source: str = "--kubeconfig") -> None:
    """Raise :class:`KubeconfigError` unless ``path`` is a readable YAML mapping."""
    import yaml

    where = f"kubeconfig {path} (from {source})"
    if not os.path.exists(path):
        raise KubeconfigError(f"{where}: no such file")
    if not os.path.isfile(path):
        raise KubeconfigError(f"{where}: not a file")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise KubeconfigError(
            f"{where}: cannot read it: {exc.strerror or _one_line(exc)}"
        ) from None
    except UnicodeDecodeError:
        raise KubeconfigError(f"{where}: not text (not a kubeconfig)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeconfigError(f"{where}: not valid YAML{at}") from None
    if not isinstance(data, dict):
        raise KubeconfigError(f"{where}: not a kubeconfig (expected a mapping with clusters)")


def _kubeconfig_files() -> tuple[list[str], str]:
    """The files the kubernetes loader reads when no file is given, and where they came from."""
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return [p for p in env.split(os.pathsep) if p], "KUBECONFIG"
    return [os.path.expanduser("~/.kube/config")], "the default location"


def api_client(kubeconfig: str | None, *, pool_size: int = 16) -> Any:
    """A configured ``kubernetes.client.ApiClient`` with ``pool_size`` pooled connections."""
    from kubernetes import client, config

    # kubernetes.config carries no annotations; typing it as Any keeps mypy --strict honest.
    loader: Any = config
    configuration = client.Configuration()
    if kubeconfig:
        files, source = [kubeconfig], "--kubeconfig"
    else:
        try:
            loader.load_incluster_config(client_configuration=configuration)
            files, source = [], ""
        except loader.ConfigException:
            files, source = _kubeconfig_files()
    # As kubectl does, files of a KUBECONFIG list that do not exist are skipped, if one does.
    existing = [p for p in files if os.path.exists(p)] if len(files) > 1 else files
    if files and not existing:
        raise KubeconfigError(f"kubeconfig {os.pathsep.join(files)} (from {source}): no such file")
    for path in existing:
        check_kubeconfig(path, source=source)
    if files:
        try:
            loader.load_kube_config(
                config_file=kubeconfig or None, client_configuration=configuration
            )
        except Exception as exc:  # the loader's ConfigException, a bad field's ValueError, ...
            names = os.pathsep.join(files)
            raise KubeconfigError(f"kubeconfig {names} (from {source}): {_one_line(exc)}") from None
    configuration.connection_pool_maxsize = pool_size
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = throttled(hook, REFRESH_SECONDS)
    return client.ApiClient(configuration)

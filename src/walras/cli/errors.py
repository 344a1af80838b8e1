"""The one line a failed ``walras`` command prints instead of a traceback, and its exit status.

Exit 1 (the cluster cannot be used; bad command-line input is Typer's exit 2):

- a kubeconfig that cannot be used (``walras.kube.client.KubeconfigError``: the file and why);
- an API server that cannot be reached (a connection refused, a timeout, a TLS failure:
  urllib3's errors, which the kubernetes client raises once its retries are spent);
- an API server that answers a request with an error the command does not handle itself
  (``kubernetes.client.ApiException``: its status and message).

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:300]


def describe(exc: BaseException) -> str | None:
    """The line to print for ``exc`` (exit 1), or ``None`` when it is not a cluster failure."""
    from walras.kube.client import KubeconfigError

    if isinstance(exc, KubeconfigError):
        return str(exc)
    try:
        import urllib3
        from kubernetes.client.exceptions import ApiException
    except ImportError:  # pragma: no cover - both are dependencies
        return None
    if isinstance(exc, urllib3.exceptions.HTTPError):
        reason = getattr(exc, "reason", None) or exc
        return f"cannot reach the Kubernetes API server: {_one_line(reason)}"
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message")
        except (TypeError, ValueError, AttributeError):
            message = None
        text = _one_line(message or exc.reason or "")
        return f"the Kubernetes API server answered HTTP {exc.status}: {text}"
    return None

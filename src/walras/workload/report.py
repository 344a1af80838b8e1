"""Report cumulative steps: a JSON merge patch of this pod's ``walras.dev/steps-done`` annotation.

The request is what ``kubectl annotate --overwrite pod <self> walras.dev/steps-done=<n>`` sends::

    PATCH /api/v1/namespaces/<namespace>/pods/<name>
    Content-Type: application/merge-patch+json
    Authorization: Bearer <the ServiceAccount token, read again for every request>

    {"metadata": {"annotations": {"walras.dev/steps-done": "<n>"}}}

sent with the standard library alone (no Kubernetes client in the image) to the API server the
kubelet names in ``$KUBERNETES_SERVICE_HOST``/``$KUBERNETES_SERVICE_PORT``, verified against the
ServiceAccount's ``ca.crt``. The token is read for each request because projected tokens are
rotated by the kubelet (they expire after an hour by default). ``$WALRAS_API_URL``,
``$WALRAS_TOKEN_FILE`` and ``$WALRAS_CA_FILE`` replace the address, the token and the CA (a
process outside a pod; ``http://`` skips TLS: tests against a local server). A merge patch
needs only the ``patch`` verb on the pod: no ``get`` first.

The operator reads the figure (``walras.core.progress``): the same number on every replica of a
gang, restored with the checkpoint; a value lower than the pod's previous one is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from walras.workload.identity import ANN_STEPS_DONE, SERVICEACCOUNT_DIR, pod_identity

TIMEOUT_S = 10.0
"""A report is small; an API server that does not answer in this long is not waited for (the
training loop goes on and the next report carries the newer figure)."""
STOP_TIMEOUT_S = 2.0
"""The last report before exiting on SIGTERM waits less: the grace period is for the checkpoint,
and the next start reports the restored count anyway."""


class ReportError(RuntimeError):
    """The API server refused or could not be reached; the message says which and why."""


def progress_patch(steps: int) -> dict[str, Any]:
    """The merge patch that reports ``steps`` (a non-negative integer)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    return {"metadata": {"annotations": {ANN_STEPS_DONE: str(steps)}}}


@dataclass(frozen=True, slots=True)
class ApiServer:
    """Where and how to reach the API server from inside a pod."""

    url: str
    token_file: Path
    ca_file: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiServer:
        """In-cluster address (``$WALRAS_API_URL`` first); RuntimeError when there is none."""
        env = os.environ if environ is None else environ
        url = env.get("WALRAS_API_URL", "")
        if not url:
            host = env.get("KUBERNETES_SERVICE_HOST", "")
            port = env.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise RuntimeError(
                    "no API server: KUBERNETES_SERVICE_HOST is not set (not in a pod?) "
                    "and WALRAS_API_URL is not set"
                )
            host = f"[{host}]" if ":" in host else host  # an IPv6 service address
            url = f"https://{host}:{port}"
        return cls(
            url=url.rstrip("/"),
            token_file=Path(env.get("WALRAS_TOKEN_FILE", str(SERVICEACCOUNT_DIR / "token"))),
            ca_file=Path(env.get("WALRAS_CA_FILE", str(SERVICEACCOUNT_DIR / "ca.crt"))),
        )

    def patch_pod(
        self, namespace: str, name: str, body: Mapping[str, Any], timeout: float = TIMEOUT_S
    ) -> None:
        """Merge-patch one pod; ReportError with the status and the server's message."""
        path = "/api/v1/namespaces/{}/pods/{}".format(
            urllib.parse.quote(namespace, safe=""), urllib.parse.quote(name, safe="")
        )
        headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
        if self.token_file.exists():
            headers["Authorization"] = "Bearer " + self.token_file.read_text("utf-8").strip()
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers=headers, method="PATCH"
        )
        context = None
        if self.url.startswith("https:"):
            cafile = str(self.ca_file) if self.ca_file.exists() else None
            context = ssl.create_default_context(cafile=cafile)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            with contextlib.suppress(ValueError, AttributeError):  # not a Status: raw text
                detail = str(json.loads(detail).get("message", detail))
            raise ReportError(f"PATCH {path}: HTTP {exc.code}: {detail[:300]}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ReportError(f"PATCH {path}: {exc}") from None


def report_progress(steps: int, *, api: Any = None, server: ApiServer | None = None) -> None:
    """Set ``walras.dev/steps-done: "<steps>"`` on this pod.

    ``server``: where to send it (default :meth:`ApiServer.from_env`). ``api``: a
    ``kubernetes.client.CoreV1Api`` to send it with instead (a caller that has one already).
    Raises ValueError for a negative or non-integer ``steps``, ReportError when the API server
    refuses (e.g. 403: no Role allows ``patch`` on this pod) or cannot be reached.
    """
    body = progress_patch(steps)
    namespace, name = pod_identity()
    if api is not None:
        api.patch_namespaced_pod(name, namespace, body)
        return
    (server or ApiServer.from_env()).patch_pod(namespace, name, body)

"""Which pod this process runs in, and the names a workload shares with the operator.

The pod is ``$WALRAS_POD_NAME`` in ``$WALRAS_POD_NAMESPACE``: Walras sets both on every container
of the pods it creates (downward API, ``fieldRef: metadata.name`` / ``metadata.namespace``; a
template's own values win). Without them: the pod's hostname (Kubernetes sets it to the pod name
unless ``spec.hostname`` is set) and the ServiceAccount's namespace file.

The annotation names are the operator's (``walras.core.progress``, ``walras.core.notice``); this
package imports nothing else from Walras so that it runs in a minimal image (stdlib only), and a
unit test checks that both sides spell them alike.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Final

ANN_STEPS_DONE: Final = "walras.dev/steps-done"
"""The cumulative step counter a workload reports (a decimal integer, never decreasing)."""
ANN_STOP_AT: Final = "walras.dev/stop-at"
"""When Walras plans to stop this pod (RFC 3339 UTC), set as soon as the plan is known."""

SERVICEACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
NAMESPACE_FILE = SERVICEACCOUNT_DIR / "namespace"


def pod_identity(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(namespace, name) of the pod this process runs in (see the module docstring).

    Raises RuntimeError naming the variables to set when neither source says.
    """
    env = os.environ if environ is None else environ
    name = env.get("WALRAS_POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
    namespace = env.get("WALRAS_POD_NAMESPACE", "")
    if not namespace and NAMESPACE_FILE.exists():
        namespace = NAMESPACE_FILE.read_text(encoding="utf-8").strip()
    if not name or not namespace:
        raise RuntimeError(
            "cannot tell which pod this is: set WALRAS_POD_NAME and WALRAS_POD_NAMESPACE "
            "(downward API) or mount the ServiceAccount token"
        )
    return namespace, name

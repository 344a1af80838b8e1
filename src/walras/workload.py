"""Helpers for workloads that Walras runs: report progress from inside the pod.

A training loop calls :func:`report_progress` with its cumulative step counter (the same number on
every replica of a gang; restored with the checkpoint), e.g. every few hundred steps::

    from walras.workload import report_progress

    for step in range(start, total):
        train_step()
        if step % 500 == 0:
            report_progress(step)

It merge-patches the pod annotation ``walras.dev/steps-done`` on the pod it runs in; the operator
reads it (``walras.core.progress``), measures steps per second per GPU type, and completes the job
at ``spec.totalWork``. The pod needs a ServiceAccount token (the template must set
``automountServiceAccountToken: true``: Walras defaults it to false) and a Role that allows
``patch`` on pods (``docs/progress.md`` has the Role, the RoleBinding and a ``kubectl annotate``
snippet for workloads that are not written in Python).

Which pod: ``$WALRAS_POD_NAME``/``$WALRAS_POD_NAMESPACE``, which Walras sets on every container
of the pods it creates (downward API, ``fieldRef: metadata.name`` / ``metadata.namespace``;
``walras.core.pod_env``; a template's own values win); without them, the pod's hostname
(Kubernetes sets it to the pod name unless ``spec.hostname`` is set) and the ServiceAccount's
namespace file.
The ``kubernetes`` package is imported only when a report is sent.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from walras.core.progress import ANN_STEPS_DONE

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def pod_identity(environ: os._Environ[str] | dict[str, str] | None = None) -> tuple[str, str]:
    """(namespace, name) of the pod this process runs in (see the module docstring)."""
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


def progress_patch(steps: int) -> dict[str, Any]:
    """The merge patch that reports ``steps`` (a non-negative integer)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    return {"metadata": {"annotations": {ANN_STEPS_DONE: str(steps)}}}


def report_progress(steps: int, *, api: Any = None) -> None:
    """Patch ``walras.dev/steps-done: "<steps>"`` on this pod (in-cluster credentials).

    ``api``: a ``kubernetes.client.CoreV1Api`` to use instead of the in-cluster one (tests).
    Raises ValueError for a negative or non-integer ``steps``, and the client's ApiException
    when the API server refuses (e.g. 403: no Role allows ``patch`` on pods).
    """
    body = progress_patch(steps)
    namespace, name = pod_identity()
    if api is None:
        from kubernetes import client, config  # lazy: only workloads that report need it

        config.load_incluster_config()  # type: ignore[no-untyped-call]  # untyped library
        api = client.CoreV1Api()
    api.patch_namespaced_pod(name, namespace, body)

"""The environment Walras adds to every container of the pods it creates: the pod's own identity.

``walras.workload.report_progress`` patches the ``walras.dev/steps-done`` annotation on the pod
it runs in; it finds that pod through ``WALRAS_POD_NAME`` and ``WALRAS_POD_NAMESPACE``. Each
container gets both from the downward API::

    - name: WALRAS_POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: WALRAS_POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}

so a workload need not rely on the hostname fallback (wrong when the template sets
``spec.hostname``). A container that already sets either name keeps its own entry: the user's
template wins (appending a second entry of the same name would silently override theirs, since
the kubelet applies the last one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

POD_NAME: Final = "WALRAS_POD_NAME"
POD_NAMESPACE: Final = "WALRAS_POD_NAMESPACE"

_IDENTITY: Final = ((POD_NAME, "metadata.name"), (POD_NAMESPACE, "metadata.namespace"))


def with_pod_identity(containers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``containers``, each with the identity variables it does not set itself."""
    out = []
    for container in containers:
        c = dict(container)
        env = list(c.get("env") or [])
        have = {e.get("name") for e in env if isinstance(e, Mapping)}
        env.extend(
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in _IDENTITY
            if name not in have
        )
        c["env"] = env
        out.append(c)
    return out

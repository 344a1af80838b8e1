"""The advance notice: when Walras plans to stop this pod, read without any API access.

When the plan for the next round stops a running gang, the operator is to annotate its pods with
``walras.dev/stop-at: "<RFC 3339 UTC>"`` as soon as that plan is known (``walras.core.notice``
computes it; the operator does not write it yet, see ``docs/workloads.md``). A pod that mounts its
own annotations through a downward API volume sees the annotation without any RBAC::

    volumes:
      - name: podinfo
        downwardAPI:
          items: [{path: annotations, fieldRef: {fieldPath: metadata.annotations}}]
    # container: volumeMounts: [{name: podinfo, mountPath: /etc/walras/podinfo}]

The kubelet rewrites that file when the annotations change (within its sync period, about a
minute at worst), one ``key="value"`` line per annotation, the value quoted as Go's ``%q`` does.
``$WALRAS_PODINFO_DIR`` (default ``/etc/walras/podinfo``) names the mount. Reading it is a
``stat`` and, when it changed, a small file read: cheap enough to do after every step.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path

from walras.workload.identity import ANN_STOP_AT

DEFAULT_DIR = "/etc/walras/podinfo"


def parse_annotations(text: str) -> dict[str, str]:
    """The downward API's ``key="value"`` lines as a dict (unparseable lines are skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or not key:
            continue
        try:
            value = json.loads(raw)  # Go's %q and JSON agree on quotes and common escapes
        except ValueError:
            value = raw.strip().strip('"')
        out[key.strip()] = str(value)
    return out


def parse_stop_at(value: str) -> float | None:
    """RFC 3339 (``YYYY-MM-DDTHH:MM:SSZ``, optional fraction) as epoch seconds; None if not."""
    if not value:
        return None
    try:
        stamp = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None  # a time without a zone is ambiguous: ignored rather than guessed
    return stamp.timestamp()


class Notice:
    """Watches the annotations file for ``walras.dev/stop-at`` (re-read only when it changes)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.path = Path(env.get("WALRAS_PODINFO_DIR") or DEFAULT_DIR) / "annotations"
        self._stamp: tuple[int, int] | None = None
        self._stop_at: float | None = None

    def stop_at(self) -> float | None:
        """The planned stop (epoch seconds), or None when none is announced."""
        try:
            st = self.path.stat()
        except OSError:
            self._stamp, self._stop_at = None, None
            return None
        stamp = (st.st_mtime_ns, st.st_ino)  # the kubelet swaps a symlink: the inode changes
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                text = self.path.read_text("utf-8")
            except OSError:
                return self._stop_at
            self._stop_at = parse_stop_at(parse_annotations(text).get(ANN_STOP_AT, ""))
        return self._stop_at

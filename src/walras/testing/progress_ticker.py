"""Plays the workloads' progress reports on the local control plane: a test-side ticker.

kwok plays the kubelet (``hack/kwok/*.yaml``), but its Stage templates cannot compute a value
that grows with time at a given rate: a Stage's ``next.patches`` render Go templates whose
functions (``Now``, ``StartTime``, ``Quote``, ``YAML``…) have no arithmetic, and a stage fires on
a matching object rather than on a clock. So tests advance ``walras.dev/steps-done`` with this
ticker instead, through the API server, exactly as ``walras.workload.report_progress`` does in a
real pod (a merge patch of the pod's annotation): the operator reads it through its pod watch, the
same path as in production.

Every ``interval`` seconds, for each job of the namespace whose pods run (phase Running, bound,
not being deleted), the job's step counter grows by ``rate(job, gpu_type) × dt`` (a gang spread
over types at its slowest type's rate) and every running pod of the job gets the counter (the
gang convention of ``walras.core.progress``: each replica reports the job's cumulative steps). A
job that stops running keeps its counter (its checkpoint) and resumes from it. :meth:`pause`
stops writing a job's pods so a test can patch its own values (e.g. a decreasing one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from walras.core.progress import ANN_STEPS_DONE
from walras.testing import devcluster

Rate = Callable[[str, str], float]
"""(job name, GPU type) -> true steps per second of the whole gang."""


def _running(pod: dict[str, Any]) -> bool:
    return (
        pod["metadata"].get("deletionTimestamp") is None
        and bool(pod["spec"].get("nodeName"))
        and (pod.get("status") or {}).get("phase") == "Running"
    )


class ProgressTicker:
    """A background thread patching ``walras.dev/steps-done`` at known rates (module docstring)."""

    def __init__(
        self, api_client: Any, namespace: str, rate: Rate, *, interval: float = 0.5
    ) -> None:
        self.api = api_client
        self.namespace = namespace
        self.rate = rate
        self.interval = interval
        self.steps: dict[str, float] = {}
        self._last: dict[str, float] = {}  # job -> time of the previous tick it ran at
        self._paused: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-ticker", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> ProgressTicker:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pause(self, job: str) -> None:
        with self._lock:
            self._paused.add(job)

    def resume(self, job: str) -> None:
        with self._lock:
            self._paused.discard(job)
            self._last.pop(job, None)  # the paused time is not progress

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick(time.monotonic())
            except Exception as exc:  # keep ticking: a test reads self.errors if it cares
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def tick(self, now: float) -> None:
        """One step of every running job (called by the thread; public for tests)."""
        nodes = devcluster.request(self.api, "GET", "/api/v1/nodes")["items"]
        gpu_type = {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(
                devcluster.GPU_TYPE_LABEL, ""
            )
            for n in nodes
        }
        pods = devcluster.request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": "walras.dev/job"},
        )["items"]
        by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            if _running(pod):
                by_job.setdefault(pod["metadata"]["labels"]["walras.dev/job"], []).append(pod)
        with self._lock:
            paused = set(self._paused)
        for job in sorted(set(self._last) - set(by_job)):
            del self._last[job]  # stopped: the next start does not count the gap
        for job, running in sorted(by_job.items()):
            if job in paused:
                continue
            rate = min(self.rate(job, gpu_type.get(p["spec"]["nodeName"], "")) for p in running)
            if job in self._last:
                self.steps[job] = self.steps.get(job, 0.0) + rate * (now - self._last[job])
            self._last[job] = now
            value = str(int(self.steps.get(job, 0.0)))
            for pod in running:
                if (pod["metadata"].get("annotations") or {}).get(ANN_STEPS_DONE) == value:
                    continue
                self.patch(pod["metadata"]["name"], value)

    def patch(self, pod: str, value: str) -> None:
        """Set one pod's annotation (what ``walras.workload.report_progress`` sends)."""
        devcluster.request(
            self.api,
            "PATCH",
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}",
            body={"metadata": {"annotations": {ANN_STEPS_DONE: value}}},
            content_type="application/merge-patch+json",
        )

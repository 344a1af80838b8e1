"""Watch real processes under the operator: what each container's runtime runs with which
GPUs, and what the reference workload logged, sampled by a thread.

Test and benchmark infrastructure (tests/integration/test_real_workloads.py,
bench/bench_real_nodes.py). :class:`Observer` asks every real node's containerd, every
``interval`` seconds, which application containers run and which devices each holds
(``NVIDIA_VISIBLE_DEVICES`` in the container's spec, which the kubelet's device manager set),
lists the namespace's Walras pods (round, replica, node, the ``walras.dev/steps-done`` annotation
as it changes), and follows each pod's log through the API server and its kubelet from the
moment the container starts until it ends, so that the log of a pod deleted at the end of its
slice is kept. :func:`parse_log` reads what ``walras.workload.Run`` logged: where a start
resumed, its checkpoints, the step it stopped at and why, and ``done``.

Each reading carries the observer's clock (``time.time()`` when the sample was taken): an event
is known to within one ``interval``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from walras.testing import devcluster, realnodes

STEPS_ANNOTATION = "walras.dev/steps-done"

# ------------------------------------------------------------------ logs

_RESUMED = re.compile(r"walras\.workload: resumed from step (\d+) ")
_FRESH = re.compile(r"walras\.workload: no checkpoint in .*: starting at step 0")
_CHECKPOINT = re.compile(r"walras\.workload: checkpoint at step (\d+) ")
_STOPPING = re.compile(r"walras\.workload: stopping at step (\d+) \((.*)\): exit 0")
_DONE = re.compile(r"walras\.workload: done: (\d+) steps")


@dataclass
class WorkloadLog:
    """What one container of the reference workload said about its run."""

    start_step: int | None = None
    checkpoints: list[int] = field(default_factory=list)
    stopped_at: int | None = None
    stop_reason: str = ""
    done: int | None = None


def parse_log(text: str) -> WorkloadLog:
    out = WorkloadLog()
    for line in text.splitlines():
        if m := _RESUMED.search(line):
            out.start_step = int(m.group(1))
        elif _FRESH.search(line):
            out.start_step = 0
        elif m := _CHECKPOINT.search(line):
            out.checkpoints.append(int(m.group(1)))
        elif m := _STOPPING.search(line):
            out.stopped_at, out.stop_reason = int(m.group(1)), m.group(2)
        elif m := _DONE.search(line):
            out.done = int(m.group(1))
    return out


# ------------------------------------------------------------------ observer


@dataclass(frozen=True)
class Sample:
    """One look at every real node's runtime."""

    at: float
    #: node -> the running application containers of the namespace (or all, for GPU counts)
    containers: dict[str, list[realnodes.RunningContainer]]


@dataclass
class PodSeen:
    name: str
    job: str
    round: int
    replica: int
    node: str = ""
    created: str = ""
    deletion: str = ""
    phase: str = ""
    reason: str = ""
    #: When the observer first saw it, and each new ``walras.dev/steps-done`` value with when.
    first_seen: float = 0.0
    reports: list[tuple[float, int]] = field(default_factory=list)


class Observer(threading.Thread):
    """Samples the runtimes and follows pod logs until :meth:`stop` (see the module docstring)."""

    def __init__(
        self,
        cp: devcluster.ControlPlane,
        nodes: Iterable[realnodes.RealNode],
        namespace: str,
        interval: float = 1.0,
    ) -> None:
        super().__init__(daemon=True, name=f"observer-{namespace}")
        self.api = devcluster.new_client(cp.admin_kubeconfig)
        self.core = k8s.CoreV1Api(self.api)
        self.nodes = list(nodes)
        self.namespace = namespace
        self.interval = interval
        self.samples: list[Sample] = []
        self.pods: dict[str, PodSeen] = {}
        self.logs: dict[str, str] = {}
        self.errors: list[str] = []
        #: node -> samples in which its runtime did not answer
        self.unanswered: dict[str, int] = {}
        self._halt = threading.Event()
        self._followers: dict[str, threading.Thread] = {}
        self._cache: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        while not self._halt.is_set():
            began = time.monotonic()
            try:
                self._look()
            except Exception as exc:  # recorded: a test asserts there were none
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._halt.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)
        for thread in list(self._followers.values()):
            thread.join(timeout=15)
        self.api.close()

    def _look(self) -> None:
        now = time.time()
        containers: dict[str, list[realnodes.RunningContainer]] = {}
        for node in self.nodes:
            try:
                containers[node.name] = realnodes.running_containers(node, self._cache)
            except realnodes.RealNodeError:
                # A node whose runtime is gone (a test killed it) runs nothing: its processes
                # died with it. Counted, so that a test can tell it from a quiet node.
                self.unanswered[node.name] = self.unanswered.get(node.name, 0) + 1
                containers[node.name] = []
        self.samples.append(Sample(now, containers))
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        pods = devcluster.request(self.api, "GET", path, query={"labelSelector": "walras.dev/job"})
        for pod in pods["items"]:
            meta, status = pod["metadata"], pod.get("status") or {}
            name = meta["name"]
            seen = self.pods.get(name)
            if seen is None:
                labels, annotations = meta.get("labels", {}), meta.get("annotations", {})
                seen = PodSeen(
                    name=name,
                    job=labels["walras.dev/job"],
                    round=int(annotations.get("walras.dev/round", "-1")),
                    # An adopted Indexed Job's pod: its completion index is its replica.
                    replica=int(
                        labels.get("walras.dev/replica")
                        or labels.get("batch.kubernetes.io/job-completion-index", "-1")
                    ),
                    created=meta.get("creationTimestamp", ""),
                    first_seen=now,
                )
                self.pods[name] = seen
            seen.node = pod["spec"].get("nodeName") or seen.node
            seen.deletion = meta.get("deletionTimestamp") or seen.deletion
            seen.phase = status.get("phase", seen.phase)
            steps = (meta.get("annotations") or {}).get(STEPS_ANNOTATION)
            if steps is not None and (not seen.reports or seen.reports[-1][1] != int(steps)):
                seen.reports.append((now, int(steps)))
            seen.reason = status.get("reason", seen.reason)
            started = any(
                "running" in s.get("state", {}) or "terminated" in s.get("state", {})
                for s in status.get("containerStatuses") or []
            )
            if started and name not in self._followers:
                thread = threading.Thread(target=self._follow, args=(name,), daemon=True)
                self._followers[name] = thread
                thread.start()

    def _follow(self, name: str) -> None:
        """The container's whole log, read as it is written until the container ends."""
        try:
            # Unread (``_preload_content=False``): a urllib3 response streamed as it comes.
            response: Any = self.core.read_namespaced_pod_log(
                name, self.namespace, follow=True, _preload_content=False
            )
            for chunk in response.stream(4096):
                with self._lock:
                    self.logs[name] = self.logs.get(name, "") + chunk.decode(errors="replace")
            response.release_conn()
        except Exception as exc:
            self.errors.append(f"log of {name}: {type(exc).__name__}: {exc}")

    # -- readings ----------------------------------------------------------------------------
    def log(self, name: str) -> WorkloadLog:
        with self._lock:
            return parse_log(self.logs.get(name, ""))

    def starts(self, job: str, replica: int = 0) -> list[PodSeen]:
        """The job's pods of one replica, in the order of their rounds."""
        return sorted(
            (p for p in self.pods.values() if p.job == job and p.replica == replica),
            key=lambda p: p.round,
        )

    def over_committed(self, gpus: Mapping[str, int]) -> list[str]:
        """Every moment a node's running containers held a device twice, or more devices
        than the node has (``gpus``: node -> devices)."""
        found = []
        for sample in self.samples:
            for node, running in sample.containers.items():
                held = [d for c in running for d in c.devices]
                if len(held) != len(set(held)) or len(held) > gpus[node]:
                    found.append(f"t={sample.at:.1f} {node}: {held}")
        return found

    def duplicate_gangs(self) -> list[str]:
        """Every moment a job had running containers from two rounds (two copies of its gang)."""
        found = []
        for sample in self.samples:
            rounds: dict[str, set[int]] = {}
            for running in sample.containers.values():
                for c in running:
                    seen = self.pods.get(c.pod)
                    if c.namespace == self.namespace and seen is not None:
                        rounds.setdefault(seen.job, set()).add(seen.round)
            for job, rs in rounds.items():
                if len(rs) > 1:
                    found.append(f"t={sample.at:.1f} {job}: rounds {sorted(rs)}")
        return found

"""The demo's real part: training processes on real nodes, when this machine can run them.

When :func:`unavailable` says nothing is missing (root on Linux with containerd, runc, the CNI
plugins and the kubelet from ``make tools``), the demo's control plane gets :data:`NODES` real
nodes (a kubelet and a containerd each, :mod:`walras.testing.realnodes`) of :data:`GPUS` fake GPUs
of type :data:`GPU_TYPE`, a ResourcePool for them, and :data:`JOBS` FungibleJobs of the reference
workload (``examples/workloads/train.py`` through :mod:`walras.testing.reference_jobs`) in the
namespace :data:`NAMESPACE`: gangs of 2 pods of 2 GPUs, so two gangs fit at a time and they take
turns. The other pools stay kwok.

:class:`walras.testing.runtime_observer.Observer` records each job's own progress reports (the
``walras.dev/steps-done`` value the process writes on its pod, with when it was seen), when each
of its pods was deleted, and each container's log. :func:`plot` draws each job's steps over time
from those reports, with a cross where a start was preempted (its last report before its pod
was deleted) and a circle where a start resumed (its first report, at the step its log says it
resumed from).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walras.plotting import pyplot

GPU_TYPE = "real-gpu"
NODES = 2
GPUS = 4
NAMESPACE = "real-train"
JOBS = ("mlp-a", "mlp-b", "mlp-c")
STEPS = 1500
"""Per job: 15 s of running at 100 steps/s, so the three jobs take turns for about 25 s."""
GROUP, VERSION = "walras.dev", "v1alpha1"


def unavailable() -> str | None:
    """``None`` when real nodes can run here, else one line saying what is missing."""
    from walras.testing import realnodes

    return realnodes.missing_capability()


@dataclass
class RealPart:
    """The real nodes, where the jobs checkpoint, and what the observer saw."""

    nodes: list[Any]
    checkpoints: tempfile.TemporaryDirectory[str]
    observer: Any = None
    started: float = field(default_factory=time.time)

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()
        self.checkpoints.cleanup()


def add_nodes(control_plane: Any, api: Any) -> RealPart:
    """Join the real nodes (the workload image imported into each) and create their pool."""
    from kubernetes import client

    from walras.testing import devcluster, realnodes

    archive = realnodes.workload_image_archive()
    nodes = [
        realnodes.add_real_node(
            control_plane, f"real-{i}", gpu_type=GPU_TYPE, gpus=GPUS, images=[archive]
        )
        for i in range(NODES)
    ]
    pool = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourcePool",
        "metadata": {"name": GPU_TYPE},
        "spec": {"gpuType": GPU_TYPE, "nodeSelector": {devcluster.GPU_TYPE_LABEL: GPU_TYPE}},
    }
    client.CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, "resourcepools", pool)
    return RealPart(nodes, tempfile.TemporaryDirectory(prefix="walras-demo-ckpt-"))


def submit(control_plane: Any, api: Any, part: RealPart) -> None:
    """The namespace with the example's reporting grant, the jobs, and the observer."""
    from kubernetes import client

    from walras.testing import devcluster
    from walras.testing.reference_jobs import setup_namespace, train_job
    from walras.testing.runtime_observer import Observer

    devcluster.create_namespace(api, NAMESPACE)
    setup_namespace(api, NAMESPACE)
    part.observer = Observer(control_plane, part.nodes, NAMESPACE, interval=0.5)
    part.observer.start()
    part.started = time.time()
    custom = client.CustomObjectsApi(api)
    for name in JOBS:
        job = train_job(name, Path(part.checkpoints.name) / name, STEPS, gpu_type=GPU_TYPE)
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "fungiblejobs", job)


def progress(api: Any) -> dict[str, tuple[str, float]]:
    """Per real job: its phase and ``status.progress.stepsDone``."""
    from kubernetes import client

    listed: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "fungiblejobs"
    )
    items: list[dict[str, Any]] = listed["items"]
    out: dict[str, tuple[str, float]] = {}
    for job in items:
        status = job.get("status") or {}
        steps = float((status.get("progress") or {}).get("stepsDone", 0) or 0)
        out[job["metadata"]["name"]] = (str(status.get("phase", "")), steps)
    return out


def wait_finished(
    api: Any, timeout: float, say: Callable[[str], None], alive: Callable[[], None]
) -> bool:
    """Until every real job succeeded (True) or ``timeout`` passed (False); ``alive`` raises
    when the operator died; ``say`` gets a progress line every few seconds."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        alive()
        now = progress(api)
        line = ", ".join(f"{n} {p or '-'} {s:.0f}/{STEPS}" for n, (p, s) in sorted(now.items()))
        if line != last:
            say(line)
            last = line
        if len(now) == len(JOBS) and all(p == "Succeeded" for p, _ in now.values()):
            return True
        time.sleep(2.0)
    return False


@dataclass(frozen=True)
class Start:
    """One start of a job's gang (its replica 0): reports, where it resumed, how it ended."""

    pod: str
    reports: list[tuple[float, int]]
    resumed_from: int | None
    preempted: bool


def starts(observer: Any) -> dict[str, list[Start]]:
    out: dict[str, list[Start]] = {}
    for name in JOBS:
        for pod in observer.starts(name):
            log = observer.log(pod.name)
            out.setdefault(name, []).append(
                Start(
                    pod.name,
                    list(pod.reports),
                    log.start_step,
                    log.stop_reason == "SIGTERM" or (bool(pod.deletion) and log.done is None),
                )
            )
    return out


def plot(part: RealPart, path: Path) -> Path:
    """Each real job's steps over time, from its own reports; preemptions and resumes marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    marked: set[str] = set()
    for name, runs in starts(part.observer).items():
        xs: list[float] = []
        ys: list[float] = []
        for i, run in enumerate(runs):
            points = [(t - part.started, n) for t, n in run.reports]
            if not points:
                continue
            xs += [p[0] for p in points] + [float("nan")]
            ys += [p[1] for p in points] + [float("nan")]
            if i > 0 and run.resumed_from is not None:
                label = "" if "resume" in marked else "resume (from its checkpoint)"
                marked.add("resume")
                ax.plot(points[0][0], run.resumed_from, "o", color="green", label=label)
            if run.preempted:
                label = "" if "preempt" in marked else "preempted (SIGTERM)"
                marked.add("preempt")
                ax.plot(points[-1][0], points[-1][1], "x", color="red", ms=9, label=label)
        ax.plot(xs, ys, label=name)
    ax.axhline(STEPS, color="grey", lw=0.8, ls="--", label="totalWork")
    ax.set_xlabel("seconds since the jobs were submitted")
    ax.set_ylabel("steps (the job's own reports)")
    ax.set_title(f"Real training processes on {NODES} real nodes, time-shared by Walras")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

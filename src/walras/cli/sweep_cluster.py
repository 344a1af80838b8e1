"""``walras simulate sweep SPEC.yaml --on-cluster``: a sweep's cells as one Kubernetes Indexed Job.

Kubernetes is the distributed engine: the sweep becomes a ConfigMap (the spec, rewritten to name
the shipped files, and the trace and throughputs file themselves) and an Indexed Job with one
completion per cell (``completionMode: Indexed``, ``completions`` = cells, ``parallelism`` = at
most that). Index I runs ``walras simulate sweep /etc/walras-sweep/spec.yaml --cell I`` in the
project image and writes the cell's row, one JSON object, to its termination message; the
command here waits (a progress bar of completed indexes), reads each index's row from its
succeeded pod's ``state.terminated.message`` and hands the rows, in cell order, to the local
sweep's own table and plot (:mod:`walras.sim.sweep`), so both print the same thing.

Why the termination message: a row is a few hundred bytes, well under the kubelet's 4096-byte cap
on a message (an error text is cut to :data:`ERROR_CHARS` so that the JSON stays whole), and it is
part of the pod's status, so reading it needs only ``get``/``list`` on pods, neither the kubelet's
log endpoint nor a write permission for the pods: they run with no ServiceAccount token at all.
A cell that fails (a non-zero exit; ``backoffLimitPerIndex: 0``, so an index is tried once) is
reported by its index with the reason the kubelet recorded: with ``FallbackToLogsOnError`` that
is the tail of the container's output, i.e. the command's one-line error.
A pod that cannot start at all (its image missing, say: :data:`STUCK_REASONS`) never fails, so
the Job would never finish; the wait ends there with the pod's reason instead.

The Job is created suspended, then the ConfigMap owned by it (``ownerReferences``), then the Job
resumed: no pod starts before its volume exists, and deleting the Job deletes both. The Job and its
pods stay after the run for inspection (``kubectl describe job NAME``).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import yaml

from walras.sim import sweep
from walras.sim.errors import SimInputError

SPEC_DIR = "/etc/walras-sweep"
SPEC_KEY = "spec.yaml"
TRACE_KEY = "sweep.trace"
THROUGHPUTS_KEY = "throughputs.json"
SWEEP_LABEL = "walras.dev/sweep"
#: A ConfigMap holds at most 1 MiB (the API server's limit on an object in etcd), less metadata.
CONFIGMAP_BYTES = 1_000_000
#: Waiting reasons of a container that will not start without a change by the user (the Job would
#: wait for it forever: ``backoffLimitPerIndex`` counts failures, and such a pod never fails).
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
#: Characters of a cell's error text kept in its termination message (the kubelet keeps 4096 bytes).
ERROR_CHARS = 2000


class ClusterSweepError(Exception):
    """The sweep's Job did not finish with every index: the message names what was seen."""


@dataclasses.dataclass(frozen=True, slots=True)
class CellFailure:
    index: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    name: str
    namespace: str
    image: str
    parallelism: int
    cpu: str = "1"
    memory: str = "1Gi"
    image_pull_policy: str = "IfNotPresent"


def bundle(spec_path: pathlib.Path) -> tuple[sweep.SweepSpec, dict[str, str]]:
    """The checked spec and the ConfigMap data that ships it (spec, trace, throughputs)."""
    spec = sweep.load_spec(spec_path)
    if not sweep.runs(spec):
        raise SimInputError("the sweep has no runs (empty policies, seeds or rates)")
    sweep.check(spec)
    data: dict[str, str] = {}
    files = [("trace", spec.trace, TRACE_KEY)]
    if spec.throughputs is not None:
        files.append(("throughputs", spec.throughputs, THROUGHPUTS_KEY))
    for key, path, name in files:
        try:
            data[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SimInputError(f"{spec_path.name}: {key}: cannot read {path}: {exc}") from exc
    shipped = sweep.dump_spec(
        spec, trace=TRACE_KEY, throughputs=THROUGHPUTS_KEY if spec.throughputs else None
    )
    data[SPEC_KEY] = yaml.safe_dump(shipped, sort_keys=False)
    size = sum(len(v.encode()) for v in data.values())
    if size > CONFIGMAP_BYTES:
        raise SimInputError(
            f"{spec_path.name}: trace and spec are {size} bytes; a ConfigMap holds at most "
            f"{CONFIGMAP_BYTES} (use a smaller trace or a window of it)"
        )
    return spec, data


def configmap_manifest(options: Options, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": options.name,
            "namespace": options.namespace,
            "labels": {SWEEP_LABEL: options.name},
        },
        "data": dict(data),
    }


def job_manifest(options: Options, cells: int) -> dict[str, Any]:
    """The Indexed Job: one completion per cell, each index tried once."""
    command = (
        f'walras simulate sweep {SPEC_DIR}/{SPEC_KEY} --cell "$JOB_COMPLETION_INDEX"'
        " > /dev/termination-log"
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": options.name,
            "namespace": options.namespace,
            "labels": {SWEEP_LABEL: options.name},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": cells,
            "parallelism": max(1, min(options.parallelism, cells)),
            # A cell is deterministic: a retry would fail the same way. The Job still runs the
            # other indexes and ends Failed with the failed ones listed in status.failedIndexes.
            "backoffLimitPerIndex": 0,
            "suspend": True,  # resumed once its ConfigMap exists (run_on_cluster)
            "template": {
                "metadata": {"labels": {SWEEP_LABEL: options.name}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,  # a cell never calls the API
                    "securityContext": {"runAsNonRoot": True},
                    "containers": [
                        {
                            "name": "cell",
                            "image": options.image,
                            "imagePullPolicy": options.image_pull_policy,
                            "command": ["/bin/sh", "-c", command],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "resources": {
                                "requests": {"cpu": options.cpu, "memory": options.memory},
                                "limits": {"memory": options.memory},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "sweep", "mountPath": SPEC_DIR, "readOnly": True},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "sweep", "configMap": {"name": options.name}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


class SweepApi(Protocol):
    """The requests the sweep makes (plain JSON objects in and out)."""

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def read_job(self, namespace: str, name: str) -> dict[str, Any]: ...

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]: ...

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...


def parse_indexes(text: str | None) -> list[int]:
    """A Job status index list, e.g. ``"0,2-4"`` -> [0, 2, 3, 4]."""
    out: list[int] = []
    for part in (text or "").split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def _index(pod: Mapping[str, Any]) -> int | None:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    value = annotations.get("batch.kubernetes.io/job-completion-index")
    return int(value) if value is not None else None


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any]:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if "terminated" in state:
            return dict(state["terminated"])
    return {}


def collect(
    pods: list[dict[str, Any]], cells: int, failed: list[int]
) -> tuple[dict[int, dict[str, Any]], list[CellFailure]]:
    """Each index's row (from its succeeded pod's termination message) and each failed index's
    reason (from its failed pod's terminated state, else the pod's status)."""
    rows: dict[int, dict[str, Any]] = {}
    failures: dict[int, str] = {}
    for pod in pods:
        index = _index(pod)
        if index is None or not 0 <= index < cells:
            continue
        phase = pod.get("status", {}).get("phase")
        terminated = _terminated(pod)
        message = str(terminated.get("message") or "").strip()
        if phase == "Succeeded":
            try:
                row = json.loads(message.splitlines()[-1]) if message else None
            except ValueError:
                row = None
            if isinstance(row, dict):
                rows[index] = row
                failures.pop(index, None)
            else:
                failures[index] = f"succeeded without a result row (message {message[:200]!r})"
        elif phase == "Failed" and index not in rows:
            why = message or str(terminated.get("reason") or pod["status"].get("reason") or "")
            code = terminated.get("exitCode")
            failures[index] = (f"exit {code}: " if code is not None else "") + (
                " ".join(why.split())[-500:] or "failed"
            )
    for index in failed:
        if index not in rows:
            failures.setdefault(index, "failed (no pod left to say why)")
    for index in range(cells):
        if index not in rows and index not in failures:
            failures[index] = "no result (its pod is gone)"
    return rows, [CellFailure(i, failures[i]) for i in sorted(failures)]


def stuck(pods: list[dict[str, Any]]) -> str | None:
    """The first pod whose container cannot start (:data:`STUCK_REASONS`), described, or None."""
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_REASONS:
                name = pod["metadata"].get("name", "?")
                message = " ".join(str(waiting.get("message") or "").split())[:300]
                return f"pod {name} (cell {_index(pod)}) cannot start: {waiting['reason']}" + (
                    f": {message}" if message else ""
                )
    return None


def _finished(job: Mapping[str, Any]) -> bool:
    for cond in job.get("status", {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return True
    return False


def run_on_cluster(
    api: SweepApi,
    options: Options,
    data: Mapping[str, str],
    cells: int,
    *,
    progress: Callable[[int, int, int], None] = lambda done, failed, total: None,
    poll_s: float = 2.0,
    timeout_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[dict[str, Any]], list[CellFailure]]:
    """Create the ConfigMap and the Job, wait until the Job finishes, return the rows in cell order
    (the failed cells' rows left out) and the failures."""
    job = api.create_job(options.namespace, job_manifest(options, cells))
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": options.name,
        "uid": job["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    configmap = configmap_manifest(options, data)
    configmap["metadata"]["ownerReferences"] = [owner]
    api.create_configmap(options.namespace, configmap)
    api.patch_job(options.namespace, options.name, {"spec": {"suspend": False}})
    started = time.monotonic()
    while True:
        job = api.read_job(options.namespace, options.name)
        status = job.get("status", {})
        done = len(parse_indexes(status.get("completedIndexes")))
        failed = parse_indexes(status.get("failedIndexes"))
        progress(done, len(failed), cells)
        if _finished(job) or (done + len(failed) >= cells and not status.get("active")):
            break
        selector = f"{SWEEP_LABEL}={options.name}"
        blocked = stuck(api.list_pods(options.namespace, selector))
        if blocked is not None:
            raise ClusterSweepError(
                f"job {options.namespace}/{options.name}: {blocked} (the Job is left running: "
                f"kubectl delete job -n {options.namespace} {options.name})"
            )
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise ClusterSweepError(
                f"job {options.namespace}/{options.name}: {done} of {cells} cells done after "
                f"{timeout_s:.0f} s; it keeps running (kubectl describe job {options.name})"
            )
        sleep(poll_s)
    pods = api.list_pods(options.namespace, f"{SWEEP_LABEL}={options.name}")
    rows, failures = collect(pods, cells, failed)
    return [rows[i] for i in range(cells) if i in rows], failures


class KubeSweepApi:
    """:class:`SweepApi` over a ``kubernetes`` ApiClient (JSON in, JSON out)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        # Plain dicts in (the client serialises them as they are), raw JSON out: Any, not the
        # client's model types.
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(response.data)
        return data

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(
            self.core.create_namespaced_config_map(namespace, dict(body), _preload_content=False)
        )

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(
            self.batch.create_namespaced_job(namespace, dict(body), _preload_content=False)
        )

    def read_job(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(self.batch.read_namespaced_job(name, namespace, _preload_content=False))

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(
            self.batch.patch_namespaced_job(name, namespace, dict(patch), _preload_content=False)
        )

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        listed = self._json(
            self.core.list_namespaced_pod(
                namespace, label_selector=selector, _preload_content=False
            )
        )
        return list(listed.get("items") or [])

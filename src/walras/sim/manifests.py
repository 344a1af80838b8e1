"""FungibleJob manifests as a simulator workload ("what if I switched policy?").

Two inputs, one reader:

- a YAML file holding FungibleJob manifests: a list, a multi-document stream, or a ``kind: List``
  (what ``kubectl get fjob -A -o yaml`` prints for a live cluster);
- each job's arrival, in seconds from the start of the run: the annotation
  ``walras.dev/arrival-seconds`` when present, else its ``creationTimestamp`` relative to the
  earliest one in the file, else 0.

Jobs are simulated as written (template, utility, replicas, throughput table), so
``--semantics walras`` runs them exactly as the operator would. Each job needs ``spec.totalWork``
(the simulated pods finish when it is done); a job already finished (``status.phase``
``Succeeded`` or ``Failed``) is left out, and a running job's ``status.workDone`` is subtracted.
Every error names the document, the job and the field.

PriorityClass documents (``scheduling.k8s.io/v1``) in the same file are read too, and the
simulated cluster has them, as the operator's has its classes (``walras.core.priorities``). A job
whose ``spec.template.spec.priorityClassName`` names a class the file lacks is simulated as the
default class, with a warning naming the document and the field.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from walras.core import model, priorities
from walras.sim.cluster import Cluster
from walras.sim.errors import SimInputError
from walras.sim.workload import Workload

ARRIVAL_ANNOTATION = "walras.dev/arrival-seconds"


@dataclass(frozen=True, slots=True)
class ManifestWorkload(Workload):
    """A workload whose jobs are the FungibleJob manifests themselves (``manifests[j]``)."""

    manifests: tuple[Mapping[str, Any], ...] = ()
    # PriorityClass documents of the file, and what the reader warns about (names the field).
    priority_classes: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()


def _documents(path: pathlib.Path) -> list[Any]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise SimInputError(f"{path}: cannot read YAML: {exc}") from None
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            out.extend(doc)
        elif isinstance(doc, Mapping) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def is_manifest_file(path: pathlib.Path) -> bool:
    """Whether ``path`` looks like YAML manifests rather than a Gavel ``.trace``."""
    return path.suffix.lower() in (".yaml", ".yml", ".json")


def load_manifests(path: pathlib.Path, cluster: Cluster) -> ManifestWorkload:
    """The jobs of ``path`` on ``cluster``'s GPU types (see the module docstring)."""
    docs = _documents(path)
    jobs: list[tuple[int, Mapping[str, Any]]] = []
    classes: list[Mapping[str, Any]] = []
    for i, doc in enumerate(docs, start=1):
        if isinstance(doc, Mapping) and doc.get("kind") == priorities.PRIORITY_CLASS_KIND:
            classes.append(doc)
            continue
        if not isinstance(doc, Mapping) or doc.get("kind") != "FungibleJob":
            raise SimInputError(
                f"{path}: document {i}: not a FungibleJob or PriorityClass manifest"
            )
        phase = (doc.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        jobs.append((i, doc))
    if not jobs:
        raise SimInputError(f"{path}: no unfinished FungibleJob to simulate")
    stamps = [model.parse_time((d.get("metadata") or {}).get("creationTimestamp")) for _, d in jobs]
    origin = min((s for s in stamps if s is not None), default=0.0)
    types = cluster.gpu_types
    names: list[str] = []
    total: list[float] = []
    replicas: list[int] = []
    arrivals: list[float] = []
    weights: list[float] = []
    rows: list[list[float]] = []
    manifests: list[Mapping[str, Any]] = []
    class_names = {priorities.parse_priority_class(c).name for c in classes}
    warnings: list[str] = []
    for (i, doc), stamp in zip(jobs, stamps, strict=True):
        meta = doc.get("metadata") or {}
        spec = doc.get("spec") or {}
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or f'#{i}'}"
        where = f"{path}: document {i} ({name})"
        work = spec.get("totalWork")
        if not isinstance(work, int | float) or isinstance(work, bool) or work <= 0:
            raise SimInputError(f"{where}: spec.totalWork: a positive number is required")
        done = (doc.get("status") or {}).get("workDone") or 0.0
        left = float(work) - float(done) if isinstance(done, int | float) else float(work)
        throughput = spec.get("throughput") or {}
        if not isinstance(throughput, Mapping):
            raise SimInputError(f"{where}: spec.throughput: a map of GPU type to work/s expected")
        unknown = sorted(set(throughput) - set(types))
        row = [float(throughput.get(t) or 0.0) for t in types]
        if not any(v > 0 for v in row):
            raise SimInputError(
                f"{where}: spec.throughput: no positive throughput on the cluster's GPU types "
                f"{', '.join(types)}" + (f" (it names {', '.join(unknown)})" if unknown else "")
            )
        annotations = meta.get("annotations") or {}
        if ARRIVAL_ANNOTATION in annotations:
            try:
                arrival = float(annotations[ARRIVAL_ANNOTATION])
            except (TypeError, ValueError):
                raise SimInputError(
                    f"{where}: metadata.annotations[{ARRIVAL_ANNOTATION}]: not a number"
                ) from None
        else:
            arrival = (stamp - origin) if stamp is not None else 0.0
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        wanted = pod_spec.get("priorityClassName") if isinstance(pod_spec, Mapping) else None
        if wanted and wanted not in class_names:
            warnings.append(
                f"{where}: {priorities.FIELD}: no PriorityClass named {wanted!r} in the file; "
                "the job is simulated as the default class"
            )
        utility = spec.get("utility") or {}
        names.append(name)
        total.append(max(left, 1e-9))
        replicas.append(int(spec.get("replicas") or 1))
        arrivals.append(max(arrival, 0.0))
        weights.append(float(utility.get("weight") or 1.0))
        rows.append(row)
        manifests.append(doc)
    return ManifestWorkload(
        source=str(path),
        job_types=tuple(names),
        lines=tuple(i for i, _ in jobs),
        # Work units need not be whole steps for manifests (Tally and mechanics read floats).
        total_steps=np.array(total, dtype=np.float64),
        scale_factors=np.array(replicas, dtype=np.int64),
        arrivals=np.array(arrivals, dtype=np.float64),
        priority_weights=np.array(weights, dtype=np.float64),
        throughputs=np.array(rows, dtype=np.float64).reshape(len(rows), len(types)),
        gpu_types=types,
        manifests=tuple(manifests),
        priority_classes=tuple(classes),
        warnings=tuple(warnings),
    )


def job_manifests(workload: ManifestWorkload) -> Sequence[Mapping[str, Any]]:
    """The manifests, in row order."""
    return workload.manifests

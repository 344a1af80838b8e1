"""``walras simulate --tenants TENANTS.yaml``: Tenant objects in a simulation, and the per-tenant
report.

The file holds Tenant manifests (a multi-document YAML stream, a list, or a ``kind: List``), each
validated by the CRD's model (``walras.core.schema.tenant``) as the API server would, then by the
controller's checks (``walras.core.tenant_tree``: parents, cycles, guarantees within the pools'
GPUs). Where the controller would fall back to a flat tenant with a condition, the simulator
refuses the file instead: a simulation is asked a question about the quotas as written. Every
error names the file, the document (1-based) and the field.

The Tenants go into the simulated API as the operator's watch gets them, so the cycle's snapshot
resolves tenants and quotas exactly as in the operator. A job's tenant is the Tenant listing its
namespace (else its namespace). A Gavel ``.trace`` has no namespaces (every job is in ``sim``);
FungibleJob manifests carry their own, and ``walras simulate generate OUT.yaml --tenant
NAME=RATE ...`` writes a multi-tenant workload that way.

``--no-quotas`` hands the scheduler the same Tenants without ``spec.quotas`` (weights, namespaces
and hierarchy kept) while the report still measures the written guarantees: what the tenants
would have had without enforcement.

Per tenant (each tenant of a job, and each Tenant of the file), the report gives
``guarantee_met`` (:mod:`walras.sim.guarantees`), ``avg_jct_s`` over its finished jobs and
``gpu_hours`` its jobs held (restart seconds included, as utilisation counts them).
"""

from __future__ import annotations

import copy
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from walras.core import cycle, governance, model, tenant_tree
from walras.core.schema.parsing import field_path
from walras.core.schema.tenant import Tenant
from walras.core.snapshot import Store
from walras.sim import guarantees
from walras.sim.config import SimConfig
from walras.sim.errors import SimInputError
from walras.sim.guarantees import TenantReport
from walras.sim.tally import Tally


def _documents(path: pathlib.Path) -> list[Any]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SimInputError(f"--tenants: {path}: cannot read YAML: {exc}") from None
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            out.extend(doc)
        elif isinstance(doc, Mapping) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def load_tenants(
    path: pathlib.Path, capacity: Mapping[str, float]
) -> tuple[Mapping[str, Any], ...]:
    """The Tenant manifests of ``path``, checked (module docstring); ``capacity``: the simulated
    cluster's GPUs per type."""
    docs = _documents(path)
    if not docs:
        raise SimInputError(f"--tenants: {path}: no Tenant manifest in the file")
    where: dict[str, str] = {}
    out: list[Mapping[str, Any]] = []
    for i, doc in enumerate(docs, start=1):
        at = f"--tenants: {path}: document {i}"
        if not isinstance(doc, Mapping) or doc.get("kind") != "Tenant":
            raise SimInputError(f"{at}: kind: expected Tenant")
        name = (doc.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise SimInputError(f"{at}: metadata.name: a Tenant needs a name")
        at = f"{at} (tenant {name})"
        try:
            Tenant.model_validate(doc)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            path_ = field_path(tuple(err["loc"]), root="").lstrip(".")
            raise SimInputError(f"{at}: {path_}: {err['msg']}, got {err.get('input')!r}") from None
        if name in where:
            raise SimInputError(f"{at}: metadata.name: also the name of {where[name]}")
        where[name] = f"document {i}"
        out.append(copy.deepcopy(dict(doc)))
    parsed = {s.name: s for s in (governance.parse_tenant(d) for d in out)}
    _, problems = tenant_tree.validate(parsed, capacity)
    for name, problem in sorted(problems.items()):
        raise SimInputError(f"--tenants: {path}: {where[name]} (tenant {name}): {problem.message}")
    return tuple(out)


def without_quotas(docs: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The Tenants as ``--no-quotas`` hands them to the scheduler."""
    out = []
    for doc in docs:
        spec = {k: v for k, v in dict(doc.get("spec") or {}).items() if k != "quotas"}
        out.append({**doc, "spec": spec})
    return tuple(out)


def measured(
    docs: Sequence[Mapping[str, Any]], capacity: Mapping[str, float]
) -> dict[str, governance.TenantSpec]:
    """The tenants whose guarantees the report measures (as written, whatever ``--no-quotas``)."""
    parsed = {s.name: s for s in (governance.parse_tenant(d) for d in docs)}
    return tenant_tree.validate(dict(sorted(parsed.items())), capacity)[0]


def summary(report: TenantReport, tally: Tally) -> dict[str, dict[str, float | None]]:
    """``{tenant: {"guarantee_met", "avg_jct_s", "gpu_hours"}}`` (module docstring)."""
    jct = tally.jct_s()
    names = sorted(set(report.names) | {t for t in report.job_tenant if t})
    out: dict[str, dict[str, float | None]] = {}
    for name in names:
        rows = [j for j, t in enumerate(report.job_tenant) if t == name]
        done = np.array([jct[j] for j in rows if not math.isnan(jct[j])], dtype=np.float64)
        out[name] = {
            "guarantee_met": report.guarantees.fraction(name),
            "avg_jct_s": float(done.mean()) if done.size else None,
            "gpu_hours": sum(tally.gpu_seconds[j] for j in rows) / 3600.0,
        }
    return out


def attach(
    config: SimConfig, capacity: Mapping[str, float], store: Store, tally: Tally
) -> dict[str, governance.TenantSpec] | None:
    """Put the run's Tenants into the simulated API (without quotas under ``--no-quotas``) and
    start the tally's per-tenant report; the measured tenants, or None without ``--tenants``."""
    if not config.tenants:
        return None
    for doc in config.tenants if config.quotas else without_quotas(config.tenants):
        store.upsert("tenant", dict(doc))
    tenants = measured(config.tenants, capacity)
    tally.tenants = TenantReport(
        job_tenant=[""] * tally.workload.n_jobs, names=tuple(sorted(tenants))
    )
    return tenants


def observe(
    tally: Tally,
    tenants: Mapping[str, governance.TenantSpec],
    planned: cycle.CyclePlan,
    held: Mapping[model.JobKey, Mapping[str, int]],
) -> None:
    """One full round, once applied: ``held`` maps each running job to its GPUs per type."""
    report = tally.tenants
    if report is None:
        return
    placed_type = {key: max(per, key=lambda t: per[t]) for key, per in held.items() if per}
    jobs = [j for j in planned.active if j.key not in planned.finished]
    sol = planned.solution
    targets: dict[model.JobKey, dict[str, float]] = {}
    for i, job in enumerate(sol.jobs):
        per = targets.setdefault(job.key, {})
        for c, gpu_type in enumerate(sol.group_type):  # groups: types, or nodes (PS-DSF)
            per[gpu_type] = per.get(gpu_type, 0.0) + float(sol.targets[i, c])
    levels = guarantees.demand_levels(jobs, tenants, placed_type, targets)
    own: dict[str, dict[str, float]] = {}
    for key, per_type in held.items():
        row = own.setdefault(governance.tenant_of(key[0], tenants), {})
        for gpu_type, gpus in per_type.items():
            row[gpu_type] = row.get(gpu_type, 0.0) + gpus
    report.guarantees.observe(levels, guarantees.subtree_held(own, tenants))

"""Priorities: a job's Kubernetes PriorityClass, and what it means to Walras.

A job names a class as every pod does, ``spec.template.spec.priorityClassName`` (an adopted
Job's pod template too). The admin configures the classes on the ``scheduling.k8s.io/v1``
PriorityClass objects themselves (cluster-scoped, admin-owned), and the Tenants say who may use
which:

- **Value** (``PriorityClass.value``) orders the jobs *of one tenant*: among its jobs on one GPU
  group, the round's placements go to the higher value first, so when the tenant's GPUs shrink
  (another tenant reclaims its guarantee, a new tenant arrives) its lowest class loses GPUs first,
  as kube-scheduler preempts the lowest priority first. Between tenants the admin's weights and
  quotas decide, as before: a class never moves share from one tenant to another (kube-scheduler's
  cluster-wide preemption would let any tenant allowed a high class take other tenants'
  guaranteed GPUs). Equal values time-share as always.
- **Run to completion** (annotation ``walras.dev/time-sharing: "false"`` on the class): a job of
  such a class, once its whole gang runs, keeps its nodes until it finishes: it is never time
  sliced, moved or preempted by Walras. It is started only where its gang fits inside its
  tenant's guarantee of that GPU type, next to the tenant's other run-to-completion jobs (and so
  at every ancestor with a guarantee), so a reclaim never needs its GPUs: they are the tenant's
  own. Without a guarantee of the type it waits, with the reason. This is KAI-Scheduler's
  non-preemptible workload (only within the queue's deserved quota), in Walras's terms. The
  meaning sits on the class (admin-owned, like the class itself) rather than in each Tenant, so
  a class means the same everywhere; the Tenant only says who may use it.
- **Who may use a class**: a tenant's users may always *lower* their precedence: the default
  class, and any time-shared class whose value is at most the default's. Any other class must be
  listed in the job's Tenant, ``spec.priorityClasses``. A job naming a class it may not use, or a
  class that does not exist, is scheduled as the default and told so (``SpecWarnings``:
  ``PriorityClassNotAllowed`` / ``PriorityClassNotFound``, naming
  ``spec.template.spec.priorityClassName``), exactly as a weight outside the tenant's range is
  clamped. So a user cannot raise their own precedence beyond what their tenant allows.
- **Default**: a job without a class gets the PriorityClass with ``globalDefault: true`` (the
  one Kubernetes gives its pods; the lowest-named if several claim it), else value 0, time-shared.

Kubernetes applies the class to the pods too (the API server's Priority admission sets
``spec.priority``; it refuses a pod whose class does not exist). Walras binds its pods itself, so
kube-scheduler never preempts for them; who may put a class on a pod at all is Kubernetes' own
rule (a ResourceQuota scoped to the class).

Pure: parsed objects in, values out (``walras.core.realise`` and ``walras.core.field_notices``
call it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from walras.core import governance, model

PRIORITY_CLASS_KIND: Final = "PriorityClass"
PRIORITY_CLASS_PATH: Final = "/apis/scheduling.k8s.io/v1/priorityclasses"
ANN_TIME_SHARING: Final = "walras.dev/time-sharing"
FIELD: Final = "spec.template.spec.priorityClassName"
NOT_ALLOWED: Final = "PriorityClassNotAllowed"
NOT_FOUND: Final = "PriorityClassNotFound"
# PriorityClass.value's range (user classes at most one billion; system classes above).
MIN_VALUE: Final = -(2**31)
MAX_VALUE: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """One PriorityClass as Walras reads it."""

    name: str
    value: int = 0
    global_default: bool = False
    time_sharing: bool = True


@dataclass(frozen=True, slots=True)
class Effective:
    """The class a job is scheduled with (``name`` "" for the built-in default), and why it is
    not the one it asked for (``reason``/``message``; "" when it is)."""

    name: str
    value: int
    time_sharing: bool
    reason: str = ""
    message: str = ""


DEFAULT = Effective(name="", value=0, time_sharing=True)


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass:
    """A ``scheduling.k8s.io/v1`` PriorityClass dict (values the API server would refuse fall
    back to the defaults; an annotation other than ``"false"`` leaves the class time-shared)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    raw = obj.get("value")
    value = raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
    return PriorityClass(
        name=str(meta.get("name") or ""),
        value=min(max(value, MIN_VALUE), MAX_VALUE),
        global_default=obj.get("globalDefault") is True,
        time_sharing=str(annotations.get(ANN_TIME_SHARING, "")).strip().lower() != "false",
    )


def class_name(job: model.JobSpec) -> str:
    """``spec.template.spec.priorityClassName`` of the job ("" when unset; read once, by
    ``walras.core.model.parse_job``)."""
    return job.priority_class


def default_class(classes: Mapping[str, PriorityClass]) -> Effective:
    """The class of a job that names none (module docstring: Default)."""
    for name in sorted(classes):
        pc = classes[name]
        if pc.global_default:
            return Effective(pc.name, pc.value, pc.time_sharing)
    return DEFAULT


def allowed(pc: PriorityClass, tenant: governance.TenantSpec, default: Effective) -> bool:
    """May the tenant's jobs use ``pc``? Listed in the Tenant, or not raising precedence."""
    if pc.name in tenant.priority_classes or pc.name == default.name:
        return True
    return pc.time_sharing and pc.value <= default.value


def effective(
    job: model.JobSpec,
    classes: Mapping[str, PriorityClass],
    tenants: Mapping[str, governance.TenantSpec],
) -> Effective:
    """The class the job is scheduled with (module docstring)."""
    return _effective(job.namespace, class_name(job), classes, tenants, default_class(classes))


def _effective(
    namespace: str,
    name: str,
    classes: Mapping[str, PriorityClass],
    tenants: Mapping[str, governance.TenantSpec],
    default: Effective,
) -> Effective:
    if not name:
        return default
    pc = classes.get(name)
    fallback = f"it is scheduled as the default ({_describe(default)})"
    if pc is None:
        return Effective(
            default.name,
            default.value,
            default.time_sharing,
            NOT_FOUND,
            f"no PriorityClass named {name!r}; {fallback}",
        )
    tenant = governance.config(governance.tenant_of(namespace, tenants), tenants)
    if not allowed(pc, tenant, default):
        return Effective(
            default.name,
            default.value,
            default.time_sharing,
            NOT_ALLOWED,
            f"tenant {tenant.name} does not allow class {name!r} "
            f"({_describe(Effective(name, pc.value, pc.time_sharing))}; a Tenant lists the "
            f"classes its users may use in spec.priorityClasses); {fallback}",
        )
    return Effective(pc.name, pc.value, pc.time_sharing)


def _describe(e: Effective) -> str:
    label = e.name or "no class"
    kind = "time-shared" if e.time_sharing else "run to completion"
    return f"{label}, value {e.value}, {kind}"


def resolve(
    jobs: Sequence[model.JobSpec],
    classes: Mapping[str, PriorityClass],
    tenants: Mapping[str, governance.TenantSpec],
) -> list[Effective]:
    """:func:`effective` of every job, in order: decided once per (namespace, class name), as a
    large queue has few of those."""
    names = [class_name(j) for j in jobs]
    if not classes and not any(names):
        return [DEFAULT] * len(jobs)
    default = default_class(classes)
    seen: dict[tuple[str, str], Effective] = {}
    out: list[Effective] = []
    for job, name in zip(jobs, names, strict=True):
        key = (job.namespace, name)
        got = seen.get(key)
        if got is None:
            got = seen[key] = _effective(job.namespace, name, classes, tenants, default)
        out.append(got)
    return out


class Guarantees:
    """Run-to-completion GPUs per (tenant, GPU type) accepted so far this round, against the
    guarantees of the tenant and its ancestors (module docstring: Run to completion)."""

    def __init__(
        self, jobs: Sequence[model.JobSpec], tenants: Mapping[str, governance.TenantSpec]
    ) -> None:
        self._jobs = jobs
        self._tenants = tenants
        self._used: dict[tuple[str, str], float] = {}

    def _chain(self, r: int) -> list[str]:
        t = governance.tenant_of(self._jobs[r].namespace, self._tenants)
        return [t, *governance.ancestors(t, self._tenants)]

    def room(self, r: int, gpu_type: str, gpus: float) -> str:
        """Why job ``r``'s gang of ``gpus`` may not start on ``gpu_type`` ("" if it may)."""
        for t in self._chain(r):
            q = governance.config(t, self._tenants).quotas.get(gpu_type)
            limit = q.guaranteed if q is not None and q.guaranteed is not None else 0.0
            used = self._used.get((t, gpu_type), 0.0)
            if used + gpus > limit:
                return (
                    f"its class runs jobs to completion only inside the tenant's guarantee; "
                    f"tenant {t}'s run-to-completion jobs hold {used:g} of its {limit:g} "
                    f"guaranteed {gpu_type} GPUs, and the gang needs {gpus:g}"
                )
        return ""

    def take(self, r: int, gpu_type: str, gpus: float) -> None:
        for t in self._chain(r):
            self._used[(t, gpu_type)] = self._used.get((t, gpu_type), 0.0) + gpus

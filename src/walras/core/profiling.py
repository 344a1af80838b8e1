"""Profiling slices: a job nobody knows anything about first runs briefly on each GPU type.

A job with no information at all — nothing declared in ``spec.throughput``, nothing measured, no
estimate (no similar job measured, no pool default) — cannot be valued by any policy: it would
never be eligible anywhere. Before estimation takes over, the shell runs it for a short
*profiling slice* on each candidate GPU type in turn, so its workload's reported progress
(``walras.core.progress``) measures its steps/s there; those measurements then feed
``walras.core.estimation`` as usual (thin ones as the job's own estimates).

**Candidates** (:func:`candidates`): the pools' GPU types, in name order, whose ready,
schedulable nodes that pass the job's static filters (taints, nodeSelector, affinity:
``walras.core.filters.job_placement``) hold its whole gang when free (``Σ_nodes
⌊GPUs / GPUs per pod⌋ >= replicas``), leaving out types declared 0 ("cannot run there") and,
unless ``declared_too`` (``--profile-declared``), types the job declared. A type that could never
host the gang would hold the profiling forever.

**Who is profiled** (:func:`needs`): a job whose throughputs have no measured or estimated source
and no measured sample, and that declared nothing (or ``declared_too``). Once started, a job's
plan (its candidate list) is fixed and followed to the end, even though the first slice's
measurements already give it information.

**How.** While profiling type ``t``, the policy sees the job with the single throughput
``{t: declared[t] or PROVISIONAL}``: it is eligible on ``t`` alone, so the policy gives it a share
of ``t`` and the realiser places it there, with no change to the cycle or the policies. The
provisional value's scale does not matter to the scale-free policies (log utility, max-min
fairness normalise by the job's own throughput); with a linear utility it makes the job look as
cheap to serve as 1 work/s. Seconds are counted while a pod of the job is Running on a node of
``t``, between two observations (rounds), so a slice of ``S`` seconds ends at the first round at
least ``S`` running seconds after it started; then the next candidate follows::

    candidates a, b; S = 20 s; rounds every 10 s, the job first seen running on a at t=10:
    t=10 (0 s), 20 (10 s), 30 (20 s: a done) -> b: runs from t=40 -> b done at t=60 -> done

**After.** A job whose workload reported progress on some type has measurements: estimation
takes over (its own thin measurements, similar jobs, defaults). One that reported nothing on any
type stays unknown: it keeps running, seen as equally fast (``PROVISIONAL``) on every candidate
type, and carries the ``ProfilingNoProgress`` reason; its accounted work at a provisional rate
means nothing, so it completes only by its pods succeeding or by reported steps.

The plan (its types and the index of the current one) is kept in ``status.profiling``: a
restarted operator continues it, starting the current slice's clock again. A type whose pool is
gone is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from walras.core import filters, model, progress
from walras.core import snapshot as snapshots

# Work/s the policy sees for a job on a type it is being profiled on (see the module docstring).
PROVISIONAL: Final = 1.0

CONDITION: Final = "Profiling"
PROFILING: Final = "Profiling"
NO_PROGRESS: Final = "ProfilingNoProgress"
DONE: Final = "ProfilingDone"


def candidates(
    job: model.JobSpec,
    pools: Sequence[model.PoolSpec],
    nodes: Sequence[model.NodeInfo],
    *,
    declared_too: bool = False,
) -> tuple[str, ...]:
    """The GPU types to profile ``job`` on, in name order (see the module docstring)."""
    pods: dict[str, int] = {}  # per type: how many of the job's pods its usable nodes hold
    for node in nodes:
        if not (node.ready and node.schedulable):
            continue
        pool = snapshots.node_pool(node, pools)
        if pool is None or not filters.job_placement(job, node).ok:
            continue
        per_node = int(node.resource(pool.resource_name) // job.gpus_per_pod(pool.resource_name))
        pods[pool.gpu_type] = pods.get(pool.gpu_type, 0) + per_node
    return tuple(
        t
        for t in sorted(pods)
        if pods[t] >= job.replicas  # the whole gang fits on the type's nodes when they are free
        and job.throughput.get(t, 1.0) > 0
        and (declared_too or t not in job.throughput)
    )


def needs(
    declared: Mapping[str, float],
    sources: Mapping[str, str],
    measured: bool,
    *,
    declared_too: bool = False,
) -> bool:
    """Whether a job with these declared values, effective sources (type -> measured |
    declared | estimated) and own measurements (any sample) starts profiling."""
    if measured or any(s != "declared" for s in sources.values()):
        return False
    return declared_too or not any(v > 0 for v in declared.values())


@dataclass(slots=True)
class Plan:
    """One job's profiling: its types in order, the one being profiled and its running time."""

    types: tuple[str, ...]
    index: int = 0
    ran: float = 0.0
    seen_at: float | None = None

    @property
    def current(self) -> str | None:
        """The type being profiled (None: every slice is done)."""
        return self.types[self.index] if self.index < len(self.types) else None

    @property
    def done(self) -> bool:
        return self.index >= len(self.types)

    def advance(self, running: Iterable[str], now: float, seconds: float) -> None:
        """Count the time since the last observation if the job ran on the current type at both;
        move to the next type once ``seconds`` are reached."""
        current = self.current
        if current is None:
            return
        if current in set(running):
            if self.seen_at is not None:
                self.ran += max(0.0, now - self.seen_at)
            self.seen_at = now
        else:
            self.seen_at = None
        if self.ran >= seconds:
            self.index += 1
            self.ran, self.seen_at = 0.0, None

    def status(self) -> dict[str, object]:
        """``status.profiling`` (the running time of the current slice is not kept: a restarted
        operator starts that slice's clock again)."""
        return {"types": list(self.types), "index": self.index}

    @classmethod
    def from_status(cls, raw: object) -> Plan | None:
        """The plan ``status.profiling`` holds (None: none, or not a plan)."""
        if not isinstance(raw, Mapping):
            return None
        types, index = raw.get("types"), raw.get("index")
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            return None
        if isinstance(index, bool) or not isinstance(index, int):
            return None
        return cls(tuple(types), min(max(index, 0), len(types)))

    def throughput(self, declared: Mapping[str, float], reported: bool) -> dict[str, float]:
        """What the policy sees: the current type alone while profiling; every candidate at the
        provisional value for a job that reported nothing; {} once measurements took over."""
        current = self.current
        if current is not None:
            return {current: declared.get(current) or PROVISIONAL}
        if reported:
            return {}
        return {t: declared.get(t) or PROVISIONAL for t in self.types}


class Profiler:
    """The profiling plans of the jobs a shell knows, by job UID.

    ``seconds``: the length of a slice (running time on one type); negative: profiling off.
    """

    def __init__(self, seconds: float, *, declared_too: bool = False) -> None:
        self.seconds = seconds
        self.declared_too = declared_too
        self.plans: dict[str, Plan] = {}

    @property
    def enabled(self) -> bool:
        return self.seconds >= 0

    def wants(self, job: model.JobSpec, sources: Mapping[str, str], measured: bool) -> bool:
        """Whether :meth:`observe` has anything to do for the job (a plan, or one to start)."""
        if job.uid in self.plans:
            return True
        return self.enabled and (
            "profiling" in job.status
            or needs(job.throughput, sources, measured, declared_too=self.declared_too)
        )

    def observe(
        self,
        job: model.JobSpec,
        *,
        sources: Mapping[str, str],
        measured: bool,
        pools: Sequence[model.PoolSpec],
        nodes: Sequence[model.NodeInfo],
        running: Iterable[str],
        now: float,
    ) -> Plan | None:
        """The job's plan after this observation (None: not profiled). ``running``: the GPU
        types its pods run on now."""
        plan = self.plans.get(job.uid)
        if plan is None and self.enabled:
            # A plan an earlier operator process wrote: continue it (its current slice anew).
            plan = Plan.from_status(job.status.get("profiling"))
            if plan is not None:
                self.plans[job.uid] = plan
        if plan is None:
            if not self.enabled or not needs(
                job.throughput, sources, measured, declared_too=self.declared_too
            ):
                return None
            types = candidates(job, pools, nodes, declared_too=self.declared_too)
            if not types:
                return None
            plan = self.plans[job.uid] = Plan(types)
        pool_types = {p.gpu_type for p in pools}
        while plan.current is not None and plan.current not in pool_types:
            plan.index += 1  # its pool is gone: the job could not run there any more
        plan.advance(running, now, self.seconds)
        return plan

    def forget(self, live: Iterable[str]) -> None:
        """Drop the plans of jobs whose UID is not in ``live``."""
        keep = set(live)
        for uid in [u for u in self.plans if u not in keep]:
            del self.plans[uid]


def message(plan: Plan, seconds: float, reported: bool) -> tuple[bool, str, str]:
    """(status, reason, message) of the job's ``Profiling`` condition."""
    names = ", ".join(plan.types)
    current = plan.current
    if current is not None:
        return (
            True,
            PROFILING,
            f"profiling slice on {current} ({plan.index + 1} of {len(plan.types)}: {names}), "
            f"{seconds:g} s of running on each; its reported progress measures its steps/s",
        )
    if reported:
        return False, DONE, f"profiled on {names}; measured and estimated throughputs are used"
    return (
        False,
        NO_PROGRESS,
        f"no progress reported ({progress.ANN_STEPS_DONE}) during its profiling slices on "
        f"{names}: its throughputs stay unknown, so it runs as if equally fast on each; declare "
        "spec.throughput or report progress (docs/progress.md)",
    )

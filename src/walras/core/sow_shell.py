"""The operator's pure side of StatementOfWork: parse, advance the ledger, persist, reserve.

The mechanism (``walras.allocator.sow``, docs/algorithms.md#statements-of-work) plays integer
rounds; the operator maps wall time to them with a :class:`RoundClock`: round ``t`` is
``[epoch + t·round_seconds, epoch + (t + 1)·round_seconds)``. Each operator round calls
:func:`advance` with the current mechanism round ``T``:

1. if round ``ledger.time < T`` is open, it ends with the instances whose pods all Succeeded
   (they complete and are charged ``P(s, k, t + 1 − s)`` from their posted menu);
2. rounds between are played with their arrivals (no SoW can be born in a round already past);
3. at ``T`` (not yet open): SoWs seen since are admitted, born at ``T`` in the order
   (creationTimestamp, namespace, name); then round ``T`` starts: arrivals, cancellation of
   running instances no completion can pay any more (``Advance.unprofitable``), starts per
   plan, LIFO eviction.

An SoW seen while round ``T`` is already open is born at ``T + 1`` (admission happens before a
round, :func:`walras.allocator.sow.admission.admit`).

Arrival of an instance: the earliest support point's arrival offset after its release (with
that point's duration as the signal when ``durationRevealed``), unless the SoW's annotation
``walras.dev/sow-arrivals`` (JSON, instance index → offset, or ``[offset, duration]``) says
otherwise. An arrival that is not a support point of the report is "not run" (no plan for it).
Example: ``{"0": 3, "1": [0, 2]}``.

Persistence and restart (:func:`rebuild`): a SoW's status holds what was posted at its birth
(menus, failure tables, plans, sequence) and each instance's phase and realised times, so a
restarted operator rebuilds the same ledger: admissions exactly, expected usage ``y`` recomputed
from the plans, the open round from ``status.round`` (the latest over all SoWs; the operator
writes it every round to SoWs with active instances). Not recovered:
SoWs deleted meanwhile (they leave the ledger, which changes later admissions' seeds and
samples); the round an instance completed in, if the crash fell between its pods succeeding
and its status write (it is completed when the replay ends the persisted open round, so it is
charged for the rounds up to there); SoWs admitted in a round whose status write the crash
interrupted (they are born again, at the first round after the restart).

:func:`running_gangs` and :func:`place` say which GPUs the running instances hold or get this
round; the operator shows them to the policy as foreign usage, so capacity committed to launch
plans is taken first and the running policy plans the rest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.sow import (
    Admission,
    FailureTable,
    JobState,
    LaunchPlan,
    Ledger,
    MechanismParams,
    Phase,
    PlanEntry,
    PriceMenu,
    StatementOfWork,
    admission_status,
    admit,
    end_round,
    instances,
    job_status,
    plan_summary,
    start_round,
)

# The admission's own accumulation of y (one formula; the rebuild must add exactly the same).
from walras.allocator.sow.admission import add_expected_usage
from walras.allocator.sow.ledger import frozen
from walras.core import crd, model, sow_spec
from walras.core.sow_spec import SowError as SowError  # re-exported: the operator raises it
from walras.core.sow_spec import spec_field

KIND = "StatementOfWork"
PLURAL = "statementsofwork"
ANN_ARRIVALS = "walras.dev/sow-arrivals"
LABEL_SOW = "walras.dev/sow"
LABEL_INSTANCE = "walras.dev/sow-instance"


@dataclass(frozen=True, slots=True)
class RoundClock:
    """Wall time ↔ mechanism rounds."""

    epoch: float
    round_seconds: float

    def round_at(self, now: float) -> int:
        # A tiny tolerance so that a wake-up scheduled for a boundary lands in the new round.
        return max(0, math.floor((now - self.epoch) / self.round_seconds + 1e-6))

    def start_of(self, t: int) -> float:
        return self.epoch + t * self.round_seconds


@dataclass(frozen=True, slots=True)
class SowObject:
    """One StatementOfWork object as listed from the API server."""

    namespace: str
    name: str
    uid: str
    created: float
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, str]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> SowObject:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            created=model.parse_time(meta.get("creationTimestamp")) or 0.0,
            generation=int(meta.get("generation") or 0),
            spec=obj.get("spec") or {},
            status=obj.get("status") or {},
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        )

    @property
    def key(self) -> str:
        """The SoW's name in the mechanism (unique across namespaces)."""
        return f"{self.namespace}/{self.name}"

    @property
    def birth(self) -> int | None:
        b = self.status.get("birth")
        return int(b) if isinstance(b, int | float) and self.status.get("admissions") else None

    def instance_name(self, index: int) -> str:
        """``<name>-<index>``: its pods' ``walras.dev/job`` label and name prefix."""
        return f"{self.name}-{index}"


def statement(obj: SowObject, birth: int) -> StatementOfWork:
    """The mechanism's SoW (born at ``birth``): :func:`walras.core.sow_spec.statement`, the
    conversion the simulator uses too; raises :class:`SowError` naming the field."""
    return sow_spec.statement(obj.key, birth, obj.spec)


def gang_template(obj: SowObject, index: int, gpu_type: str) -> model.JobSpec:
    """Instance ``index`` as a FungibleJob-shaped :class:`model.JobSpec` (template checks and
    pod manifests are the FungibleJob's); raises :class:`SowError` naming the field."""
    fake = {
        "metadata": {
            "name": obj.instance_name(index),
            "namespace": obj.namespace,
            "uid": obj.uid,
            "generation": obj.generation,
        },
        "spec": {
            "replicas": 1,
            "throughput": {gpu_type: 1.0},
            "template": obj.spec.get("template"),
        },
    }
    job = model.parse_job(fake)
    if isinstance(job, model.JobDefect):
        raise SowError(job.field, job.message)
    return job


def gang_shape(job: model.JobSpec, concurrency: int, resource: str) -> tuple[int, int]:
    """``(pods, GPUs per pod)`` of a gang of ``concurrency`` GPUs."""
    per_pod = job.gpus_per_pod(resource)
    if concurrency % per_pod:
        raise SowError(
            "spec.concurrency",
            f"{concurrency} GPUs are not a whole number of pods of {per_pod} GPUs",
        )
    return concurrency // per_pod, per_pod


def arrivals(objs: Sequence[SowObject], ledger: Ledger) -> dict[str, tuple[int, int | None]]:
    """Job id → (absolute arrival round, signal) of every pending instance of ``objs``."""
    told: dict[str, Mapping[str, Any]] = {}
    for obj in objs:
        try:
            given = json.loads(obj.annotations.get(ANN_ARRIVALS, "{}"))
        except ValueError:
            given = {}
        told[obj.key] = given if isinstance(given, dict) else {}
    out: dict[str, tuple[int, int | None]] = {}
    for j in ledger.jobs:
        inst = j.admission.instance
        if j.phase is not Phase.PENDING or inst.sow not in told:
            continue
        first = min(range(len(inst.arrivals)), key=lambda i: (inst.arrivals[i], i))
        offset, duration = inst.arrivals[first] - inst.release, inst.durations[first]
        given = told[inst.sow].get(str(inst.index))
        if isinstance(given, int | float):
            offset = int(given)
        elif isinstance(given, list) and len(given) == 2:
            offset, duration = int(given[0]), int(given[1])
        out[inst.job] = (inst.release + offset, duration if inst.duration_revealed else None)
    return out


@dataclass(slots=True)
class Advance:
    """What :func:`advance` did: admissions and rejections by SoW key, jobs whose phase ended."""

    ledger: Ledger
    admitted: list[str] = field(default_factory=list)
    rejected: dict[str, SowError] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    # Running instances cancelled because no completion could pay any more (charged 0).
    unprofitable: list[str] = field(default_factory=list)


def advance(
    ledger: Ledger,
    target: int,
    newborn: Sequence[SowObject],
    objs: Sequence[SowObject],
    finished: Mapping[str, int],
) -> Advance:
    """Play the ledger up to round ``target`` and start it (module docstring).

    ``objs``: every SoW object (their arrival annotations); ``finished``: running instances
    whose pods all Succeeded, with the round their last pod finished in (each completes at the
    end of that round, or of the open round if that is later).
    """
    out = Advance(ledger)
    if ledger.round_open and ledger.time < target:
        ledger = _end(ledger, finished, out)
    while not ledger.round_open and ledger.time <= target:
        t = ledger.time
        if t == target:
            for obj in newborn:
                try:
                    sow = statement(obj, t)
                    ledger, _ = admit(ledger, sow)
                except SowError as exc:
                    out.rejected[obj.key] = exc
                    continue
                except InvalidProblem as exc:
                    out.rejected[obj.key] = SowError(spec_field(exc), str(exc))
                    continue
                out.admitted.append(obj.key)
        # An arrival named for a round already past (annotation set late) arrives now.
        due = {job: signal for job, (a, signal) in arrivals(objs, ledger).items() if a <= t}
        ledger, report = start_round(ledger, due)
        out.evicted.extend(report.evicted + report.cancelled)
        out.unprofitable.extend(report.unprofitable)
        if t < target:
            ledger = _end(ledger, finished, out)
    out.ledger = ledger
    return out


def _end(ledger: Ledger, finished: Mapping[str, int], out: Advance) -> Ledger:
    """End the open round with the running jobs that finished in it or before."""
    t = ledger.time
    running = {j.job for j in ledger.jobs if j.phase is Phase.RUNNING}
    done_now = [f for f, c in finished.items() if f in running and c <= t]
    ledger, done = end_round(ledger, done_now)
    out.completed.extend(done.completed)
    return ledger


# ------------------------------------------------------------------ persistence


def status_of(
    obj: SowObject, ledger: Ledger, clock: RoundClock, *, round_no: int
) -> dict[str, Any] | None:
    """The status of an admitted SoW (None if the ledger does not hold it)."""
    jobs = [j for j in ledger.jobs if j.admission.instance.sow == obj.key]
    if not jobs:
        return None
    first = jobs[0].admission
    summary = plan_summary(first)
    gpu_type = _likeliest_type(first)
    inst_status = []
    for j in jobs:
        view = job_status(j)
        view["index"] = j.admission.instance.index
        inst_status.append(view)
    done = all(not j.phase.active for j in jobs)
    charged = math.fsum(j.charge for j in jobs)
    births = first.instance.birth
    return {
        "phase": "Done" if done else "Admitted",
        "birth": births,
        "birthTime": model.format_time(clock.start_of(births)),
        "roundSeconds": clock.round_seconds,
        "epoch": model.format_time(clock.epoch),
        "sequence": first.sequence,
        "gpuType": gpu_type or "",
        "runProbability": summary["runProbability"],
        "failureProbability": summary["failureProbability"],
        "expectedUtility": summary["expectedUtility"],
        "charged": charged,
        "admissions": [admission_status(j.admission) for j in jobs],
        "instances": inst_status,
        "round": round_no,
        "conditions": [
            {
                "type": "Admitted",
                "status": "True",
                "reason": "PlanPosted",
                "message": (
                    f"born in round {births}: runs with probability "
                    f"{summary['runProbability']:.3g}, posted failure estimate "
                    f"{summary['failureProbability']:.3g}"
                ),
                "observedGeneration": obj.generation,
            }
        ],
    }


def rejected_status(obj: SowObject, problem: SowError) -> dict[str, Any]:
    return {
        "phase": "Rejected",
        "conditions": [
            {
                "type": "Admitted",
                "status": "False",
                "reason": "InvalidSpec",
                "message": f"{problem.field}: {problem.message}",
                "observedGeneration": obj.generation,
            }
        ],
    }


def _likeliest_type(adm: Admission) -> str | None:
    inst = adm.instance
    weight: dict[str, float] = {}
    for a, d, f in zip(inst.arrivals, inst.durations, inst.probabilities, strict=True):
        entry = adm.plan.lookup(inst.key(a, d))
        if entry is not None and entry.gpu_type is not None:
            weight[entry.gpu_type] = weight.get(entry.gpu_type, 0.0) + f
    return max(sorted(weight), key=lambda g: weight[g]) if weight else None


def _admission_from(view: Mapping[str, Any], sow: StatementOfWork) -> Admission:
    insts = instances(sow)
    inst = insts[int(view["instance"])]
    menus = []
    tables = []
    for dem in inst.demands:
        m = view["menu"][dem.gpu_type]
        menus.append(
            PriceMenu(
                dem.gpu_type,
                int(m["origin"]),
                tuple(float(x) for x in m["unitPrices"]),
                float(m["pMin"]),
            )
        )
        f = view["failure"][dem.gpu_type]
        tables.append(
            FailureTable(
                dem.gpu_type,
                int(f["concurrency"]),
                int(f["firstStart"]),
                tuple(int(x) for x in f["durations"]),
                tuple(tuple(float(x) for x in row) for row in f["q"]),
                int(f["samples"]),
            )
        )
    entries = []
    for e in view["plan"]:
        key = (int(e["arrival"]), int(e["duration"])) if "duration" in e else (int(e["arrival"]),)
        start = None if e.get("start") is None else int(e["start"])
        entries.append(PlanEntry(key, e.get("gpuType"), start, float(e["expectedUtility"])))
    return Admission(
        inst, int(view["sequence"]), tuple(menus), tuple(tables), LaunchPlan(tuple(entries))
    )


def _job_from(adm: Admission, view: Mapping[str, Any] | None) -> JobState:
    if view is None:
        return JobState(adm)

    def opt(name: str) -> int | None:
        v = view.get(name)
        return None if v is None else int(v)

    return JobState(
        adm,
        Phase(str(view.get("phase") or "pending")),
        opt("arrival"),
        opt("signal"),
        opt("start"),
        view.get("gpuType"),
        opt("finish"),
        float(view.get("charge") or 0.0),
        float(view.get("value") or 0.0),
    )


def rebuild(
    params: MechanismParams, capacities: Mapping[str, int], objs: Sequence[SowObject]
) -> tuple[Ledger, RoundClock | None, list[str]]:
    """The ledger persisted in the statuses of ``objs`` (module docstring), its clock and the
    keys of SoWs whose status could not be read back (they are left out)."""
    admitted = sorted(
        (o for o in objs if o.birth is not None),
        key=lambda o: (int(o.status.get("sequence") or 0), o.key),
    )
    jobs: list[JobState] = []
    sows: list[str] = []
    broken: list[str] = []
    clock: RoundClock | None = None
    last_round = -1
    for obj in admitted:
        birth = obj.birth
        assert birth is not None  # filtered above
        try:
            sow = statement(obj, birth)
            views = {int(v["index"]): v for v in obj.status.get("instances") or []}
            for view in obj.status.get("admissions") or []:
                adm = _admission_from(view, sow)
                jobs.append(_job_from(adm, views.get(adm.instance.index)))
        except (SowError, KeyError, TypeError, ValueError, IndexError):
            broken.append(obj.key)
            continue
        sows.append(obj.key)
        last_round = max(last_round, int(obj.status.get("round") or birth))
        if clock is None:
            epoch = model.parse_time(obj.status.get("epoch"))
            seconds = obj.status.get("roundSeconds")
            if epoch is not None and isinstance(seconds, int | float) and seconds > 0:
                clock = RoundClock(epoch, float(seconds))
    jobs.sort(key=lambda j: j.sequence)
    # Sequences must be 0..n-1 in birth order; renumber if a SoW was deleted meanwhile.
    jobs = [replace(j, admission=replace(j.admission, sequence=i)) for i, j in enumerate(jobs)]
    # Types a plan uses but the cluster no longer offers keep their place (capacity 0 below).
    planned = {d.gpu_type for j in jobs for d in j.admission.instance.demands}
    known = {g: max(1, int(capacities.get(g, 0))) for g in sorted(set(capacities) | planned)}
    ledger = Ledger.empty(params, known)
    usage = expected_usage(ledger, jobs)
    # The statuses show round ``last_round`` started (arrivals, starts, evictions written) and
    # not ended: the next advance ends it with the completions observed since.
    ledger = replace(
        ledger,
        time=max(last_round, 0),
        jobs=tuple(jobs),
        usage=usage,
        sows=tuple(sows),
        round_open=bool(jobs),
    )
    return with_capacities(ledger, capacities), clock, broken


def expected_usage(ledger: Ledger, jobs: Sequence[JobState]) -> tuple[np.ndarray, ...]:
    """``y_g(τ) = Σ f·k`` over every admitted plan's planned runs, added as admission adds it."""
    usage = [np.zeros(0) for _ in ledger.gpu_types]
    for j in jobs:
        add_expected_usage(usage, ledger, j.admission)
    return tuple(frozen(u) for u in usage)


def with_capacities(ledger: Ledger, capacities: Mapping[str, int]) -> Ledger:
    """The ledger on the cluster's current capacities (types never seen are added; a type that
    lost its nodes keeps its place with capacity 0, so LIFO evicts what runs on it)."""
    caps = dict(ledger.capacities)
    for g in caps:
        caps[g] = int(capacities.get(g, 0))
    for g, c in capacities.items():
        caps.setdefault(g, int(c))
    if tuple(sorted(caps.items())) == ledger.capacities:
        return ledger
    old = dict(zip(ledger.gpu_types, ledger.usage, strict=True))
    ordered = tuple(sorted(caps.items()))
    usage = tuple(old.get(g, frozen(np.zeros(0))) for g, _ in ordered)
    return replace(ledger, capacities=ordered, usage=usage)


# ------------------------------------------------------------------ reservations


@dataclass(frozen=True, slots=True)
class Gang:
    """The pods instance ``job`` holds or needs: ``pods`` × ``per_pod`` GPUs on ``gpu_type``."""

    job: str
    sow: str
    index: int
    gpu_type: str
    start: int
    pods: int
    per_pod: int


def running_gangs(ledger: Ledger, shapes: Mapping[tuple[str, str], tuple[int, int]]) -> list[Gang]:
    """Instances running now with their gang shape (``shapes``: (job, gpu type) → shape)."""
    out = []
    for j in ledger.jobs:
        if j.phase is not Phase.RUNNING or j.gpu_type is None or j.start is None:
            continue
        shape = shapes.get((j.job, j.gpu_type))
        if shape is None:
            continue
        inst = j.admission.instance
        out.append(Gang(j.job, inst.sow, inst.index, j.gpu_type, j.start, shape[0], shape[1]))
    return out


def place(gang: Gang, free: dict[str, int], nodes_of_type: Sequence[str]) -> list[str] | None:
    """First fit of the gang's pods on nodes of its type (by name), updating ``free``."""
    trial = dict(free)
    chosen: list[str] = []
    for _ in range(gang.pods):
        node = next((n for n in nodes_of_type if trial.get(n, 0) >= gang.per_pod), None)
        if node is None:
            return None
        trial[node] -= gang.per_pod
        chosen.append(node)
    free.update(trial)
    return chosen


def reserved_pod(
    namespace: str, name: str, node: str, requests: Mapping[str, float]
) -> model.PodInfo:
    """A SoW pod as the policy sees it: foreign usage on its node (bound or about to be)."""
    return model.PodInfo(
        namespace=namespace,
        name=name,
        uid="",
        job="",
        replica=0,
        node=node,
        planned_node=node,
        group="",
        phase=crd.PHASE_RUNNING,
        terminating=False,
        round=0,
        requests=dict(requests),
    )

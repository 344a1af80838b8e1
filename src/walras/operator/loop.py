"""The operator's round loop: snapshot → ``walras.core.cycle.plan`` (worker thread) → writes.

Started by ``walras.operator.main`` next to kopf's watchers. Every ``round_seconds`` it runs a full
round; a job arriving or finishing (``poke``) runs an *incremental* round within ``debounce``
seconds, which fills free GPUs without cutting running slices short. Between rounds it binds pods
whose GPUs were still held by pods being deleted (``poke_binds`` on every pod deletion).

A round writes only while ``is_leader()`` is true, and every request is fenced again right before
it is sent (``walras.kube.writes.Api``). Each write is one of: delete pod, create pod, bind pod,
merge-patch a status that changed, post an Event not posted before. The loop never raises out of a
round: a failing policy is logged and counted, and the next round retries on a fresh snapshot.

Before the plan, :meth:`RoundLoop._prepare` adjusts the snapshot to what the operator knows besides
the API objects' parsed views (:class:`Facts`, kept by the watch handlers):

- **Ownership.** A pod is Walras's only if its controller ownerReference is the FungibleJob it is
  labelled with, with that job's uid. Any other pod carrying ``walras.dev/job`` is counted as a
  foreign pod (it uses its node's resources) and never deleted or bound; pods of a deleted job are
  left to the garbage collector.
- **Retries** (``spec.backoffLimit``, default 3). A pod that failed (phase Failed while not being
  deleted, and without a ``DisruptionTarget`` condition: preemption, eviction and deletion by
  Walras never count) is counted once, by uid, in ``status.failures``. Up to the limit the failed
  pod is deleted and hidden from the plan, so the job's gang is simply placed again; past it the
  job fails.
- **Create and bind failures.** A gang is created and bound as a unit. If the API server rejects
  one member (quota, Pod Security admission, an invalid template, a missing ServiceAccount) or a
  member cannot be bound, the members already made are deleted, no member is bound, and the job is
  held out of the solve (it reserves nothing) with an ``Admitted=False`` condition and one Event
  carrying the API server's message, for a back-off that doubles from 5 s to 5 min; a new
  ``generation`` of the job retries at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from walras.core import conditions as cond
from walras.core import (
    crd,
    cycle,
    field_notices,
    filters,
    history,
    lost_nodes,
    model,
    policies,
    realise,
    snapshot,
)
from walras.kube import writes as kubeapi
from walras.operator import (
    gang_repair,
    health,
    history_store,
    metrics,
    sow,
    status,
    throughputs,
)

logger = logging.getLogger("walras.operator.loop")


@dataclass(frozen=True, slots=True)
class LoopConfig:
    policy: str = "price-discovery"
    round_seconds: float = 360.0
    eps: float = 1e-3
    backend: str = "auto"
    debounce: float = 0.3
    # /readyz turns 503 after this many failed rounds in a row (walras.operator.health.ROUNDS).
    max_failed_rounds: int = 3
    # The clock rounds plan with (their ``now``, and held jobs' back-off). Injected, as Kueue
    # injects its clock, so the real loop can run on a simulated clock (the same-code-path test).
    clock: Callable[[], float] = time.time
    # How rounds are realised and accounted (restart cost, hold, memory, backfill).
    cycle_options: cycle.CycleOptions = field(default_factory=cycle.CycleOptions)
    # Price discovery's remaining-work weighting and POP shards (walras.core.policies).
    weighting: str = "none"
    weighting_exponent: float = -0.5
    pop_shards: int = 1
    # PS-DSF's mode, "tdm" or "rdm" (walras.core.policies.psdsf).
    psdsf_mode: str = "tdm"
    # Progress and throughput estimation thresholds (walras.operator.throughputs; issue 16).
    progress: throughputs.Settings = field(default_factory=throughputs.Settings)
    # Where the schedule history's ConfigMaps live (walras.operator.history_store): "" = in each
    # job's namespace; a name = all in that namespace (a namespaced Role is enough).
    history_namespace: str = ""
    # Commit a gang that fits its nodes now by creating its last member with spec.nodeName set,
    # after the others, which are bound right after it (``RoundLoop._create_gangs``); False: every
    # pod is created unbound and bound through the pods/binding subresource.
    bind_at_create: bool = True


@dataclass(slots=True)
class RoundReport:
    """Timings and counts of one round (logged as one JSON line; read by the benchmark)."""

    round: int
    incremental: bool
    jobs: int = 0
    nodes: int = 0
    snapshot: float = 0.0
    solve: float = 0.0
    realise: float = 0.0
    writes: float = 0.0
    total: float = 0.0
    deletes_s: float = 0.0
    creates_s: float = 0.0
    binds_s: float = 0.0
    status_s: float = 0.0
    creates: int = 0
    binds: int = 0
    bound_at_create: int = 0  # created with spec.nodeName: their gang fitted at creation
    deletes: int = 0
    status_patches: int = 0
    history_writes: int = 0  # ConfigMap shards of the schedule history (history_store)
    events: int = 0
    errors: int = 0
    iterations: int = 0
    gap: float = 0.0
    prices: dict[str, float] = field(default_factory=dict)


RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0


@dataclass(slots=True)
class Facts:
    """What the watch handlers know of pods and jobs beyond their parsed views.

    ``owner``: pod -> uid of its controller FungibleJob (only when that is the job it is labelled
    with); ``disrupted``: pods with a ``DisruptionTarget`` condition; ``backoff``: job ->
    ``spec.backoffLimit``.
    """

    owner: dict[model.JobKey, str] = field(default_factory=dict)
    disrupted: set[model.JobKey] = field(default_factory=set)
    backoff: dict[model.JobKey, int] = field(default_factory=dict)


@dataclass(slots=True)
class Blocked:
    """A job held out of the solve after its gang could not be created or bound."""

    generation: int
    reason: str
    message: str
    retry_at: float
    attempts: int


def create_failure_reason(result: kubeapi.Result) -> str:
    """A condition reason for an API error on pod create (the message carries the details)."""
    text = result.message.lower()
    if result.status == 403 and "exceeded quota" in text:
        return "QuotaExceeded"
    if result.status == 403 and "violates podsecurity" in text:
        return "PodSecurityRejected"
    if result.status == 403 and "service account" in text:
        return "ServiceAccountMissing"
    if result.status == 403:
        return "CreateForbidden"
    if result.status in (400, 422):
        return "TemplateRejected"
    return "PodCreateFailed"


@dataclass(slots=True)
class _PendingBind:
    namespace: str
    name: str
    node: str
    gpus: int
    job: str = ""


def _on_node(manifest: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The pod manifest with ``spec.nodeName`` set: created bound (``_fitting_gangs``)."""
    return {**manifest, "spec": {**manifest["spec"], "nodeName": node}}


def _api_text(result: kubeapi.Result, pod_name: str) -> str:
    """The API server's message without the pod's own name (so that the same rejection of a
    later round's pod reads the same, and its Event is posted once)."""
    text = result.message or f"HTTP {result.status}"
    return text.replace(f'pods "{pod_name}" is ', "").replace(pod_name, "<pod>")


def _as_defect(job: model.JobSpec, held: Blocked) -> model.JobDefect:
    """A held-out job as the defect the status code already knows how to report."""
    return model.JobDefect(
        namespace=job.namespace,
        name=job.name,
        uid=job.uid,
        tenant=job.tenant,
        generation=job.generation,
        field="spec.template",
        reason=held.reason,
        message=held.message,
        status=job.status,
    )


class RoundLoop:
    """Owns the schedule state (histories, round counter, bind queue) of one operator process."""

    def __init__(
        self,
        store: snapshot.Store,
        api: kubeapi.Api,
        config: LoopConfig,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        distributed_reader: policies.DistributedReader | None = None,
    ) -> None:
        self.store = store
        self.api = api
        self.config = config
        self.is_leader = is_leader
        self.facts = Facts()
        # Create/bind failures by job uid; pod failures counted by job uid (pod uids seen, and
        # the count the job's status held when this process first saw it).
        self.blocked: dict[str, Blocked] = {}
        self.failed_pods: dict[str, set[str]] = {}
        self.failures_base: dict[str, int] = {}
        self.failures_written: dict[str, int] = {}
        self._retry_deletes: list[model.PodInfo] = []
        self._retry_events: list[tuple[model.JobSpec, str, str]] = []
        self._held_now: dict[model.JobKey, Blocked] = {}
        self.policy = policies.create(
            config.policy,
            policies.PolicyOptions(
                eps=config.eps,
                backend=config.backend,
                distributed_reader=distributed_reader,
                round_seconds=config.round_seconds,
                restart_seconds=config.cycle_options.restart_s,
                weighting=config.weighting,
                weighting_exponent=config.weighting_exponent,
                pop_shards=config.pop_shards,
                psdsf_mode=config.psdsf_mode,
            ),
        )
        self.round_no = 0
        self.state = cycle.CycleState()
        # Reported progress and effective throughputs (issue 16; walras.operator.throughputs).
        self.throughputs = throughputs.Throughputs.configured(config.progress, config.round_seconds)
        self.pending: dict[model.JobKey, list[_PendingBind]] = {}
        # Pods we bound that the watch has not shown bound yet: pod -> (node, gpus, when).
        self.ledger: dict[model.JobKey, tuple[str, dict[str, float], float]] = {}
        self._bound_index: tuple[int, dict[model.JobKey, list[str]]] = (-1, {})
        self._bound_jobs: dict[model.JobKey, model.JobKey] = {}  # pod in the ledger -> its job
        self.events_posted: dict[str, tuple[str, str]] = {}
        self.lost_nodes = lost_nodes.LostNodes()  # fault hook: jobs whose node is gone
        self.last_report: RoundReport | None = None
        self.last_solution: policies.Solution | None = None
        self._wake = asyncio.Event()
        self._poked = False
        self._bind_poked = False
        self.rounds_done = 0
        # The first round after start-up or after winning the Lease reloads the persisted
        # history (walras.operator.history_store) and rewrites every status once (_statuses).
        self._refresh_all = True
        # Schedule histories persisted many jobs per write (walras.operator.history_store);
        # records loaded at start-up or Lease take-over wait here until their job is planned.
        self.history_store = history_store.HistoryStore()
        self._restored: dict[str, dict[str, Any]] = {}
        # Statements of work (walras.operator.sow): their ledger, rebuilt from their statuses.
        self.sow = sow.SowRunner(api, config.round_seconds, self.poke)

    # ------------------------------------------------------------------ triggers

    def poke(self) -> None:
        """A job arrived or finished: run an incremental round soon."""
        self._poked = True
        self._wake.set()

    def poke_binds(self) -> None:
        """A pod went away: pending binds may fit now."""
        if self.pending:
            self._bind_poked = True
            self._wake.set()

    # ------------------------------------------------------------------ main loop

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        self.round_no = self._initial_round()
        while not stop.is_set():
            timeout = max(0.0, next_full - loop.time())
            if self.pending:
                timeout = min(timeout, 0.25)
            if not (self._poked or self._bind_poked):
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait(
                    {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                stopper.cancel()
            self._wake.clear()
            if stop.is_set():
                break
            if not self.is_leader():
                self._poked = self._bind_poked = False
                self._refresh_all = True
                self.pending.clear()
                next_full = loop.time() + min(self.config.round_seconds, 1.0)
                continue
            if self._refresh_all:
                # Just started or just won the Lease: the previous leader may have used rounds
                # above ours meanwhile; stay above them so no pod name is ever reused. Its
                # persisted histories replace ours.
                await self._restore_histories()
                self.round_no = max(self.round_no, self._initial_round())
                # Fault hook: the predecessor's half-bound gangs are finished or undone first.
                await gang_repair.repair(self.store, self.api, self.owns)
            full_due = loop.time() >= next_full
            if self._poked and not full_due:
                await asyncio.sleep(self.config.debounce)  # let a burst of arrivals settle
                full_due = loop.time() >= next_full
            if full_due or self._poked:
                self._poked = False
                await self.run_round(incremental=not full_due)
                if full_due:
                    next_full = loop.time() + self.config.round_seconds
            self._bind_poked = False
            if self.pending:
                await self.bind_pending()

    def _initial_round(self) -> int:
        """Above every round any existing pod or job status used (no pod name is reused)."""
        highest = 0
        for pod in self.store.pods.values():
            highest = max(highest, pod.round)
        for job in self.store.jobs.values():
            try:
                highest = max(highest, int(job.status.get("round") or 0))
            except (TypeError, ValueError):
                continue
        return highest

    # ------------------------------------------------------------------ one round

    async def run_round(self, *, incremental: bool = False) -> RoundReport:
        """One round; never raises (a failure is logged and the next round retries)."""
        self.round_no += 1
        report = RoundReport(round=self.round_no, incremental=incremental)
        t0 = time.perf_counter()
        health.ROUNDS.limit = self.config.max_failed_rounds
        try:
            await self._round(report, incremental, t0)
        except Exception as exc:
            report.errors += 1
            logger.exception("round %d failed; retrying next round", self.round_no)
            if health.ROUNDS.record(False, f"{type(exc).__name__}: {exc}"):
                logger.error(
                    "%d rounds in a row failed: /readyz reports not ready until one succeeds",
                    health.ROUNDS.in_a_row,
                )
        else:
            health.ROUNDS.record(True)
        report.total = time.perf_counter() - t0
        self._observe(report)
        self.last_report = report
        self.rounds_done += 1
        logger.info("round %s", json.dumps(dataclasses.asdict(report), sort_keys=True))
        return report

    async def _round(self, report: RoundReport, incremental: bool, t0: float) -> None:
        now = self.config.clock()
        snap = self._prepare(self.store.freeze(now), now)
        self._adopt_restored(snap)
        snap = self.throughputs.prepare(snap, now)  # reported progress, effective throughputs
        self.throughputs.observe_metrics()
        # Capacity committed to SoW launch plans is reserved first; the policy plans the rest.
        snap = await self.sow.round(snap, now, refresh=self._refresh_all)
        planned = await asyncio.to_thread(
            cycle.plan,
            self.state,
            self.policy,
            snap,
            now=now,
            round_no=self.round_no,
            incremental=incremental,
            options=self.config.cycle_options,
        )
        sol = planned.solution
        report.nodes = len(planned.view.nodes)
        report.jobs = len(planned.active)
        report.snapshot = (
            time.perf_counter() - t0 - sum(v for k, v in planned.timings.items() if k != "snapshot")
        )
        report.solve = planned.timings["solve"]
        report.realise = planned.timings["realise"]
        report.iterations, report.gap = sol.iterations, sol.gap
        report.prices = {t: round(p, 6) for t, p in sol.prices.items()}
        self.last_solution = sol

        t3 = time.perf_counter()
        await self._act(planned.realisation, report)
        t4 = time.perf_counter()
        await self._statuses(planned, report)
        report.status_s = time.perf_counter() - t4
        await self._save_histories(planned, report)
        report.writes = time.perf_counter() - t3

    # ------------------------------------------------------------------ before the plan

    def owns(self, pod: model.PodInfo, job_uids: dict[model.JobKey, str]) -> bool:
        """Walras's pod: its controller is the live FungibleJob it is labelled with (same uid)."""
        owner = self.facts.owner.get(pod.key, "")
        return bool(owner) and job_uids.get(pod.job_key) == owner

    def _prepare(self, snap: snapshot.Snapshot, now: float) -> snapshot.Snapshot:
        """Ownership, retries and held-out jobs applied to the snapshot (module docstring)."""
        job_uids = {j.key: j.uid for j in snap.jobs}
        job_uids.update({d.key: d.uid for d in snap.defects})
        owned: list[model.PodInfo] = []
        foreign = list(snap.foreign_pods)
        for pod in snap.pods:
            if self.owns(pod, job_uids):
                owned.append(pod)
            elif pod.node and not pod.finished:
                foreign.append(pod)  # someone else's pod: it uses the node, we never touch it
        # Retries: count each failed pod once; hide those within the budget and delete them.
        by_job: dict[model.JobKey, list[model.PodInfo]] = {}
        for pod in owned:
            by_job.setdefault(pod.job_key, []).append(pod)
        hidden: set[model.JobKey] = set()
        self._retry_deletes = []
        self._retry_events = []
        live = set()
        for job in snap.jobs:
            live.add(job.uid)
            if job.finished:
                continue
            if job.uid not in self.failures_base:
                try:
                    self.failures_base[job.uid] = max(0, int(job.status.get("failures") or 0))
                except (TypeError, ValueError):
                    self.failures_base[job.uid] = 0
            seen = self.failed_pods.setdefault(job.uid, set())
            limit = self.facts.backoff.get(job.key, 3)
            for pod in by_job.get(job.key, []):
                if pod.phase != crd.PHASE_FAILED or pod.terminating:
                    continue
                if pod.key in self.facts.disrupted:
                    # Evicted or preempted: not the workload's failure. Clean it up; the gang is
                    # placed again as after any preemption.
                    hidden.add(pod.key)
                    self._retry_deletes.append(pod)
                    continue
                if pod.uid not in seen:
                    seen.add(pod.uid)
                    count = self.failures_base[job.uid] + len(seen)
                    verdict = (
                        f"retry {count} of {limit}" if count <= limit else "backoffLimit reached"
                    )
                    self._retry_events.append(
                        (
                            job,
                            "PodFailed",
                            f"pod {pod.name} failed on {pod.node or 'no node'} "
                            f"({count} failures, backoffLimit {limit}): {verdict}",
                        )
                    )
                if self.failures(job.uid) <= limit:
                    hidden.add(pod.key)
                    self._retry_deletes.append(pod)
        for uid in [u for u in self.failed_pods if u not in live]:
            del self.failed_pods[uid]
            self.failures_base.pop(uid, None)
            self.failures_written.pop(uid, None)
        # Jobs whose gang could not be created or bound sit out until their retry time.
        jobs: list[model.JobSpec] = []
        defects = list(snap.defects)
        for job in snap.jobs:
            held = self.blocked.get(job.uid)
            if held is not None and held.generation != job.generation:
                del self.blocked[job.uid]  # the user changed the job: try it at once
                held = None
            if held is not None and now < held.retry_at and not job.finished:
                defects.append(_as_defect(job, held))
            else:
                jobs.append(job)
        for uid in [u for u in self.blocked if u not in live]:
            del self.blocked[uid]
        return dataclasses.replace(
            snap,
            jobs=tuple(jobs),
            defects=tuple(sorted(defects, key=lambda d: d.key)),
            pods=tuple(p for p in owned if p.key not in hidden),
            foreign_pods=tuple(sorted(foreign, key=lambda p: p.key)),
        )

    def failures(self, job_uid: str) -> int:
        """Pod failures counted for a job (its persisted count plus those seen since)."""
        return self.failures_base.get(job_uid, 0) + len(self.failed_pods.get(job_uid, ()))

    def _hold(self, job: model.JobSpec, reason: str, message: str) -> Blocked:
        """Hold a job out of the solve after a create or bind failure (doubling back-off)."""
        prev = self.blocked.get(job.uid)
        attempts = prev.attempts + 1 if prev is not None else 1
        delay = min(RETRY_FIRST_S * 2 ** (attempts - 1), RETRY_MAX_S)
        held = Blocked(job.generation, reason, message, self.config.clock() + delay, attempts)
        self.blocked[job.uid] = held
        return held

    # ------------------------------------------------------------------ writes

    async def _act(self, plan: realise.Realisation, report: RoundReport) -> None:
        t0 = time.perf_counter()
        self._held_now = {}
        planned = {d.pod.key for d in plan.deletes}
        deletes = [
            *plan.deletes,
            *(realise.PodDelete(p, "Retried") for p in self._retry_deletes if p.key not in planned),
        ]
        if deletes and self.is_leader():
            results = await kubeapi.gather_limited(
                self.api.delete_pod(
                    d.pod.namespace, d.pod.name, force=d.reason == "NodeGone", uid=d.pod.uid
                )
                for d in deletes
            )
            report.deletes += sum(r.ok for r in results)
            report.errors += sum(
                not r.ok and r.outcome not in (kubeapi.Outcome.GONE, kubeapi.Outcome.FENCED)
                for r in results
            )
            preempted = sum(
                r.ok and d.reason == "SliceEnded" for d, r in zip(deletes, results, strict=True)
            )
            metrics.PREEMPTIONS.inc(preempted)
            for d in deletes:
                self.pending.pop(d.pod.job_key, None)
        t1 = time.perf_counter()
        report.deletes_s = t1 - t0
        by_job: dict[model.JobKey, list[realise.PodCreate]] = {}
        for c in plan.creates:
            by_job.setdefault(c.job.key, []).append(c)
        if plan.creates and self.is_leader():
            await self._create_gangs(plan.creates, by_job, report)
        else:
            by_job = {}
        # Queue the gangs: this round's, and whole gangs of earlier rounds still unbound (a
        # restarted or newly elected operator binds what its predecessor created).
        self.pending = {}
        deleted = {d.pod.key for d in deletes}
        job_uids = {k: j.uid for k, j in self.store.jobs.items()}
        gangs: dict[tuple[model.JobKey, int], list[model.PodInfo]] = {}
        for pod in self.store.pods.values():
            if (
                pod.terminating
                or pod.finished
                or pod.key in deleted
                or pod.job_key in by_job
                or not self.owns(pod, job_uids)
            ):
                continue
            gangs.setdefault((pod.job_key, pod.round), []).append(pod)
        for (key, _), members in sorted(gangs.items()):
            job = self.store.jobs.get(key)
            # A pod in the ledger was bound by us just now: the watch has not shown it yet.
            unbound = [
                p for p in members if not p.node and p.planned_node and p.key not in self.ledger
            ]
            # Only a complete gang is ever bound: a member missing means it is not one.
            if not isinstance(job, model.JobSpec) or not unbound or len(members) != job.replicas:
                continue
            if job.uid in self.blocked:
                continue
            self.pending[key] = [
                _PendingBind(
                    p.namespace,
                    p.name,
                    p.planned_node,
                    int(
                        max(
                            (v for r, v in p.requests.items() if r not in ("cpu", "memory")),
                            default=1,
                        )
                    ),
                    job=p.job,
                )
                for p in unbound
            ]
        for key, creates in by_job.items():
            self.pending[key] = [
                _PendingBind(key[0], c.name, c.node, c.gpus, job=key[1]) for c in creates
            ]
        t2 = time.perf_counter()
        report.creates_s = t2 - t1
        await self.bind_pending(report)
        report.binds_s = time.perf_counter() - t2

    async def _create_gangs(
        self,
        creates: Sequence[realise.PodCreate],
        by_job: dict[model.JobKey, list[realise.PodCreate]],
        report: RoundReport,
    ) -> None:
        """Create this round's gangs; those committed on their nodes leave ``by_job``, the rest
        (created unbound) stay in it for the binding queue.

        In two waves when binding at creation (``LoopConfig.bind_at_create``): first every pod
        but the last member of each gang created whole this round, unbound; then each such
        gang's last member, its commit point. If the gang passes the bind-time filters
        (``_fitting_gangs``) that member is created with ``spec.nodeName`` (bound by its create)
        and the other members are bound right after it; otherwise it is created unbound like
        the rest. A gang of k pods so costs k creates and k - 1 binds instead of k + k, and a
        member the API server refuses (a ResourceQuota, an admission webhook) is refused
        before any member is bound: the API server admits a pod when it is created, and the
        members created first are the ones checked first.
        """
        staged: dict[model.JobKey, realise.PodCreate] = {}
        if self.config.bind_at_create:
            staged = {k: cs[-1] for k, cs in by_job.items() if len(cs) == cs[0].job.replicas}
        first = [c for c in creates if staged.get(c.job.key) is not c]
        results = await kubeapi.gather_limited(
            self.api.create_pod(c.job.namespace, c.manifest) for c in first
        )
        report.creates += sum(r.outcome == kubeapi.Outcome.OK for r in results)
        outcome = {(c.job.key, c.name): r for c, r in zip(first, results, strict=True)}
        sent = {k: [c for c in cs if staged.get(k) is not c] for k, cs in by_job.items()}
        for key in await self._whole_gangs_created(sent, outcome, report):
            del by_job[key]
            staged.pop(key, None)
        if not staged:
            return
        # A gang goes on its nodes only when the first wave made all its other members (a pod
        # that existed already may be a predecessor's, maybe bound: the binding queue sorts
        # those out, where 409 means bound) and it fits now.
        fresh = {
            k: by_job[k]
            for k in staged
            if all(outcome[(k, c.name)].outcome == kubeapi.Outcome.OK for c in by_job[k][:-1])
        }
        direct = self._fitting_gangs(fresh)
        # At most as many gangs in flight as requests: a gang's binds follow its commit at once
        # instead of queueing behind every other gang's create.
        slots = asyncio.Semaphore(self.api.concurrency)

        async def commit(key: model.JobKey) -> tuple[kubeapi.Result, list[kubeapi.Result]]:
            last = staged[key]
            async with slots:
                if key not in direct:
                    return await self.api.create_pod(last.job.namespace, last.manifest), []
                made = await self.api.create_pod(
                    last.job.namespace, _on_node(last.manifest, last.node)
                )
                if made.outcome != kubeapi.Outcome.OK:
                    return made, []
                others = direct[key][:-1]
                binds = await asyncio.gather(
                    *(self.api.bind_pod(b.namespace, b.name, b.node) for b, _ in others)
                )
                return made, list(binds)

        keys = sorted(staged)
        done = await asyncio.gather(*(commit(k) for k in keys))
        report.creates += sum(made.outcome == kubeapi.Outcome.OK for made, _ in done)
        outcome.update({(k, staged[k].name): made for k, (made, _) in zip(keys, done, strict=True)})
        for key in await self._whole_gangs_created({k: by_job[k] for k in keys}, outcome, report):
            del by_job[key]
        ready: list[tuple[_PendingBind, dict[str, float]]] = []
        results = []
        members: dict[model.JobKey, list[_PendingBind]] = {}
        for key, (made, binds) in zip(keys, done, strict=True):
            if key not in direct or made.outcome != kubeapi.Outcome.OK:
                continue  # created unbound (or refused and undone above)
            *others, last = direct[key]
            self._record_bound(key, [last])
            report.bound_at_create += 1
            ready.extend(others)
            results.extend(binds)
            members[key] = [last[0]]
            by_job.pop(key, None)
        metrics.BINDINGS.inc(report.bound_at_create)
        await self._bound(ready, results, report, members)

    async def _whole_gangs_created(
        self,
        by_job: dict[model.JobKey, list[realise.PodCreate]],
        outcome: dict[tuple[model.JobKey, str], kubeapi.Result],
        report: RoundReport,
    ) -> list[model.JobKey]:
        """Drop every gang with a member the API server did not create: delete the members it
        did create, and hold the job out with the API server's message. Returns the gangs
        dropped (``by_job`` maps each gang to the creates sent; ``outcome`` has their answers).
        """
        undo: list[realise.PodCreate] = []
        dropped: list[model.JobKey] = []
        for key in sorted(by_job):
            creates = by_job[key]
            failed = [(c, outcome[(key, c.name)]) for c in creates]
            failed = [(c, r) for c, r in failed if not r.ok]
            if not failed:
                continue
            dropped.append(key)
            undo.extend(c for c in creates if outcome[(key, c.name)].ok)
            c, r = failed[0]
            if r.outcome == kubeapi.Outcome.FENCED:
                continue  # we lost the Lease: the new leader cleans up
            report.errors += 1
            message = _api_text(r, c.name)
            held = self._hold(c.job, create_failure_reason(r), f"creating its pods: {message}")
            self._held_now[key] = held
            logger.warning(
                "job %s/%s: pod %s not created (%s); %d pods of its gang removed, retry in %.0f s",
                key[0],
                key[1],
                c.name,
                message,
                sum(outcome[(key, x.name)].ok for x in creates),
                held.retry_at - self.config.clock(),
            )
        if undo:
            await kubeapi.gather_limited(self.api.delete_pod(c.job.namespace, c.name) for c in undo)
        return dropped

    def _node_usage(self) -> dict[str, dict[str, float]]:
        """Per node, every resource requested by the pods on it (Walras's and foreign ones, those
        being deleted included) and by binds in flight, plus their count under ``"pods"``."""
        now = time.monotonic()
        for key, (_, _, since) in list(self.ledger.items()):
            pod = self.store.pods.get(key)
            if (pod is not None and pod.node) or (pod is None and now - since > 10.0):
                del self.ledger[key]
        for key in [k for k in self._bound_jobs if k not in self.ledger]:
            del self._bound_jobs[key]
        usage = snapshot.node_usage([*self.store.pods.values(), *self.store.foreign.values()])
        for node_name, requests, _ in self.ledger.values():
            filters.add_usage(usage.setdefault(node_name, {}), requests)
        return usage

    def _bound_pods(self, key: model.JobKey, jr: realise.JobRound) -> int:
        """The job's live pods bound to this round's nodes: seen bound, or bound by us just now.

        The index of bound pods per job is built once per round (the statuses come right after
        the binds), so a round with thousands of jobs stays linear in the pods.
        """
        if self._bound_index[0] != self.round_no:
            index: dict[model.JobKey, list[str]] = {}
            for pod_key, pod in self.store.pods.items():
                if pod.terminating or pod.finished:
                    continue
                node = pod.node or self.ledger.get(pod_key, ("", {}, 0.0))[0]
                if node:
                    index.setdefault(pod.job_key, []).append(node)
            # Pods bound this round whose creation the watch has not delivered yet.
            for pod_key, job_key in self._bound_jobs.items():
                if pod_key not in self.store.pods and pod_key in self.ledger:
                    index.setdefault(job_key, []).append(self.ledger[pod_key][0])
            self._bound_index = (self.round_no, index)
        nodes = set(jr.nodes)
        return sum(n in nodes for n in self._bound_index[1].get(key, ()))

    def _resource_name(self, node: model.NodeInfo) -> str:
        pool = snapshot.node_pool(node, sorted(self.store.pools.values(), key=lambda p: p.name))
        return pool.resource_name if pool else crd.DEFAULT_RESOURCE_NAME

    def _capacity(self, node_name: str) -> int:
        node = self.store.nodes.get(node_name)
        if node is None:
            return -1
        return int(node.resource(self._resource_name(node)))

    def _bind_requests(self, key: model.JobKey, b: _PendingBind) -> dict[str, float]:
        """What one pending pod requests: its own spec once the watch has it, else its job's."""
        pod = self.store.pods.get((b.namespace, b.name))
        if pod is not None:
            return dict(pod.requests)
        node = self.store.nodes.get(b.node)
        resource = self._resource_name(node) if node is not None else crd.DEFAULT_RESOURCE_NAME
        job = self.store.jobs.get(key)
        if isinstance(job, model.JobSpec):
            requests = job.pod_requests(resource)
            requests[resource] = float(b.gpus)
            return requests
        return {resource: float(b.gpus)}

    def _gang_fit(
        self, key: model.JobKey, gang: list[_PendingBind], usage: dict[str, dict[str, float]]
    ) -> list[tuple[_PendingBind, dict[str, float]]] | None:
        """The bind-time filters for one whole gang (``bind_pending``'s docstring): ``None`` when
        a node is gone or cordoned, ``[]`` when some resource does not fit now, else each pod's
        requests (and ``usage`` then counts them)."""
        nodes = [self.store.nodes.get(b.node) for b in gang]
        if any(n is None or not filters.unschedulable(n, ()).ok for n in nodes):
            return None
        wanted = [(b, self._bind_requests(key, b)) for b in gang]
        trial = {n: dict(usage.get(n, {})) for n in {b.node for b in gang}}
        for b, requests in wanted:
            node = self.store.nodes[b.node]
            if not filters.resource_fit(requests, node.allocatable, trial[b.node]).ok:
                return []
            filters.add_usage(trial[b.node], requests)
        usage.update(trial)
        return wanted

    def _fitting_gangs(
        self, gangs: dict[model.JobKey, list[realise.PodCreate]]
    ) -> dict[model.JobKey, list[tuple[_PendingBind, dict[str, float]]]]:
        """The whole gangs about to be committed that pass the bind-time filters already
        (``bind_pending``'s docstring), each pod with its requests, the gang's commit member
        last. ``_create_gangs`` creates that member with ``spec.nodeName`` and binds the others
        right after it (a cold round of 5,000 jobs made 7,545 creates and 7,545 binds). A gang
        that does not fit now (a deleted pod still terminating on its node) is created unbound
        and waits in the binding queue, so a node is never handed a pod it has no room for."""
        usage = self._node_usage()
        fitting = {}
        for key in sorted(gangs):
            gang = [_PendingBind(key[0], c.name, c.node, c.gpus, job=key[1]) for c in gangs[key]]
            wanted = self._gang_fit(key, gang, usage)
            if wanted:
                fitting[key] = wanted
        return fitting

    def _record_bound(
        self, key: model.JobKey, pods: list[tuple[_PendingBind, dict[str, float]]]
    ) -> None:
        """Count pods bound just now on their nodes until the watch shows them bound."""
        now = time.monotonic()
        for b, requests in pods:
            self.ledger[(b.namespace, b.name)] = (b.node, requests, now)
            self._bound_jobs[(b.namespace, b.name)] = key

    async def bind_pending(self, report: RoundReport | None = None) -> None:
        """Bind every queued gang whose pods all pass the filters on their nodes now.

        The bind-time filters are the ones that change between rounds: the node exists and is
        not cordoned (else the gang is dropped and the next round re-plans it), and every
        resource fits next to all the pods on the node, those being deleted included (else the
        gang waits).
        """
        if not self.pending or not self.is_leader():
            return
        usage = self._node_usage()
        ready: list[tuple[_PendingBind, dict[str, float]]] = []
        for key in sorted(self.pending):
            wanted = self._gang_fit(key, self.pending[key], usage)
            if wanted is None:
                del self.pending[key]  # its node is gone or cordoned; the next round re-plans
            elif wanted:
                ready.extend(wanted)
                del self.pending[key]
        if not ready:
            return
        results = await kubeapi.gather_limited(
            self.api.bind_pod(b.namespace, b.name, b.node) for b, _ in ready
        )
        await self._bound(ready, results, report)

    async def _bound(
        self,
        ready: list[tuple[_PendingBind, dict[str, float]]],
        results: list[kubeapi.Result],
        report: RoundReport | None,
        members: dict[model.JobKey, list[_PendingBind]] | None = None,
    ) -> None:
        """Account binds sent (``results`` answer ``ready``, pod by pod); a gang with a member
        not bound is removed whole: its other ``members`` (already bound) go with it."""
        bound = 0
        broken: dict[model.JobKey, tuple[_PendingBind, kubeapi.Result]] = {}
        members = {k: list(v) for k, v in (members or {}).items()}
        for (b, requests), r in zip(ready, results, strict=True):
            key = (b.namespace, b.job)
            members.setdefault(key, []).append(b)
            # 409: the pod is bound already (an earlier attempt whose answer was lost).
            if r.outcome in (kubeapi.Outcome.OK, kubeapi.Outcome.CONFLICT):
                bound += 1
                self._record_bound(key, [(b, requests)])
            elif key not in broken:
                broken[key] = (b, r)
        metrics.BINDINGS.inc(bound)
        if report is not None:
            report.binds += bound
        await self._whole_gangs_bound(broken, members, report)

    async def _whole_gangs_bound(
        self,
        broken: dict[model.JobKey, tuple[_PendingBind, kubeapi.Result]],
        members: dict[model.JobKey, list[_PendingBind]],
        report: RoundReport | None,
    ) -> None:
        """A gang with a member that could not be bound is removed whole (bound members too),
        and its job held out with the reason; never a partial gang past the round."""
        undo: list[_PendingBind] = []
        for key, (b, r) in sorted(broken.items()):
            if r.outcome == kubeapi.Outcome.FENCED:
                continue  # we lost the Lease: write nothing more
            undo.extend(members[key])
            for m in members[key]:
                self.ledger.pop((m.namespace, m.name), None)
            message = f"binding pod {b.name} to {b.node}: {_api_text(r, b.name)}"
            logger.warning("job %s/%s: %s; its gang is removed", key[0], key[1], message)
            if report is not None:
                report.errors += 1
            job = self.store.jobs.get(key)
            if isinstance(job, model.JobSpec):
                self._held_now[key] = self._hold(job, "BindFailed", message)
        if undo:
            await kubeapi.gather_limited(self.api.delete_pod(m.namespace, m.name) for m in undo)

    # ------------------------------------------------------------------ status

    async def _statuses(self, planned: cycle.CyclePlan, report: RoundReport) -> None:
        snap, view, sol = planned.snapshot, planned.view, planned.solution
        plan, finished, hists = planned.realisation, planned.finished, planned.histories
        now = planned.now
        stamp = model.format_time(now)
        patches: list[tuple[str, str, dict[str, Any]]] = []
        events: list[tuple[model.JobSpec | model.JobDefect, str, str, str, str]] = []
        pending_reasons: dict[str, int] = {}
        by_key = {j.key: j for j in snap.jobs}
        # Fault hook: jobs that had pods on a node that is gone (walras.core.lost_nodes).
        lost = self.lost_nodes.observe(self.store.nodes, self.store.pods.values())
        # Fault hook: accepted fields that do nothing or not what was asked (core.field_notices).
        notices = field_notices.notices(snap.jobs, snap.pools, snap.tenants)

        # The first round after start-up or Lease take-over rewrites every status once: the new
        # leader stamps its round number (who wrote last); the history itself is reloaded from
        # its ConfigMaps (run()), not taken from these statuses.
        refresh = self._refresh_all
        self._refresh_all = False

        def add(job: model.JobSpec | model.JobDefect, core: dict[str, Any], force: bool) -> None:
            old = job.status
            extra_conditions = self.throughputs.conditions(job)  # mismatch, profiling
            if extra_conditions:
                core = {**core, "conditions": [*core["conditions"], *extra_conditions]}
            extra = self.throughputs.status_fields(job, core)
            # Only what a user sees triggers a patch; the history goes to its ConfigMaps (and
            # rides along here only when a patch is made anyway).
            if (
                not (force or refresh)
                and not status.changed(core, old)
                and not self.throughputs.changed(job, extra)
            ):
                return
            full = dict(core)
            full["conditions"] = cond.merge_times(
                core["conditions"], old.get("conditions") or [], stamp
            )
            full["round"] = self.round_no
            hist = hists.get(job.key)
            if hist is not None:
                full.update(hist.status_fields())
            full.update(extra)
            failures = self.failures(job.uid)
            if failures:
                full["failures"] = failures
            patches.append((job.namespace, job.name, full))

        def failures_changed(job: model.JobSpec | model.JobDefect) -> bool:
            try:
                return self.failures(job.uid) != int(job.status.get("failures") or 0)
            except (TypeError, ValueError):
                return True

        for r, job in enumerate(sol.jobs):
            held = self._held_now.get(job.key)
            if held is not None:
                # Its gang could not be created or bound this round: nothing of it runs.
                core = status.issue_status(
                    job, job.tenant, "spec.template", held.reason, held.message
                )
                pending_reasons[held.reason] = pending_reasons.get(held.reason, 0) + 1
                add(job, core, force=False)
                events.append(
                    (
                        job,
                        job.uid,
                        "Warning",
                        held.reason,
                        cond.issue_message("spec.template", held.message),
                    )
                )
                continue
            jr = plan.jobs[job.key]
            hist = hists[job.key]
            core = status.solved_job_status(
                job,
                r,
                sol,
                jr,
                view,
                has_run=sum(hist.received.values()) > 0,
                bound=self._bound_pods(job.key, jr),
            )
            if core["phase"] == crd.PHASE_PENDING:
                reason = next(
                    c["reason"] for c in core["conditions"] if c["type"] == cond.ALLOCATED
                )
                pending_reasons[reason] = pending_reasons.get(reason, 0) + 1
            if job.key in lost:  # fault hook: the NodeLost condition and Warning Event
                core = lost_nodes.mark(core, lost[job.key], job.generation)
                events.append(
                    (job, job.uid, "Warning", lost_nodes.REASON, lost_nodes.message(lost[job.key]))
                )
            found = notices.get(job.key)
            if found:  # fault hook: the SpecWarnings condition and Warning Event
                core = field_notices.mark(core, found, job.generation)
                events.append(
                    (
                        job,
                        job.uid,
                        "Warning",
                        field_notices.reason(found),
                        field_notices.message(found),
                    )
                )
            add(job, core, force=failures_changed(job))
        for job, reason, message in self._retry_events:
            events.append((job, job.uid, "Warning", reason, message))
        for job, reason, message in self.throughputs.events():
            events.append((job, job.uid, "Warning", reason, message))
        for issue in sol.issues:
            job = by_key[issue.key]
            core = status.issue_status(job, job.tenant, issue.field, issue.reason, issue.message)
            pending_reasons[issue.reason] = pending_reasons.get(issue.reason, 0) + 1
            add(job, core, force=False)
            events.append(
                (
                    job,
                    job.uid,
                    "Warning",
                    issue.reason,
                    cond.issue_message(issue.field, issue.message),
                )
            )
        for defect in snap.defects:
            if defect.status.get("phase") in crd.TERMINAL_PHASES:
                continue
            core = status.issue_status(
                defect, defect.tenant, defect.field, defect.reason, defect.message
            )
            pending_reasons[defect.reason] = pending_reasons.get(defect.reason, 0) + 1
            add(defect, core, force=False)
            events.append(
                (
                    defect,
                    defect.uid,
                    "Warning",
                    defect.reason,
                    cond.issue_message(defect.field, defect.message),
                )
            )
        for key, done in finished.items():
            job = by_key[key]
            phase, reason, message = done.phase, done.reason, done.message
            if reason == cond.POD_FAILED:
                message = (
                    f"backoffLimit {self.facts.backoff.get(key, 3)} reached after "
                    f"{self.failures(job.uid)} pod failures; {message}"
                )
            add(job, status.finished_status(job, phase, reason, message), force=True)
            events.append(
                (
                    job,
                    job.uid,
                    "Normal" if phase == crd.PHASE_SUCCEEDED else "Warning",
                    reason,
                    message,
                )
            )

        gpus = {j.key: int(sol.gpus_per_pod[r]) for r, j in enumerate(sol.jobs)}
        pool_cores = status.pool_statuses(snap, view, sol, plan.jobs, gpus)
        pool_patches: list[tuple[str, dict[str, Any]]] = []
        for pool in snap.pools:
            core = pool_cores[pool.name]
            if refresh or status.changed(core, pool.status):
                full = dict(core)
                full["conditions"] = cond.merge_times(
                    core["conditions"], pool.status.get("conditions") or [], stamp
                )
                full["round"] = self.round_no
                pool_patches.append((pool.name, full))
            metrics.ALLOCATED_SHARE.labels(pool=pool.name).set(core["utilisation"])

        new_events = []
        for obj, uid, etype, reason, message in events:
            ref = f"{obj.namespace}/{obj.name}"
            if self.events_posted.get(ref) == (reason, message):
                continue
            self.events_posted[ref] = (reason, message)
            new_events.append((obj, uid, etype, reason, message))

        results = await kubeapi.gather_limited(
            [
                *(self.api.patch_job_status(ns, name, body) for ns, name, body in patches),
                *(self.api.patch_pool_status(name, body) for name, body in pool_patches),
                *(
                    self.api.post_event(
                        obj, uid=uid, event_type=etype, reason=reason, message=message, now=stamp
                    )
                    for obj, uid, etype, reason, message in new_events
                ),
            ]
        )
        report.status_patches = len(patches) + len(pool_patches)
        report.events = len(new_events)
        report.errors += sum(r.outcome == kubeapi.Outcome.ERROR for r in results)
        metrics.PENDING_JOBS.clear()
        for reason, count in pending_reasons.items():
            metrics.PENDING_JOBS.labels(reason=reason).set(count)

    # ------------------------------------------------------------------ history

    async def _restore_histories(self) -> None:
        """Load the persisted histories (one LIST); they replace what this process had."""
        client = getattr(self.api, "client", None)
        if not hasattr(self.api, "put_configmap") or client is None:
            return  # a stand-in API without ConfigMaps: histories come from the statuses
        try:
            where = self.config.history_namespace
            if not await asyncio.to_thread(history_store.permitted, client, where):
                if not self.history_store.forbidden:
                    logger.info(
                        "no RBAC for configmaps (list, create, patch): the schedule history "
                        "persists in job statuses only"
                    )
                self.history_store.forbidden = True
                return
            self.history_store.forbidden = False
            loaded = await asyncio.to_thread(history_store.load, client, where)
        except Exception as exc:  # not fatal: the statuses carry the pre-ConfigMap history
            logger.warning("schedule history not loaded (%s); continuing from job statuses", exc)
            return
        self.history_store.adopt(loaded)
        self._restored = loaded.records
        self.state.histories.clear()

    def _adopt_restored(self, snap: snapshot.Snapshot) -> None:
        """A loaded record becomes the job's history unless its status is more recent (a job
        status written after the record's accounting, e.g. by an operator without ConfigMaps)."""
        if not self._restored:
            return
        for job in snap.jobs:
            raw = self._restored.pop(job.uid, None)
            if raw is None or job.uid in self.state.histories:
                continue
            try:
                hist = history.from_record(raw)
            except (TypeError, ValueError):
                continue
            from_status = model.parse_time(job.status.get("accountedAt"))
            if from_status is not None and (
                hist.accounted_at is None or from_status > hist.accounted_at + 1e-3
            ):
                continue  # the cycle rebuilds it from the status
            if hist.running_group:
                hist.running_rate = cycle.rate(job, hist.running_group, snap)
            self.state.histories[job.uid] = hist
        # Held-out jobs (defects) are adopted once they are planned again.
        waiting = {d.uid for d in snap.defects}
        self._restored = {u: r for u, r in self._restored.items() if u in waiting}

    async def _save_histories(self, planned: cycle.CyclePlan, report: RoundReport) -> None:
        """Persist the histories whose running state changed (writes proportional to change)."""
        if (
            not hasattr(self.api, "put_configmap")
            or not self.is_leader()
            or self.history_store.forbidden
        ):
            return
        snap = planned.snapshot
        single = self.config.history_namespace

        def where(namespace: str) -> str:
            return single or namespace

        live: dict[str, set[str]] = {}
        for key, uid in [
            *((j.key, j.uid) for j in snap.jobs),
            *((d.key, d.uid) for d in snap.defects),
        ]:
            live.setdefault(where(key[0]), set()).add(uid)
        by_key = {j.key: j for j in planned.active}
        self.history_store.update(
            (
                (where(by_key[key].namespace), by_key[key].uid, hist)
                for key, hist in sorted(planned.histories.items())
                if key in by_key
            ),
            live,
        )
        written, errors = await self.history_store.flush(self.api, self.round_no)
        report.history_writes = written
        report.errors += errors

    # ------------------------------------------------------------------ metrics

    def _observe(self, report: RoundReport) -> None:
        for phase in ("snapshot", "solve", "realise", "writes", "total"):
            metrics.ROUND_SECONDS.labels(phase=phase).observe(getattr(report, phase))
        metrics.SOLVE_SECONDS.labels(policy=self.config.policy).observe(report.solve)
        metrics.SOLVER_ITERATIONS.labels(policy=self.config.policy).set(report.iterations)
        if self.config.policy == "price-discovery":
            metrics.DUALITY_GAP.set(report.gap)
        for gpu_type, price in report.prices.items():
            metrics.PRICE.labels(gpu_type=gpu_type).set(price)
        metrics.ROUNDS.inc()

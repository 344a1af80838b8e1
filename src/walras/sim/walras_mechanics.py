"""Walras's own round mechanics (``--semantics walras``): the operator's scheduling core on a
simulated clock and cluster.

Only the clock and the cluster are simulated; every decision is made by the code the operator runs
(``walras.core.cycle.plan``: completions → registered policy → realiser). The simulated cluster is
fed through the same parsers and :class:`~walras.core.snapshot.Store` as the operator's watches:
nodes, ResourcePools, FungibleJobs and pods are API-shaped dicts, so a job here is exactly what a
user would submit and the operator would see.

The loop, as the operator behaves (``walras.operator.loop``):

- a **full round** every ``round_s`` seconds: ``plan(..., incremental=False)``; its deletions are
  the slices that ended, its creations the gangs placed afresh;
- an **incremental round** whenever a job arrives or finishes between boundaries:
  ``plan(..., incremental=True)`` keeps every running gang and only fills free GPUs;
- pods are bound as soon as they are created (the simulated API has no latency), and a job's pods
  turn ``Succeeded`` the moment its work is done, which the next cycle reads as completion.

Progress: a gang placed afresh (``JobRound.kept`` false, the first dispatch included) holds its
GPUs but works only from ``start + restart_s`` (``--restart-seconds``, the checkpoint reload); it
then runs at ``spec.throughput[type]`` work units per second, the job's whole-gang rate on that GPU
type (Gavel's table values). It finishes exactly when ``work = totalWork``:
``finish = max(start + restart_s, now) + remaining / rate``. Utilisation counts a GPU busy while a
pod holds it (restart seconds included), as Gavel counts it.

Worked example (one 1-GPU job alone, R = 360, X = 10, rate 2 work/s, totalWork 1000, arrival 0):
the arrival's incremental round places it at t = 0; it works from 10 s and finishes at
10 + 1000 / 2 = 510 s (full rounds at 360 s keep it on its GPU, so no second restart). JCT =
makespan = 510 s; utilisation 510 / 510 = 1 on its GPU.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from walras.core import crd, cycle, governance, model, policies, realise
from walras.core.snapshot import Store
from walras.sim import declared as declarations
from walras.sim import tenants as sim_tenants
from walras.sim.cluster import Cluster
from walras.sim.config import SimConfig
from walras.sim.errors import SimInputError, SimulationStuckError
from walras.sim.tally import RoundRecord, Tally
from walras.sim.workload import Workload

Progress = Callable[[int, int], None]

NAMESPACE = "sim"
RESOURCE = crd.DEFAULT_RESOURCE_NAME
_EPS = 1e-9
# A safety net against a policy that never places some job: no real run needs this many cycles
# per job, and a bug should end in an error naming the stuck jobs, not an endless loop.
_MAX_CYCLES_PER_JOB = 20_000
# Full rounds in a row with jobs waiting, nothing running and nothing left to arrive after which
# the run ends with an error naming the waiting jobs and what the policy said of them. From then
# on a policy's inputs change only by the clock (waiting times grow, no history moves), so a
# policy that placed nothing in this many rounds is not going to: e.g. PS-DSF, whose gangs run on
# one node, with a gang larger than every node (GangTooLarge). The cycle cap above would end
# such a run only after tens of millions of cycles.
_IDLE_FULL_ROUNDS = 10


def job_name(j: int) -> str:
    return f"job-{j:05d}"


def job_manifest(workload: Workload, j: int) -> dict[str, Any]:
    """Trace job ``j`` as the FungibleJob a user would submit (for manifest input: the user's own
    manifest, with ``totalWork`` = the work left and no status)."""
    given = getattr(workload, "manifests", ())
    if given:
        doc = dict(given[j])
        meta = dict(doc.get("metadata") or {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"sim-uid-{j}")
        meta.setdefault("generation", 1)
        doc["metadata"] = meta
        doc["spec"] = {**dict(doc.get("spec") or {}), "totalWork": float(workload.total_steps[j])}
        doc.pop("status", None)
        return doc
    rates = {
        t: float(workload.throughputs[j, c])
        for c, t in enumerate(workload.gpu_types)
        if workload.throughputs[j, c] > 0
    }
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.JOB_KIND,
        "metadata": {
            "namespace": NAMESPACE,
            "name": job_name(j),
            "uid": f"sim-uid-{j}",
            "generation": 1,
            "creationTimestamp": None,
        },
        "spec": {
            "replicas": int(workload.scale_factors[j]),
            "throughput": rates,
            "utility": {"kind": "log", "weight": float(workload.priority_weights[j])},
            "totalWork": float(workload.total_steps[j]),
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            "image": workload.job_types[j],
                            "resources": {"limits": {RESOURCE: "1"}},
                        }
                    ]
                }
            },
        },
    }


def node_manifest(name: str, gpu_type: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {crd.GPU_TYPE_LABEL: gpu_type}},
        "spec": {},
        "status": {
            "allocatable": {RESOURCE: str(gpus), "cpu": "1000", "memory": "4Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pool_manifest(gpu_type: str) -> dict[str, Any]:
    return {
        "metadata": {"name": gpu_type, "generation": 1},
        "spec": {"gpuType": gpu_type, "nodeSelector": {crd.GPU_TYPE_LABEL: gpu_type}},
    }


def gpu_nodes(cluster: Cluster) -> dict[int, str]:
    """Each GPU id of ``cluster`` → the name of the node holding it."""
    return {g: node.name for node in cluster.nodes for g in node.gpu_ids}


@dataclass(slots=True)
class _Running:
    """A job's gang on its GPUs: since when, when it starts working, at what rate."""

    start: float
    productive_from: float
    rate: float
    gpus: tuple[int, ...]
    pods: tuple[str, ...]
    accounted_to: float


@dataclass(slots=True)
class _Sim:
    workload: Workload
    cluster: Cluster
    config: SimConfig
    tally: Tally
    store: Store = field(default_factory=Store)
    work: list[float] = field(default_factory=list)
    running: dict[int, _Running] = field(default_factory=dict)
    free_gpus: dict[str, list[int]] = field(default_factory=dict)
    node_type: dict[str, str] = field(default_factory=dict)
    # GPU id → its node: looked up for every GPU a gang frees and every busy GPU of a full round,
    # so a scan of the nodes here would make each round O(GPUs²).
    gpu_node: dict[int, str] = field(default_factory=dict)
    admitted: set[int] = field(default_factory=set)
    done: set[int] = field(default_factory=set)
    finish_heap: list[tuple[float, int]] = field(default_factory=list)
    # Each pod the simulation created, as the operator's parser read it (``_created``): its
    # phase change is a replace of the parsed form, not a second parse of its manifest.
    pods: dict[str, model.PodInfo] = field(default_factory=dict)
    # Per (job UID, generation, GPUs per pod, GPU type): the first such pod, parsed in full.
    pod_templates: dict[tuple[str, int, int, str], model.PodInfo] = field(default_factory=dict)
    index: dict[tuple[str, str], int] = field(default_factory=dict)
    names: dict[int, tuple[str, str]] = field(default_factory=dict)
    # --throughput-noise/--hide-fraction: what the policy sees (None: the true throughputs).
    declared: declarations.Declared | None = None

    def settle(self, j: int, now: float) -> None:
        """Account job ``j``'s work and busy time up to ``now``."""
        run = self.running[j]
        if now <= run.accounted_to:
            return
        begin = max(run.accounted_to, run.productive_from)
        if now > begin:
            self.work[j] += (now - begin) * run.rate
        busy = now - run.accounted_to
        steps = round(self.work[j]) - self.tally.steps_done[j]
        self.tally.ran(j, max(steps, 0), busy, run.gpus)
        run.accounted_to = now

    def finish_time(self, j: int) -> float:
        run = self.running[j]
        if run.rate <= 0:
            return math.inf
        left = max(float(self.workload.total_steps[j]) - self.work[j], 0.0)
        return max(run.productive_from, run.accounted_to) + left / run.rate

    def stop(self, j: int, now: float) -> None:
        self.settle(j, now)
        run = self.running.pop(j)
        for g in run.gpus:
            self.free_gpus[self._node_of_gpu(g)].append(g)

    def _node_of_gpu(self, g: int) -> str:
        return self.gpu_node[g]


def run(
    workload: Workload,
    cluster: Cluster,
    policy: Any,
    config: SimConfig,
    tally: Tally,
    progress: Progress | None = None,
    *,
    observer: Callable[[cycle.CyclePlan], None] | None = None,
) -> float:
    """Simulate until every job has finished; returns the final clock (the makespan).

    ``policy`` is a registered policy's name (or alias), or anything with that ``name`` (what
    :func:`walras.sim.engine.run` passes); the policy object itself is built here from it and
    ``config.policy_args``. ``observer`` is called with every cycle's plan once it is applied
    (the same-code-path test compares these with the real operator's rounds).
    """
    name = policy if isinstance(policy, str) else str(policy.name)
    try:
        # The operator's builder (walras.core.policies.registry.build), with the simulator's
        # facts in the handle: the same policy object the operator would run.
        core_policy = policies.build(
            policies.PolicyConfig(name, config.policy_args, config.pop_shards),
            policies.Handle(
                round_seconds=float(config.round_s),
                restart_seconds=float(config.restart_s),
                seed=config.seed,
            ),
        )
    except policies.UnknownPolicyError as exc:
        raise SimInputError(f"--policy: {exc}") from None
    except policies.PolicyArgError as exc:
        raise SimInputError(f"--policy-arg: {exc}") from None
    sim = _Sim(workload, cluster, config, tally, work=[0.0] * workload.n_jobs)
    sim.declared = declarations.from_config(workload, config)
    sim.gpu_node = gpu_nodes(cluster)
    for gpu_type in cluster.gpu_types:
        sim.store.upsert("pool", pool_manifest(gpu_type))
    for pc in getattr(workload, "priority_classes", ()):  # a manifest file's (sim.manifests)
        sim.store.upsert("priorityclass", pc)
    for node in cluster.nodes:
        sim.store.upsert("node", node_manifest(node.name, node.gpu_type, len(node.gpu_ids)))
        sim.free_gpus[node.name] = sorted(node.gpu_ids, reverse=True)
        sim.node_type[node.name] = node.gpu_type
    capacity = {t: float(c) for t, c in zip(cluster.gpu_types, cluster.counts, strict=True)}
    tenants = sim_tenants.attach(config, capacity, sim.store, tally)
    arrivals = sorted(range(workload.n_jobs), key=lambda j: (float(workload.arrivals[j]), j))
    state = cycle.CycleState()
    round_s, restart_s = float(config.round_s), float(config.restart_s)
    n = workload.n_jobs
    ptr = 0
    now = float(workload.arrivals[arrivals[0]]) if n else 0.0
    next_full = now
    round_no = 0
    budget = _MAX_CYCLES_PER_JOB * max(n, 1)
    idle_rounds = 0
    while len(sim.done) < n:
        next_arrival = float(workload.arrivals[arrivals[ptr]]) if ptr < n else math.inf
        while sim.finish_heap and (
            sim.finish_heap[0][1] not in sim.running
            or abs(sim.finish_heap[0][0] - sim.finish_time(sim.finish_heap[0][1])) > 1e-6
        ):
            heapq.heappop(sim.finish_heap)  # stale entry: the job stopped or was re-placed
        next_finish = sim.finish_heap[0][0] if sim.finish_heap else math.inf
        active = len(sim.admitted) - len(sim.done)
        if active == 0:
            next_full = max(next_full, next_arrival)
        now = min(next_full, next_arrival, next_finish)
        if math.isinf(now):
            stuck = sorted(sim.admitted - sim.done)[:5]
            raise SimulationStuckError(
                f"no job can run any more; jobs {[sim.names[j][1] for j in stuck]} never finish"
            )
        event = False
        while sim.finish_heap and sim.finish_heap[0][0] <= now + _EPS:
            _, j = heapq.heappop(sim.finish_heap)
            if j in sim.running and j not in sim.done and sim.finish_time(j) <= now + 1e-6:
                _complete(sim, j, now)
                event = True
        while ptr < n and float(workload.arrivals[arrivals[ptr]]) <= now + _EPS:
            j = arrivals[ptr]
            manifest = job_manifest(workload, j)
            manifest["metadata"]["creationTimestamp"] = _stamp(float(workload.arrivals[j]))
            if sim.declared is not None:
                manifest = sim.declared.admit(j, manifest)
            key = (str(manifest["metadata"]["namespace"]), str(manifest["metadata"]["name"]))
            sim.index[key], sim.names[j] = j, key
            if tally.tenants is not None and tenants is not None:
                tally.tenants.job_tenant[j] = governance.tenant_of(key[0], tenants)
            sim.store.upsert("job", manifest)
            sim.admitted.add(j)
            ptr += 1
            event = True
        full = now >= next_full - _EPS
        if not (full or event):
            continue
        round_no += 1
        budget -= 1
        if budget < 0:
            raise SimulationStuckError(f"more than {_MAX_CYCLES_PER_JOB} cycles per job")
        for j in list(sim.running):
            sim.settle(j, now)
        if sim.declared is not None:
            on = {
                j: (sim.node_type[sim._node_of_gpu(r.gpus[0])], r.productive_from)
                for j, r in sim.running.items()
            }
            sim.declared.refresh(now, full, on, sim.store, sim.done)
        planned = cycle.plan(
            state,
            core_policy,
            sim.store.freeze(now),
            now=now,
            round_no=round_no,
            incremental=not full,
            restart_s=restart_s,
            hold_s=config.hold_s,
            history_half_life_s=config.history_half_life_s,
            backfill=config.backfill,
            min_run_s=config.min_run_s,
        )
        tally.solve_s.append(planned.timings["solve"])
        _apply(sim, planned, now, full)
        if observer is not None:
            observer(planned)
        if full:
            busy = [0] * len(cluster.gpu_types)
            for run_ in sim.running.values():
                for g in run_.gpus:
                    busy[cluster.gpu_types.index(sim.node_type[sim._node_of_gpu(g)])] += 1
            waiting = len(sim.admitted) - len(sim.done) - len(sim.running)
            tally.rounds.append(
                RoundRecord(now, now + round_s, tuple(busy), len(sim.running), waiting)
            )
            next_full = now + round_s
            if tenants is not None:
                sim_tenants.observe(tally, tenants, planned, _held_by_job(sim))
            idle_rounds = idle_rounds + 1 if ptr >= n and not sim.running and waiting else 0
            if idle_rounds >= _IDLE_FULL_ROUNDS:
                raise SimulationStuckError(_never_placed(sim, planned, idle_rounds))
        if progress is not None:
            progress(tally.finished, n)
    return now


def _never_placed(sim: _Sim, planned: cycle.CyclePlan, rounds: int) -> str:
    """The error of a run that cannot end: the jobs waiting, each with what the policy said."""
    said = {issue.key: issue for issue in planned.solution.issues}
    waiting = sorted(sim.admitted - sim.done)
    lines = []
    for j in waiting[:5]:
        key = sim.names[j]
        issue = said.get(key)
        why = f"{issue.reason}: {issue.message}" if issue is not None else "not placed"
        lines.append(f"job {key[1]}: {why}")
    more = f" (and {len(waiting) - 5} more)" if len(waiting) > 5 else ""
    return (
        f"{len(waiting)} jobs wait with every GPU idle and nothing left to arrive for {rounds} "
        f"rounds; they would never run{more}: " + "; ".join(lines)
    )


def _held_by_job(sim: _Sim) -> dict[tuple[str, str], dict[str, int]]:
    """GPUs per type each running job's pods hold (``--tenants``: the guarantees' measure)."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for j, run_ in sim.running.items():
        per = out.setdefault(sim.names[j], {})
        for g in run_.gpus:
            gpu_type = sim.node_type[sim._node_of_gpu(g)]
            per[gpu_type] = per.get(gpu_type, 0) + 1
    return out


def _stamp(epoch: float) -> str:
    return model.format_time(epoch)


def _complete(sim: _Sim, j: int, now: float) -> None:
    """Job ``j`` did all its work at ``now``: its pods succeed, its GPUs go free."""
    pods = sim.running[j].pods
    sim.stop(j, now)
    sim.work[j] = float(sim.workload.total_steps[j])
    remaining = int(sim.workload.total_steps[j]) - sim.tally.steps_done[j]
    if remaining > 0:
        sim.tally.steps_done[j] += remaining
    sim.tally.complete(j, now)
    sim.done.add(j)
    for pod in pods:
        # The pod as the API would show it after its phase changed (its status is the phase).
        sim.pods[pod] = dataclasses.replace(sim.pods[pod], phase=crd.PHASE_SUCCEEDED)
        sim.store.put_pod(sim.pods[pod])


def _created(sim: _Sim, create: realise.PodCreate) -> model.PodInfo:
    """``model.parse_pod`` of the pod ``create`` made, once bound and running (``created_pod``).

    Pods of one job, GPU count and GPU type differ only in their name, replica, node, group
    and round (metadata the realiser writes), so the first one is parsed in full and the others
    are that one with those fields replaced: parsing requests and labels of every pod was an
    eighth of a simulation's time. ``tests/unit/test_sim_pod_parse.py`` checks every pod of a
    run against the full parse.
    """
    job = create.job
    # The node's GPU type names its pool, whose resource the pod requests its GPUs of.
    key = (job.uid, job.generation, create.gpus, sim.node_type[create.node])
    first = sim.pod_templates.get(key)
    if first is None:
        parsed = model.parse_pod(created_pod(create.manifest, create.node))
        sim.pod_templates[key] = parsed
        return parsed
    return dataclasses.replace(
        first,
        name=create.name,
        uid=f"uid-{create.name}",
        replica=create.replica,
        node=create.node,
        planned_node=create.node,
        group=create.group,
        round=create.round_no,
    )


def _apply(sim: _Sim, planned: cycle.CyclePlan, now: float, full: bool) -> None:
    """Carry a plan out on the simulated cluster (what the operator's writes do on a real one)."""
    real = planned.realisation
    # The core finished a job from its own accounting (work done ≥ totalWork) before the
    # simulated pods did: the operator would mark it Succeeded now, so the simulation does too.
    for key in planned.finished:
        j = sim.index[key]
        if j in sim.running and j not in sim.done:
            _complete(sim, j, now)
    deleted_jobs: set[int] = set()
    for delete in real.deletes:
        sim.store.delete("pod", delete.pod.namespace, delete.pod.name)
        sim.pods.pop(delete.pod.name, None)
        deleted_jobs.add(sim.index[delete.pod.job_key])
    for j in deleted_jobs:
        if j in sim.running:
            sim.stop(j, now)
        if j in sim.done and not any(p.job_key == sim.names[j] for p in sim.store.pods.values()):
            sim.store.delete("job", *sim.names[j])
    by_job: dict[int, list[Any]] = {}
    for create in real.creates:
        by_job.setdefault(sim.index[create.job.key], []).append(create)
    for j, creates in sorted(by_job.items()):
        if j in sim.running:
            sim.stop(j, now)
        gpus: list[int] = []
        pods: list[str] = []
        for create in creates:
            sim.pods[create.name] = _created(sim, create)
            sim.store.put_pod(sim.pods[create.name])
            pods.append(create.name)
            free = sim.free_gpus[create.node]
            if len(free) < create.gpus:
                raise SimulationStuckError(
                    f"the plan put {sim.names[j][1]} on {create.node}, which has "
                    f"{len(free)} free GPUs of the {create.gpus} it needs"
                )
            gpus.extend(free.pop() for _ in range(create.gpus))
        job = creates[0].job
        gpu_type = sim.node_type[creates[0].node]
        # A policy that places gangs itself (Hadar) states each job's rate: copies of a forked job
        # add up, and a gang over several types runs at its slowest member's rate.
        planned_rate = planned.solution.rates.get(job.key) if planned.solution.placements else None
        rate = float(
            planned_rate if planned_rate is not None else job.throughput.get(gpu_type, 0.0)
        )
        if sim.declared is not None:
            # The policy saw declared/estimated rates; the job runs at its true one, and the core's
            # work accounting follows it (the operator reads real progress from the pods).
            if planned.solution.placements:
                raise SimInputError(
                    "--throughput-noise/--hide-fraction: policies that place gangs themselves "
                    "(hadar, hadare) are not supported"
                )
            rate = sim.declared.true_rate(j, gpu_type)
            planned.histories[job.key].running_rate = rate
        sim.running[j] = _Running(
            start=now,
            productive_from=now + float(sim.config.restart_s),
            rate=rate,
            gpus=tuple(gpus),
            pods=tuple(pods),
            accounted_to=now,
        )
        sim.tally.dispatched(j, now, restarted=True)
        if rate > 0:
            heapq.heappush(sim.finish_heap, (sim.finish_time(j), j))
    if full:
        for key, jr in planned.realisation.jobs.items():
            j = sim.index[key]
            if jr.kept and j in sim.running and j not in by_job:
                sim.tally.dispatched(j, now, restarted=False)


def created_pod(manifest: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The pod the operator created, as the API returns it once bound and running (also used by
    ``bench/bench_realiser.py``, which applies each round's plan the same way)."""
    out = dict(manifest)
    meta = dict(out["metadata"])
    meta.setdefault("uid", f"uid-{meta['name']}")
    out["metadata"] = meta
    out["spec"] = {**dict(out["spec"]), "nodeName": node}
    out["status"] = {"phase": crd.PHASE_RUNNING}
    return out

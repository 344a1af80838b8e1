"""StatementOfWork in the operator: keep the mechanism's ledger, reserve first, run the gangs.

Called by ``walras.operator.loop`` once per round, right after the snapshot is prepared and
before the policy plans (:meth:`SowRunner.round`). Each call:

1. lists the StatementOfWork objects and the SoW pods (two LISTs: the SoW is not watched);
2. advances the ledger to the current mechanism round (``walras.core.sow_shell.advance``):
   instances whose pods all Succeeded complete and are charged, new SoWs are born and admitted
   (menu, failure estimate and launch plan posted), arrivals start per plan, LIFO eviction;
3. deletes the pods of instances no longer running (evicted, cancelled, completed), creates the
   gang of an instance that starts (same pod manifest as a FungibleJob's, owned by the SoW,
   ``spec.nodeName`` set: the mechanism already chose to run it; first fit over the nodes of
   its type that kube-scheduler's static filters allow for the template);
4. returns the snapshot with every GPU the running instances hold or were just given shown as
   foreign usage: the policy plans only what is left (capacity reduction per node, hence per
   GPU type), and the realiser moves FungibleJob pods off nodes a starting gang needs;
5. merge-patches each SoW's status (birth, menus, failure tables, plans, instance phases,
   charges), posts one Event per birth, rejection, eviction/cancellation, unprofitable
   cancellation (reason ``Unprofitable``: a running instance no completion can pay any more,
   charged 0, its pods deleted like an evicted one's) and completion, and
   schedules a wake-up at the next round boundary, so every mechanism round is played even
   when the operator's own rounds drift.

Invalid SoWs the CRD cannot catch (a template the API server would reject, k above the bound
``K``, a duration above ``D``, a value above ``V``, an unknown GPU type) get ``phase:
Rejected`` and ``Admitted=False`` naming the field; the operator carries on.

Mechanism bounds come from ``WALRAS_SOW_*`` environment variables (:class:`SowConfig`); the
round length is the operator's ``--round-seconds``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from walras.allocator.sow import Ledger, MechanismParams, Phase, instance_id
from walras.core import crd, filters, model, realise, snapshot
from walras.core import sow_shell as shell
from walras.kube import writes as kubeapi

logger = logging.getLogger("walras.operator.sow")

PATH = f"/apis/{crd.GROUP}/{crd.VERSION}/{shell.PLURAL}"
# A starting gang whose nodes still hold pods being deleted is created this much later.
RETRY_S = 0.5


@dataclass(frozen=True, slots=True)
class SowConfig:
    """Bounds and tuning of the mechanism (``WALRAS_SOW_<FIELD>`` overrides each)."""

    max_concurrency: int = 64
    max_duration: int = 256
    max_value: float = 10_000.0
    min_value: float = 1.0
    epsilon: float = 0.1
    seed: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SowConfig:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"WALRAS_SOW_{f.name.upper()}")
            if raw is not None:
                values[f.name] = int(raw) if f.type == "int" else float(raw)
        return cls(**values)

    def params(self) -> MechanismParams:
        return MechanismParams(
            max_concurrency=self.max_concurrency,
            max_duration=self.max_duration,
            max_value=self.max_value,
            min_value=self.min_value,
            epsilon=self.epsilon,
            seed=self.seed,
        )


@dataclass(frozen=True, slots=True)
class SowPod:
    """A pod of a SoW instance (label ``walras.dev/sow``), as listed."""

    info: model.PodInfo
    sow: str  # mechanism key namespace/name
    index: int
    owner: str  # uid of its controller SoW
    finished_at: float | None = None  # latest container finishedAt, once terminated

    @property
    def job(self) -> str:
        return instance_id(self.sow, self.index)

    @property
    def live(self) -> bool:
        return not self.info.terminating and self.info.phase != crd.PHASE_FAILED


def _sow_pod(obj: Mapping[str, Any]) -> SowPod | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        index = int(labels.get(shell.LABEL_INSTANCE, ""))
    except ValueError:
        return None
    owner = next(
        (
            str(r.get("uid") or "")
            for r in meta.get("ownerReferences") or []
            if r.get("controller") and r.get("kind") == shell.KIND
        ),
        "",
    )
    sow = f"{meta.get('namespace') or ''}/{labels.get(shell.LABEL_SOW, '')}"
    ends = [
        model.parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in (obj.get("status") or {}).get("containerStatuses") or []
        if isinstance(c, Mapping)
    ]
    known = [e for e in ends if e is not None]
    return SowPod(model.parse_pod(obj), sow, index, owner, max(known) if known else None)


class SowRunner:
    """One operator process's SoW ledger and the writes that carry it out."""

    def __init__(
        self,
        api: kubeapi.Api,
        round_seconds: float,
        poke: Callable[[], None],
        config: SowConfig | None = None,
    ) -> None:
        self.api = api
        self.round_seconds = round_seconds
        self.poke = poke
        self.config = config or SowConfig.from_env()
        self.ledger: Ledger | None = None
        self.clock: shell.RoundClock | None = None
        self.rejected: dict[str, shell.SowError] = {}  # by SoW uid
        self._wake: asyncio.TimerHandle | None = None
        self._unavailable = ""
        self.seconds = 0.0  # duration of the last call, for the round log

    # ------------------------------------------------------------------ API

    async def _list(self, path: str, selector: str = "") -> list[dict[str, Any]] | None:
        """The objects under ``path``; None (said once) when they cannot be listed this round:
        the API server is unreachable, the CRD is not installed (404) or RBAC does not grant it
        (403). Not fatal either way: the next round tries again."""
        try:
            items = await asyncio.to_thread(
                kubeapi.list_objects,
                self.api.client,
                path,
                label_selector=selector,
                missing_ok=False,
            )
        except Exception as exc:
            self._say(f"cannot list {path}: {type(exc).__name__}: {exc}")
            return None
        self._unavailable = ""
        return items

    def _say(self, message: str) -> None:
        if message != self._unavailable:
            logger.warning("statements of work skipped this round: %s", message)
            self._unavailable = message

    async def _patch_status(self, obj: shell.SowObject, body: Mapping[str, Any]) -> None:
        result = await self.api.patch_status(shell.PLURAL, obj.name, body, namespace=obj.namespace)
        if not result.ok and result.outcome != kubeapi.Outcome.FENCED:
            logger.warning("status of SoW %s: %s", obj.key, result.message)

    # ------------------------------------------------------------------ the round

    async def round(
        self, snap: snapshot.Snapshot, now: float, *, refresh: bool = False
    ) -> snapshot.Snapshot:
        """Advance the mechanism and reserve its GPUs; the snapshot the policy plans on.

        Never raises: a failure is logged and the policy plans on ``snap`` as it was (the
        FungibleJobs are not held back by a SoW problem); the next round retries.
        """
        t0 = time.perf_counter()
        try:
            return await self._round(snap, now, refresh)
        except Exception:
            logger.exception("statements of work failed this round; retrying next round")
            self.ledger = None  # rebuilt from the statuses next round
            return snap
        finally:
            self.seconds = time.perf_counter() - t0

    async def _round(self, snap: snapshot.Snapshot, now: float, refresh: bool) -> snapshot.Snapshot:
        raw = await self._list(PATH)
        raw_pods = await self._list("/api/v1/pods", shell.LABEL_SOW) if raw is not None else None
        if raw is None or raw_pods is None:
            return snap
        objs = sorted(
            (shell.SowObject.of(o) for o in raw), key=lambda o: (o.created, o.namespace, o.name)
        )
        pods = [p for p in (_sow_pod(o) for o in raw_pods) if p is not None]
        uids = {o.key: o.uid for o in objs}
        # Only pods whose controller is the live SoW they name are ours (as for FungibleJobs).
        ours = [p for p in pods if p.owner and uids.get(p.sow) == p.owner]
        sow_keys = {p.info.key for p in ours}
        base = replace(
            snap, foreign_pods=tuple(p for p in snap.foreign_pods if p.key not in sow_keys)
        )
        view = snapshot.cluster_view(base)
        caps = {g: int(view.type_capacity[i]) for i, g in enumerate(view.gpu_types)}
        # A deleted SoW leaves the ledger as it would after a restart (its jobs, plans and
        # expected usage go; later ones keep theirs): rebuild from the remaining statuses.
        gone = self.ledger is not None and not set(self.ledger.sows) <= set(uids)
        if refresh or gone or self.ledger is None:
            if not caps and not any(o.birth is not None for o in objs):
                return snap  # no GPU type and nothing admitted yet: nothing to do
            self.ledger, clock, broken = shell.rebuild(self.config.params(), caps, objs)
            self.clock = clock or self.clock or shell.RoundClock(now, self.round_seconds)
            for key in broken:
                logger.warning("SoW %s: its status could not be read back; left out", key)
        assert self.ledger is not None and self.clock is not None  # set just above
        ledger = shell.with_capacities(self.ledger, caps)
        target = self.clock.round_at(now)
        newborn = [o for o in objs if self._newborn(o, ledger, view)]
        finished = self._finished(ledger, ours, now)
        known = set(self.rejected)
        adv = shell.advance(ledger, target, newborn, objs, finished)
        for key, problem in adv.rejected.items():
            obj = next(o for o in objs if o.key == key)
            self.rejected[obj.uid] = problem
        self.rejected = {u: p for u, p in self.rejected.items() if u in uids.values()}
        self.ledger = adv.ledger
        reserved = await self._gangs(objs, ours, base, view)
        await self._statuses(objs, target)
        await self._events(objs, adv, known, target)
        if any(j.phase.active for j in self.ledger.jobs) or newborn:
            # Wake-ups only while the mechanism has something to play: a cluster without SoWs
            # runs its rounds exactly as before.
            self._schedule(target, now)
        return replace(
            base, foreign_pods=tuple(sorted((*base.foreign_pods, *reserved), key=lambda p: p.key))
        )

    def _newborn(self, obj: shell.SowObject, ledger: Ledger, view: snapshot.ClusterView) -> bool:
        if obj.key in ledger.sows or obj.uid in self.rejected or obj.birth is not None:
            return False
        if obj.status.get("phase") == "Rejected":
            return False
        caps = dict(ledger.capacities)
        if any(caps.get(g) == 0 for g in self._demands(obj)):
            return False  # a type it asks for has no capacity now: born when it has some
        # The template is checked here, where the pools' resource names are known.
        try:
            for gpu_type, k in self._demands(obj).items():
                job = shell.gang_template(obj, 0, gpu_type)
                shell.gang_shape(job, k, _resource(view, gpu_type))
        except shell.SowError as exc:
            self.rejected[obj.uid] = exc
            return False
        return True

    @staticmethod
    def _demands(obj: shell.SowObject) -> dict[str, int]:
        k = int(obj.spec.get("concurrency") or 1)
        per_type = obj.spec.get("concurrencyPerType") or {}
        return {str(g): int(per_type.get(g, k)) for g in sorted(obj.spec.get("throughput") or {})}

    def _finished(self, ledger: Ledger, pods: list[SowPod], now: float) -> dict[str, int]:
        """Running instances whose current gang has only Succeeded pods, with the round the
        last one finished in (its containers' ``finishedAt``; ``now`` when not reported), so
        that a completion seen late (a restart, a slow round) is charged for the right rounds."""
        assert self.clock is not None
        by_job: dict[str, list[SowPod]] = {}
        for p in pods:
            if not p.info.terminating:
                by_job.setdefault(p.job, []).append(p)
        out: dict[str, int] = {}
        for j in ledger.jobs:
            gang = by_job.get(j.job, [])
            done = all(p.info.phase == crd.PHASE_SUCCEEDED for p in gang)
            if j.phase is Phase.RUNNING and j.start is not None and gang and done:
                when = max(p.finished_at if p.finished_at is not None else now for p in gang)
                out[j.job] = max(j.start, self.clock.round_at(min(when, now)))
        return out

    # ------------------------------------------------------------------ pods

    async def _gangs(
        self,
        objs: list[shell.SowObject],
        pods: list[SowPod],
        base: snapshot.Snapshot,
        view: snapshot.ClusterView,
    ) -> list[model.PodInfo]:
        """Delete what no longer runs, create starting gangs; the GPUs they hold."""
        assert self.ledger is not None
        by_key = {o.key: o for o in objs}
        running = {j.job: j for j in self.ledger.jobs if j.phase is Phase.RUNNING}
        deletes: list[SowPod] = []
        live: dict[str, list[SowPod]] = {}
        for p in pods:
            if p.info.terminating:
                continue
            if p.job not in running:
                deletes.append(p)  # evicted, cancelled, completed or unknown
            else:
                live.setdefault(p.job, []).append(p)
        # A gang with a failed member, or not whole, is removed and started again next round.
        shapes: dict[tuple[str, str], tuple[int, int]] = {}
        for j in running.values():
            obj = by_key.get(j.admission.instance.sow)
            if obj is None or j.gpu_type is None:
                continue
            k = j.concurrency_on(j.gpu_type)
            try:
                job = shell.gang_template(obj, j.admission.instance.index, j.gpu_type)
                shapes[(j.job, j.gpu_type)] = shell.gang_shape(job, k, _resource(view, j.gpu_type))
            except shell.SowError as exc:
                logger.warning("SoW instance %s cannot run: %s", j.job, exc)
        gangs = shell.running_gangs(self.ledger, shapes)
        for g in gangs:
            members = live.get(g.job, [])
            if members and (len(members) != g.pods or any(not p.live for p in members)):
                deletes.extend(members)
                live.pop(g.job)
        # Pods being deleted (evicted, completed) hold their GPUs until they are gone: the
        # policy sees them, and a gang placed on their node is created once they are gone.
        leaving = [p.info for p in pods if p.info.node and p.info.terminating]
        leaving += [p.info for p in deletes if p.info.node]
        reserved: list[model.PodInfo] = list(leaving)
        held: dict[str, int] = {}
        for g in gangs:
            for p in live.get(g.job, []):
                node = p.info.where
                held[node] = held.get(node, 0) + g.per_pod
                reserved.append(p.info)
        free = _free_gpus(view, held)
        used_now = _bound_gpus(base, view, leaving)
        creates: list[tuple[str, dict[str, Any]]] = []
        deferred = False
        for g in gangs:
            if g.job in live:
                continue
            obj = by_key[g.sow]
            job = shell.gang_template(obj, g.index, g.gpu_type)
            # Nodes of its type that the template's tolerations, nodeSelector and affinity allow
            # (kube-scheduler's static filters, as for FungibleJob pods).
            nodes_of_type = [
                n.name
                for i, n in enumerate(view.nodes)
                if view.gpu_types[view.node_type[i]] == g.gpu_type
                and filters.job_placement(job, n).ok
            ]
            chosen = shell.place(g, free, nodes_of_type)
            if chosen is None:
                logger.warning(
                    "SoW instance %s: no room for %d × %d GPUs", g.job, g.pods, g.per_pod
                )
                continue
            resource = _resource(view, g.gpu_type)
            fits = all(
                used_now.get(n, 0) + chosen.count(n) * g.per_pod <= _node_gpus(view, n)
                for n in set(chosen)
            )
            for replica, node in enumerate(chosen):
                name = realise.pod_name(obj.instance_name(g.index), g.start, replica)
                requests = job.pod_requests(resource)
                reserved.append(shell.reserved_pod(obj.namespace, name, node, requests))
                if fits:
                    creates.append(
                        (obj.namespace, _manifest(obj, job, g, replica, node, name, resource))
                    )
            if fits:
                for n in chosen:
                    used_now[n] = used_now.get(n, 0) + g.per_pod
            else:
                deferred = True
        if deferred:
            # Its nodes free up as the pods there are deleted: look again shortly.
            asyncio.get_running_loop().call_later(RETRY_S, self.poke)
        if deletes:
            await kubeapi.gather_limited(
                self.api.delete_pod(p.info.namespace, p.info.name, uid=p.info.uid) for p in deletes
            )
        if creates:
            results = await kubeapi.gather_limited(
                self.api.create_pod(ns, manifest) for ns, manifest in creates
            )
            for (_, manifest), r in zip(creates, results, strict=True):
                if not r.ok and r.outcome != kubeapi.Outcome.EXISTS:
                    logger.warning("SoW pod %s: %s", manifest["metadata"]["name"], r.message)
        return reserved

    # ------------------------------------------------------------------ status

    async def _statuses(self, objs: list[shell.SowObject], target: int) -> None:
        assert self.ledger is not None and self.clock is not None
        stamp = model.format_time(self.clock.start_of(target))
        writes = []
        for obj in objs:
            problem = self.rejected.get(obj.uid)
            if problem is not None:
                body: dict[str, Any] | None = shell.rejected_status(obj, problem)
            else:
                body = shell.status_of(obj, self.ledger, self.clock, round_no=target)
            if body is None:
                continue
            keys = _delta(body, obj.status)
            # An SoW with active instances records every round it sees: a restarted operator
            # ends that round with the completions it observes (walras.core.sow_shell.rebuild).
            if body.get("phase") != "Admitted":
                keys.discard("round")
            if not keys:
                continue
            old = {str(c.get("type")): c for c in obj.status.get("conditions") or []}
            for c in body["conditions"]:
                prev = old.get(c["type"])
                same = prev is not None and prev.get("status") == c["status"]
                c["lastTransitionTime"] = (
                    str(prev.get("lastTransitionTime")) if same and prev else stamp
                )
            # A merge patch of the keys that changed: the posted admissions are written once.
            writes.append(self._patch_status(obj, {k: body[k] for k in sorted(keys)}))
        if writes:
            await kubeapi.gather_limited(writes)

    async def _events(
        self, objs: list[shell.SowObject], adv: shell.Advance, known: set[str], target: int
    ) -> None:
        """One Event per birth, rejection, eviction or cancellation, and completion (each
        happens once: a restarted operator replays none of them)."""
        assert self.ledger is not None
        by_key = {o.key: o for o in objs}
        posts: list[tuple[shell.SowObject, str, str, str]] = []
        for key in adv.admitted:
            posts.append((by_key[key], "Normal", "Born", f"born in round {target}; plan posted"))
        for obj in objs:
            problem = self.rejected.get(obj.uid)
            if problem is not None and obj.uid not in known:
                posts.append((obj, "Warning", "InvalidSpec", f"{problem.field}: {problem.message}"))
        for job_id in [*adv.evicted, *adv.unprofitable, *adv.completed]:
            j = self.ledger.job(job_id)
            owner = by_key.get(j.admission.instance.sow)
            if owner is None:
                continue
            i = j.admission.instance.index
            if j.unprofitable:
                text = (
                    f"instance {i} cancelled in round {j.finish}: completing at "
                    f"{(j.finish or 0) + 1} or later cannot pay its posted price under its "
                    "value function; charged 0"
                )
                posts.append((owner, "Warning", "Unprofitable", text))
            elif j.phase is Phase.COMPLETED:
                text = f"instance {i} completed in round {j.finish}; charged {j.charge:.4g}"
                posts.append((owner, "Normal", "Completed", text))
            else:
                verb = "evicted" if j.phase is Phase.EVICTED else "cancelled"
                text = (
                    f"instance {i} {verb} in round {j.finish} (LIFO: committed load over capacity)"
                )
                posts.append((owner, "Warning", verb.capitalize(), text))
        for obj, _etype, reason, message in posts:
            logger.info("SoW %s: %s: %s", obj.key, reason, message)
        if posts and self.clock is not None:
            stamp = model.format_time(self.clock.start_of(target))
            await kubeapi.gather_limited(self._event(o, t, r, m, stamp) for o, t, r, m in posts)

    async def _event(
        self, obj: shell.SowObject, etype: str, reason: str, message: str, now: str
    ) -> None:
        await self.api.post_event(
            obj,
            kind=shell.KIND,
            uid=obj.uid,
            event_type=etype,
            reason=reason,
            message=message,
            now=now,
        )

    def _schedule(self, target: int, now: float) -> None:
        """Wake the round loop at the next mechanism round's start."""
        assert self.clock is not None
        loop = asyncio.get_running_loop()
        if self._wake is not None:
            self._wake.cancel()
        delay = max(0.0, self.clock.start_of(target + 1) - now) + 0.05
        self._wake = loop.call_later(delay, self.poke)


def _bare(x: Any) -> Any:
    """JSON data without nulls (the API server drops a null of a field that is not nullable,
    e.g. an instance's unset start) and without conditions' transition times."""
    if isinstance(x, Mapping):
        return {k: _bare(v) for k, v in x.items() if v is not None and k != "lastTransitionTime"}
    if isinstance(x, list | tuple):
        return [_bare(v) for v in x]
    return x


def _delta(body: Mapping[str, Any], old: Mapping[str, Any]) -> set[str]:
    """Top-level status keys whose value differs (after :func:`_bare`) from the stored one."""
    plain = _bare(json.loads(json.dumps(body)))
    return {k for k in plain if plain[k] != _bare(old.get(k))}


def _same(body: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Equal apart from conditions' transition times, the round counter and nulls."""
    return not _delta(body, old) - {"round"}


def _resource(view: snapshot.ClusterView, gpu_type: str) -> str:
    for pool in view.node_pool:
        if pool.gpu_type == gpu_type:
            return pool.resource_name
    return crd.DEFAULT_RESOURCE_NAME


def _node_gpus(view: snapshot.ClusterView, node: str) -> int:
    i = view.node_index.get(node)
    return 0 if i is None else int(view.node_gpus[i] - view.node_foreign[i])


def _free_gpus(view: snapshot.ClusterView, held: Mapping[str, int]) -> dict[str, int]:
    """GPUs of each usable node not used by foreign pods nor held by SoW gangs (FungibleJob
    pods do not count: the SoW reservation comes first and the policy moves them)."""
    return {
        n.name: int(view.node_gpus[i] - view.node_foreign[i]) - held.get(n.name, 0)
        for i, n in enumerate(view.nodes)
    }


def _bound_gpus(
    snap: snapshot.Snapshot, view: snapshot.ClusterView, leaving: Sequence[model.PodInfo]
) -> dict[str, int]:
    """GPUs used on each node right now by Walras's FungibleJob pods (bound or planned, being
    deleted included) and by SoW pods being deleted."""
    out: dict[str, int] = {}
    for pod in (*snap.pods, *leaving):
        if pod.finished or not pod.where:
            continue
        i = view.node_index.get(pod.where)
        if i is None:
            continue
        resource = view.node_pool[i].resource_name
        out[pod.where] = out.get(pod.where, 0) + int(pod.requests.get(resource, 0))
    return out


def _manifest(
    obj: shell.SowObject,
    job: model.JobSpec,
    gang: shell.Gang,
    replica: int,
    node: str,
    name: str,
    resource: str,
) -> dict[str, Any]:
    """A FungibleJob pod manifest, owned by the SoW and placed on ``node`` directly."""
    manifest = realise.pod_manifest(
        job,
        name=name,
        replica=replica,
        node=node,
        group=gang.gpu_type,
        gpu_type=gang.gpu_type,
        resource_name=resource,
        gpus=gang.per_pod,
        round_no=gang.start,
        fraction=1.0,
        price=0.0,
    )
    meta = manifest["metadata"]
    meta["labels"].update({shell.LABEL_SOW: obj.name, shell.LABEL_INSTANCE: str(gang.index)})
    meta["ownerReferences"] = [
        {
            "apiVersion": crd.API_VERSION,
            "kind": shell.KIND,
            "name": obj.name,
            "uid": obj.uid,
            "controller": True,
        }
    ]
    manifest["spec"]["nodeName"] = node
    return manifest

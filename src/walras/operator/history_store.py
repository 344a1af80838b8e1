"""Schedule histories persisted many jobs per write: compressed ConfigMaps, a few per namespace.

The realiser needs every job's history (``walras.core.history``: time received per group, time
eligible, work done) to survive an operator restart. Writing it into each FungibleJob's status
would cost one request per job per round; here one request holds thousands of jobs.

**Layout.** In every namespace with FungibleJobs, ConfigMaps ``walras-history-<k>`` for
``k = 0 .. S-1`` with ``S = ceil(jobs / SHARD_JOBS)``, labelled ``walras.dev/history: "v1"``. Each
has one key, ``history.json.zz``: zlib-compressed JSON ``{"round": R, "jobs": {uid: record}}``
(``history.record``). A job lives in shard ``crc32(uid) mod S``. A record is about 120 bytes of
JSON and compresses about 4x, so ``SHARD_JOBS = 4000`` keeps a shard near 0.5 MB raw, 0.15 MB
stored: well under the API server's 1 MiB limit per object.

**Writes proportional to change.** After every round :meth:`HistoryStore.update` compares each
job's ``history.anchor`` (running group, its start, productive start, rate) with the one last
persisted; only shards holding a changed anchor, a new job or a job that went away are written
(:meth:`HistoryStore.flush`). Between anchor changes the persisted record extrapolates exactly
(``walras.core.history``), so a steady round writes nothing. Example: 1,000 jobs in one namespace,
50 of them switch GPU type in a round: one write (shard 0), instead of 1,000 status patches.

**One namespace instead.** With ``LoopConfig.history_namespace`` set (for example the
operator's own namespace), every job's record goes into the shards of that one namespace, so a
namespaced Role suffices; shards then hold jobs of all namespaces (uids are cluster-unique).

**Permissions.** The store needs ``configmaps`` list/create/patch in the jobs' namespaces. At
start-up a SelfSubjectAccessReview per verb asks whether RBAC grants them; when it does not, the
store stays off (one log line) and the history persists only in job statuses, as before it
existed (written along with the status patches a visible change causes).

**Reading.** One LIST of the labelled ConfigMaps across namespaces when the operator starts or
wins the Lease (:func:`load`); ``round`` is the highest round a writer used, so a new leader never
reuses a pod name. A shard that does not decode is skipped (its jobs continue from their statuses,
the pre-ConfigMap format).
"""

from __future__ import annotations

import base64
import json
import logging
import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from walras.core import history
from walras.kube import writes as kubeapi

logger = logging.getLogger(__name__)

LABEL = "walras.dev/history"
LABEL_VALUE = "v1"
KEY = "history.json.zz"
PREFIX = "walras-history-"
SHARD_JOBS = 4000

Anchor = tuple[str, float | None, float | None, float]


def shard_count(jobs: int) -> int:
    return max(1, math.ceil(jobs / SHARD_JOBS))


def shard_of(uid: str, shards: int) -> int:
    """Stable across processes (Python's ``hash`` of a str is salted per process)."""
    return zlib.crc32(uid.encode()) % shards


def encode(round_no: int, records: Mapping[str, Mapping[str, Any]]) -> str:
    """``binaryData`` value of one shard (base64 of zlib of compact JSON, keys sorted)."""
    raw = json.dumps(
        {"round": round_no, "jobs": {u: records[u] for u in sorted(records)}},
        separators=(",", ":"),
    ).encode()
    return base64.b64encode(zlib.compress(raw, 6)).decode()


def decode(value: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """Inverse of :func:`encode`; raises ``ValueError`` on anything else."""
    try:
        doc = json.loads(zlib.decompress(base64.b64decode(value, validate=True)))
    except (zlib.error, json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
        raise ValueError(f"undecodable history shard: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), dict):
        raise ValueError("history shard without a 'jobs' map")
    jobs = {str(u): r for u, r in doc["jobs"].items() if isinstance(r, dict)}
    return int(doc.get("round") or 0), jobs


@dataclass(slots=True)
class Loaded:
    """What :func:`load` found: records by job uid, shards per namespace, the highest round."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    shards: dict[str, int] = field(default_factory=dict)
    round_no: int = 0


VERBS = ("list", "create", "patch")


def permitted(api_client: Any, namespace: str = "") -> bool:
    """Whether RBAC lets the operator keep its history in ConfigMaps of ``namespace`` (empty:
    of every namespace); blocking, at start-up."""
    return all(kubeapi.can_i(api_client, verb, "configmaps", namespace=namespace) for verb in VERBS)


def load(api_client: Any, namespace: str = "") -> Loaded:
    """Every persisted shard in ``namespace`` (empty: the cluster); one LIST, blocking."""
    scope = f"namespaces/{namespace}/" if namespace else ""
    path = f"/api/v1/{scope}configmaps"
    return parse(kubeapi.list_objects(api_client, path, label_selector=LABEL))


def parse(items: Iterable[Mapping[str, Any]]) -> Loaded:
    """The shards among ConfigMap objects (``metadata``, ``binaryData``), merged."""
    out = Loaded()
    for item in sorted(items, key=lambda i: str((i.get("metadata") or {}).get("name"))):
        meta = item.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        value = (item.get("binaryData") or {}).get(KEY)
        if not name.startswith(PREFIX) or not isinstance(value, str):
            continue
        try:
            round_no, records = decode(value)
            index = int(name[len(PREFIX) :])
        except ValueError as exc:
            logger.warning("history %s/%s skipped: %s", namespace, name, exc)
            continue
        out.round_no = max(out.round_no, round_no)
        out.shards[namespace] = max(out.shards.get(namespace, 0), index + 1)
        out.namespaces.setdefault(namespace, {}).update(records)
        out.records.update(records)
    return out


class HistoryStore:
    """The persisted copy of every job's history, and which shards are out of date."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, dict[str, Any]]] = {}  # namespace -> uid -> record
        self.anchors: dict[str, Anchor] = {}
        self.shards: dict[str, int] = {}  # namespace -> shard count as persisted
        self.dirty: set[tuple[str, int]] = set()
        self.round_no = 0
        # Set when the API server forbids ConfigMap writes (RBAC without them): histories then
        # persist only in the job statuses, as before this store existed; warned once.
        self.forbidden = False

    def adopt(self, loaded: Loaded) -> None:
        """Start from what is persisted (after :func:`load`): nothing is dirty yet."""
        self.records = {ns: dict(recs) for ns, recs in loaded.namespaces.items()}
        self.shards = dict(loaded.shards)
        self.round_no = max(self.round_no, loaded.round_no)
        self.dirty = set()
        self.anchors = {}
        for recs in self.records.values():
            for uid, raw in recs.items():
                try:
                    rate = float(raw.get("q") or 0.0)
                    self.anchors[uid] = history.anchor(history.from_record(raw, rate))
                except (TypeError, ValueError):
                    continue  # rewritten at its next update

    def update(
        self,
        jobs: Iterable[tuple[str, str, history.History]],
        live: Mapping[str, set[str]],
    ) -> int:
        """Record this round's histories ``(namespace, uid, history)``; ``live``: per namespace,
        the uids of every job that still exists (records of the others are dropped). Returns the
        number of records that changed."""
        changed = 0
        touched: dict[str, set[str]] = {}
        for namespace, uid, hist in jobs:
            mark = history.anchor(hist)
            recs = self.records.setdefault(namespace, {})
            if uid in recs and self.anchors.get(uid) == mark:
                continue
            raw = history.record(hist)
            if hist.running_group:
                raw["q"] = mark[3]
            recs[uid] = raw
            self.anchors[uid] = mark
            touched.setdefault(namespace, set()).add(uid)
            changed += 1
        for namespace in sorted(self.records):
            keep = live.get(namespace, set())
            gone = [u for u in self.records[namespace] if u not in keep]
            for uid in gone:
                del self.records[namespace][uid]
                self.anchors.pop(uid, None)
            touched.setdefault(namespace, set()).update(gone)
            changed += len(gone)
        for namespace, uids in touched.items():
            if not uids:
                continue
            want = shard_count(len(self.records[namespace]))
            had = self.shards.get(namespace, 0)
            if want != had:
                # Re-sharded (or new): every shard of the namespace is rewritten, and those
                # past the new count are emptied.
                self.dirty.update((namespace, k) for k in range(max(want, had)))
            else:
                self.dirty.update((namespace, shard_of(u, want)) for u in uids)
            self.shards[namespace] = want
        return changed

    async def flush(self, api: kubeapi.Api, round_no: int) -> tuple[int, int]:
        """Write the dirty shards; ``(written, errors)``. A shard not written stays dirty;
        ``errors`` leaves out those the Lease fence stopped (not an error of the round)."""
        self.round_no = max(self.round_no, round_no)
        todo = sorted(self.dirty)
        if not todo:
            return 0, 0
        bodies = []
        for namespace, index in todo:
            shards = self.shards.get(namespace, 1)
            recs = self.records.get(namespace, {})
            part = (
                {u: r for u, r in recs.items() if shard_of(u, shards) == index}
                if index < shards
                else {}
            )
            bodies.append(encode(self.round_no, part))
        results = await kubeapi.gather_limited(
            api.put_configmap(
                namespace,
                f"{PREFIX}{index}",
                labels={LABEL: LABEL_VALUE},
                binary_data={KEY: body},
            )
            for (namespace, index), body in zip(todo, bodies, strict=True)
        )
        written = errors = 0
        for shard, result in zip(todo, results, strict=True):
            if result.ok:
                self.dirty.discard(shard)
                written += 1
            elif result.status == 403:
                if not self.forbidden:
                    logger.warning(
                        "writing ConfigMap %s/%s%d is forbidden (%s): the schedule history "
                        "persists only in job statuses; grant the operator configmaps "
                        "get/list/create/patch to keep it across restarts exactly",
                        shard[0],
                        PREFIX,
                        shard[1],
                        result.message,
                    )
                self.forbidden = True
                self.dirty.clear()
                break
            elif result.outcome != kubeapi.Outcome.FENCED:
                errors += 1
                logger.warning(
                    "history %s/%s%d not written: %s",
                    shard[0],
                    PREFIX,
                    shard[1],
                    result.message or result.status,
                )
        return written, errors

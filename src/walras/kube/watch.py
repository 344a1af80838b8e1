"""One collection kept current by LIST then WATCH, its events handed over in batches.

The protocol is client-go's reflector's: LIST gives every object and a resourceVersion; a WATCH
from that version streams ``ADDED``/``MODIFIED``/``DELETED`` events in order (``BOOKMARK`` only
advances the version); a WATCH ends after ``WATCH_SECONDS`` and the next resumes from the last
version seen; ``410 Gone`` (the version was compacted away) starts over with a LIST, any other
failure resumes from the last version after a pause (events already handed over stay valid).

The pause doubles with each failure in a row, ``retry_seconds · 2^min(n, 5)`` after the n-th, and
the count goes back to zero as soon as the API server answers again: a LIST that succeeds or a
WATCH that is accepted (2xx). Otherwise one outage would leave every later drop waiting the full
32×, with the rounds running on a stale cache meanwhile.

A kind that may be absent (``optional=True``: a CRD not installed, or RBAC that does not grant
the LIST) answers its LIST with 403 or 404: that is an empty collection, delivered as an empty
listing, listed again after ``refused_retry`` seconds (``refused`` holds the status meanwhile).
A required kind's refusal is a failure like any other.

Events go to ``deliver(events, listing)`` in the order the API server sent them, one call per
chunk the server flushed (a busy chunk holds hundreds): raw dicts, never model classes.
``listing=True`` marks a LIST's result, as ``ADDED`` events: every object that exists; one
missing from it is gone (the caller drops it: a DELETED event may have been lost in the gap).

It is the one watch mechanism of Walras: the operator follows every kind through it
(``walras.operator.handlers.watch_all``) and so do the agents (``walras.kube.agents.Informer``, a
name-keyed cache over it). Why this and not kopf: the operator's store needs only the latest
object, but kopf runs each event through a queue and a worker task per object, cause detection and
handler keyword arguments. Pods are most of the events (a cold round of 5,000 jobs: about 7,500
pods, each created, bound and started), and kopf's per-event machinery took a large part of the
operator's main thread in that round's profile (docs/evaluation.md#watching-pods).
``kubernetes.watch.Watch`` would parse into model classes (slower still) and gives one event per
call. Runs in a thread of its own: the JSON parsing happens off the event loop's stack, and a batch
reaches it as one callback.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

from walras.kube import writes

logger = logging.getLogger("walras.kube.watch")

WATCH_SECONDS = 300  # server side; the client waits a little longer before giving up
Deliver = Callable[[list[Mapping[str, Any]], bool], None]
#: A LIST answered with one of these, for an ``optional`` kind, is an empty collection.
ABSENT = (403, 404)


class GoneError(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


class RefusedError(Exception):
    """An ``optional`` kind's LIST was refused (403) or the kind does not exist (404)."""

    def __init__(self, path: str, status: int) -> None:
        super().__init__(f"LIST {path}: HTTP {status}")
        self.status = status


def lines(chunks: Iterator[bytes]) -> Iterator[list[bytes]]:
    """The complete newline-delimited lines of each chunk, a list per chunk (a line split over
    two chunks comes with the second); the unterminated tail at the end, alone."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        found = [line for line in complete if line.strip()]
        if found:
            yield found
    if pending.strip():
        yield [pending]


class CollectionWatch:
    """LIST then WATCH ``path`` (e.g. ``/api/v1/pods``) on ``api_client``'s connection pool.

    Give it a client of its own: a WATCH holds a connection for minutes, which a pool sized for
    concurrent writes should not lose. ``query``: extra parameters of both requests (e.g.
    ``{"fieldSelector": "metadata.name=n1"}``); ``on_request`` runs before each request (the
    agents count their API reads with it).
    """

    def __init__(
        self,
        api_client: Any,
        path: str,
        deliver: Deliver,
        *,
        retry_seconds: float = 1.0,
        query: Mapping[str, str] | None = None,
        optional: bool = False,
        refused_retry: float = 30.0,
        on_request: Callable[[], None] | None = None,
    ) -> None:
        self.client = api_client
        self.path = path
        self.deliver = deliver
        self.retry_seconds = retry_seconds
        self.query = dict(query or {})
        self.optional = optional
        self.refused_retry = refused_retry
        self.on_request = on_request
        self.refused: int | None = None  # HTTP status of an optional kind's refused LIST
        self.version: str | None = None
        self.lists = 0  # LISTs done (1 + relists)
        self.watches = 0  # WATCH requests sent
        self.failures = 0  # failures since the API server last answered: sets the next pause

    def _get(self, query: Mapping[str, str], *, stream: bool, read_timeout: float) -> Any:
        import urllib3

        if self.on_request is not None:
            self.on_request()
        query = {**self.query, **query}
        config = self.client.configuration
        headers = writes.auth_headers(self.client)
        headers["Accept"] = "application/json"
        url = f"{config.host}{self.path}?{urlencode(dict(query))}"
        return self.client.rest_client.pool_manager.request(
            "GET",
            url,
            headers=headers,
            preload_content=not stream,
            timeout=urllib3.Timeout(connect=10.0, read=read_timeout),
            retries=False,
        )

    def _list(self) -> None:
        resp = self._get({}, stream=False, read_timeout=120.0)
        status = int(resp.status)
        if self.optional and status in ABSENT:
            raise RefusedError(self.path, status)
        if not 200 <= status < 300:
            raise RuntimeError(f"LIST {self.path}: HTTP {status}: {resp.data[:300]!r}")
        data = json.loads(resp.data)
        self.lists += 1
        self.failures = 0
        self.refused = None
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        self.version = str((data.get("metadata") or {}).get("resourceVersion") or "") or None
        self.deliver([{"type": "ADDED", "object": item} for item in items], True)

    def _watch(self, stop: threading.Event) -> None:
        query = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        if self.version:
            query["resourceVersion"] = self.version
        resp = self._get(query, stream=True, read_timeout=WATCH_SECONDS + 30.0)
        self.watches += 1
        try:
            status = int(resp.status)
            if status == 410:
                raise GoneError(self.path)
            if not 200 <= status < 300:
                raise RuntimeError(f"WATCH {self.path}: HTTP {status}: {resp.read()[:300]!r}")
            self.failures = 0  # the server is back: the next drop pauses the least again
            for found in lines(resp.stream(amt=None, decode_content=True)):
                batch: list[Mapping[str, Any]] = []
                for line in found:
                    event = json.loads(line)
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise GoneError(str(obj.get("message") or self.path))
                        raise RuntimeError(f"WATCH {self.path}: {obj.get('message') or obj}")
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if version:
                        self.version = str(version)
                    if kind != "BOOKMARK":
                        batch.append(event)
                if batch:
                    self.deliver(batch, False)
                if stop.is_set():
                    return
        finally:
            resp.release_conn()

    def run(self, stop: threading.Event) -> None:
        """LIST, then WATCH until ``stop`` is set (checked between chunks and watches)."""
        while not stop.is_set():
            try:
                if self.version is None:
                    self._list()
                self._watch(stop)
            except GoneError:
                logger.info(
                    "watch of %s: version %s expired; listing again", self.path, self.version
                )
                self.version = None
            except RefusedError as exc:
                # Not an outage: the server answered. An empty collection until it is granted.
                if self.refused is None:
                    logger.warning(
                        "cannot list %s (HTTP %s): treated as empty", self.path, exc.status
                    )
                self.refused = exc.status
                self.failures = 0
                self.deliver([], True)
                stop.wait(self.refused_retry)
            except Exception as exc:  # connection reset, timeout, 5xx: resume after a pause
                # Doubling up to 32x: an API server that is down (or a CRD not installed yet)
                # is asked again within half a minute, not hammered every second.
                pause = self.retry_seconds * 2 ** min(self.failures, 5)
                self.failures += 1
                logger.warning(
                    "watch of %s failed (%s: %s); resuming in %.0f s",
                    self.path,
                    type(exc).__name__,
                    " ".join(str(exc).split())[:300],
                    pause,
                )
                stop.wait(pause)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop,), name=f"watch{self.path}", daemon=True
        )
        thread.start()
        return thread

"""The start-up guard of the round loop (walras.operator.handlers.Readiness), no cluster needed."""

from __future__ import annotations

import asyncio
import time

from walras.operator.handlers import Readiness


def test_ready_only_when_every_listed_object_was_seen() -> None:
    async def scenario() -> list[bool]:
        r = Readiness({"job": [("ns", "a"), ("ns", "b")], "node": [("", "n1")]}, stall=60)
        states = [r.ready()]
        r.seen("job", ("ns", "a"))
        r.seen("node", ("", "n1"))
        r.seen("job", ("ns", "zzz"))  # an object created after the LIST changes nothing
        states.append(r.ready())
        r.seen("job", ("ns", "b"))
        states.append(r.ready())
        await asyncio.wait_for(r.wait(), timeout=1)
        return states

    assert asyncio.run(scenario()) == [False, False, True]


def test_nothing_listed_is_ready_at_once() -> None:
    async def scenario() -> bool:
        return Readiness({"job": [], "pod": []}).ready()

    assert asyncio.run(scenario())


def test_a_stall_ends_the_wait_but_progress_extends_it() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        r = Readiness({"job": [("ns", "a"), ("ns", "b"), ("ns", "deleted")]}, stall=0.3)
        await asyncio.sleep(0.2)
        r.seen("job", ("ns", "a"))  # progress: the stall clock restarts
        await asyncio.sleep(0.2)
        early = r.ready()
        r.seen("job", ("ns", "b"))
        start = time.monotonic()
        await asyncio.wait_for(r.wait(), timeout=5)
        return early, r.ready(), time.monotonic() - start >= 0.25

    assert asyncio.run(scenario()) == (False, True, True)

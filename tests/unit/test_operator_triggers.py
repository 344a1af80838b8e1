"""When the round loop runs which round (walras.operator.triggers), on the event loop's clock.

Oracle: the module's rules. With a round of an hour nothing falls due by itself during the test,
so every outcome below follows from the pokes alone: the first round is full; after it, nothing
is due until a poke, which makes the next round incremental; a follower forgets its pokes.
"""

from __future__ import annotations

import asyncio

from walras.operator import triggers

HOUR = 3600.0


def test_first_full_then_incremental_on_a_poke() -> None:
    async def scenario() -> list[triggers.Round | None]:
        t = triggers.Triggers(HOUR, debounce=0.0)
        t.start()
        seen = [await t.due()]
        t.ran(triggers.Round.FULL)
        seen.append(await t.due())
        t.poke()
        seen.append(await t.due())
        seen.append(await t.due())  # the poke was consumed
        return seen

    assert asyncio.run(scenario()) == [
        triggers.Round.FULL,
        None,
        triggers.Round.INCREMENTAL,
        None,
    ]


def test_a_follower_forgets_its_pokes() -> None:
    async def scenario() -> triggers.Round | None:
        t = triggers.Triggers(HOUR, debounce=0.0)
        t.start()
        t.ran(triggers.Round.FULL)
        t.poke()
        t.stand_by()
        return await t.due()

    # stand_by also sets the next full round a second away: not yet due.
    assert asyncio.run(scenario()) is None


def test_wait_returns_at_once_on_a_poke_and_false_on_stop() -> None:
    async def scenario() -> tuple[bool, bool]:
        t = triggers.Triggers(HOUR, debounce=0.0)
        t.start()
        t.ran(triggers.Round.FULL)
        stop = asyncio.Event()
        t.poke_binds()
        woke = await t.wait(stop, binds_queued=False)
        stop.set()
        return woke, await t.wait(stop, binds_queued=False)

    assert asyncio.run(scenario()) == (True, False)

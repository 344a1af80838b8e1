"""When the operator runs a round, and which kind.

- A **full** round every ``round_seconds``: slices end, gangs rotate.
- An **incremental** round soon after a poke (a job arrived, changed or finished; a pool, node or
  Tenant changed): it fills free GPUs without cutting running slices short. A burst of pokes is
  let settle for ``debounce`` seconds first, and becomes a full round if one falls due meanwhile.
- **Binds only** between rounds: queued gangs retry every 0.25 s, and at once when a pod goes
  away (``poke_binds``), since its GPUs may be what they wait for.
- While not leading, nothing runs; leadership is checked again within a second.
"""

from __future__ import annotations

import asyncio
import enum

# How often queued binds are retried while gangs wait for room.
BIND_RETRY_S = 0.25
# How soon a follower checks again whether it leads.
FOLLOWER_RECHECK_S = 1.0


class Round(enum.Enum):
    FULL = "full"
    INCREMENTAL = "incremental"


class Triggers:
    """Pokes from the watch handlers and the full-round timer (module docstring)."""

    def __init__(self, round_seconds: float, debounce: float) -> None:
        self.round_seconds = round_seconds
        self.debounce = debounce
        self._wake = asyncio.Event()
        self._poked = False
        self._bind_poked = False
        self._next_full = 0.0

    def poke(self) -> None:
        """A job arrived or finished: run an incremental round soon."""
        self._poked = True
        self._wake.set()

    def poke_binds(self) -> None:
        """A pod went away: queued binds may fit now."""
        self._bind_poked = True
        self._wake.set()

    def start(self) -> None:
        """The first full round is due at once."""
        self._next_full = asyncio.get_running_loop().time()

    async def wait(self, stop: asyncio.Event, binds_queued: bool) -> bool:
        """Sleep until a poke, the next full round, or (with binds queued) the next bind retry;
        False once ``stop`` is set."""
        clock = asyncio.get_running_loop()
        timeout = max(0.0, self._next_full - clock.time())
        if binds_queued:
            timeout = min(timeout, BIND_RETRY_S)
        if not (self._poked or self._bind_poked):
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait(
                {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            stopper.cancel()
        self._wake.clear()
        return not stop.is_set()

    def stand_by(self) -> None:
        """Not leading: forget the pokes, look again shortly."""
        self._poked = self._bind_poked = False
        clock = asyncio.get_running_loop()
        self._next_full = clock.time() + min(self.round_seconds, FOLLOWER_RECHECK_S)

    async def due(self) -> Round | None:
        """The round to run now, if any (after the debounce of a poke)."""
        clock = asyncio.get_running_loop()
        full = clock.time() >= self._next_full
        if self._poked and not full:
            await asyncio.sleep(self.debounce)  # let a burst of arrivals settle
            full = clock.time() >= self._next_full
        if not (full or self._poked):
            return None
        self._poked = False
        return Round.FULL if full else Round.INCREMENTAL

    def seconds_to_full(self) -> float | None:
        """Seconds until the next full round is due (None before :meth:`start`)."""
        if not self._next_full:
            return None
        return self._next_full - asyncio.get_running_loop().time()

    def ran(self, kind: Round) -> None:
        """A round of ``kind`` finished: a full one schedules the next."""
        if kind is Round.FULL:
            self._next_full = asyncio.get_running_loop().time() + self.round_seconds

    def binds_tried(self) -> None:
        self._bind_poked = False

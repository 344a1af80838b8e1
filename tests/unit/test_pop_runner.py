"""``pop.shards.Runner``, automatic mode: probe, in-process fallback, work taken back from a pool.

Oracle: ``[fn(shared, p) for p in payloads]`` computed directly. Whatever the mode decides
(in-process after the probe, or a pool with the caller solving the payloads no worker started),
the answers come back in payload order and equal the direct ones.
"""

from __future__ import annotations

import math

import pytest

from walras.allocator.pop import shards


def square_plus(shared: int, p: int) -> int:
    return p * p + shared


PAYLOADS = list(range(9))
DIRECT = [square_plus(5, p) for p in PAYLOADS]


def test_small_work_stays_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "free_cores", lambda: 2)
    monkeypatch.setattr(shards, "POOL_MIN_S", math.inf)  # any work counts as small
    with shards.Runner(5, len(PAYLOADS)) as runner:
        assert runner.workers == 2
        got = runner.map(square_plus, PAYLOADS)
        assert runner.workers == 1  # the probe decided against a pool
        assert runner._pool is None
        # Later maps (the repair's re-solves) stay in-process too.
        assert [t.value for t in runner.map(square_plus, PAYLOADS[:3])] == DIRECT[:3]
    assert [t.value for t in got] == DIRECT


def test_large_work_uses_the_pool_and_keeps_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "free_cores", lambda: 2)
    monkeypatch.setattr(shards, "POOL_MIN_S", 0.0)  # any work counts as large
    with shards.Runner(5, len(PAYLOADS)) as runner:
        got = runner.map(square_plus, PAYLOADS)
        assert runner.workers == 2 and runner._pool is not None
        again = runner.map(square_plus, PAYLOADS)  # the started pool is reused
    assert [t.value for t in got] == DIRECT
    assert [t.value for t in again] == DIRECT


def test_explicit_workers_skip_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shards, "POOL_MIN_S", math.inf)
    with shards.Runner(5, len(PAYLOADS), workers=2) as runner:
        got = runner.map(square_plus, PAYLOADS)
        assert runner.workers == 2 and runner._pool is not None
    assert [t.value for t in got] == DIRECT

"""The schedule history persisted many jobs per write (walras.operator.history_store).

Oracles: a history that never stopped (the persisted record, rebuilt later, must equal it), the
JSON that went in (a shard decodes to exactly the records written), and counting (a round where
no job's running state changed writes nothing; one changed job dirties exactly its own shard).
"""

from __future__ import annotations

import asyncio
import base64
import zlib
from collections.abc import Mapping

import pytest

from walras.core import history
from walras.kube import writes
from walras.operator import history_store as hs


class FakeApi:
    """Keeps the ConfigMaps it is given; ``fail`` names shards whose write fails."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.maps: dict[tuple[str, str], dict[str, str]] = {}
        self.fail = fail or set()
        self.calls = 0

    async def put_configmap(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str],
        binary_data: Mapping[str, str],
    ) -> writes.Result:
        self.calls += 1
        assert labels == {hs.LABEL: hs.LABEL_VALUE}
        if name in self.fail:
            return writes.Result(writes.Outcome.ERROR, 500, "boom")
        self.maps[(namespace, name)] = dict(binary_data)
        return writes.Result(writes.Outcome.OK, 200)

    def loaded(self) -> hs.Loaded:
        """What ``history_store.load`` reads back from these ConfigMaps."""
        return hs.parse(
            {"metadata": {"namespace": ns, "name": name}, "binaryData": data}
            for (ns, name), data in self.maps.items()
        )


def flush(store: hs.HistoryStore, api: FakeApi, round_no: int) -> tuple[int, int]:
    return asyncio.run(store.flush(api, round_no))  # type: ignore[arg-type]  # duck-typed API


def running(group: str, since: float, rate: float = 1.0) -> history.History:
    hist = history.History()
    hist.advance(since)
    hist.run_in(group, rate, since, restarted=True, restart_s=10.0)
    return hist


def test_record_restored_later_continues_exactly() -> None:
    """Persisted at the last change of running state, rebuilt later: as if never stopped."""
    live = history.History()
    live.advance(100.0)
    live.run_in("v100", 2.0, 100.0, restarted=True, restart_s=10.0)
    live.advance(130.0)
    live.run_in("", 0.0, 130.0)
    live.advance(150.0)
    live.run_in("k80", 0.5, 150.0, restarted=True, restart_s=10.0)
    raw = hs.decode(hs.encode(3, {"u": history.record(live)}))[1]["u"]
    for t in (170.0, 200.0):
        live.advance(t)
    restored = history.from_record(raw, 0.5)
    restored.advance(200.0)
    assert restored.received == pytest.approx({"v100": 30.0, "k80": 50.0})
    assert restored.received == pytest.approx(live.received)
    assert restored.elapsed == pytest.approx(live.elapsed) == pytest.approx(100.0)
    # Work: 30 s on v100 less its 10 s reload, 50 s on k80 less its 10 s reload.
    assert restored.work_done == pytest.approx(live.work_done) == pytest.approx(20 * 2 + 40 * 0.5)
    assert history.anchor(restored) == history.anchor(live)


def test_record_with_half_life_extrapolates_exactly() -> None:
    """Decay composes: one interval of 60 s equals three of 20 s (keep_a · keep_b = keep_ab)."""
    live = running("g", 0.0)
    raw = history.record(live)
    for t in (20.0, 40.0, 60.0):
        live.advance(t, half_life=30.0)
    restored = history.from_record(raw, 1.0)
    restored.advance(60.0, half_life=30.0)
    assert restored.elapsed == pytest.approx(live.elapsed)
    assert restored.received == pytest.approx(live.received)
    # Running the whole time: received equals elapsed (the decayed integral of 1).
    assert restored.received["g"] == pytest.approx(restored.elapsed)


def test_decode_rejects_what_encode_did_not_make() -> None:
    for bad in ("not base64!", base64.b64encode(b"plain").decode()):
        with pytest.raises(ValueError):
            hs.decode(bad)
    with pytest.raises(ValueError):
        hs.decode(base64.b64encode(zlib.compress(b'{"round": 1}')).decode())


def test_steady_rounds_write_nothing_and_a_change_writes_its_shard_only() -> None:
    api = FakeApi()
    store = hs.HistoryStore()
    hists = {f"u{i}": running("a" if i % 2 else "b", 0.0) for i in range(10)}
    live = {"ns": set(hists)}
    assert store.update((("ns", u, h) for u, h in hists.items()), live) == 10
    assert flush(store, api, 1) == (1, 0)  # ten jobs, one shard
    for t in (30.0, 60.0):
        for h in hists.values():
            h.advance(t)
        assert store.update((("ns", u, h) for u, h in hists.items()), live) == 0
        assert flush(store, api, 2) == (0, 0)
    assert api.calls == 1
    hists["u3"].run_in("b", 1.0, 60.0, restarted=True, restart_s=10.0)
    assert store.update((("ns", u, h) for u, h in hists.items()), live) == 1
    assert flush(store, api, 3) == (1, 0)
    records = api.loaded().records
    assert records["u3"]["g"] == "b" and records["u3"]["a"] == 60.0
    assert records["u1"] == history.record(running("a", 0.0)) | {"q": 1.0}


def test_shards_split_jobs_and_survive_a_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hs, "SHARD_JOBS", 4)
    api = FakeApi()
    store = hs.HistoryStore()
    hists = {f"job-{i}": running("g", float(i)) for i in range(10)}
    live = {"ns": set(hists), "other": {"x"}}
    jobs = [("ns", u, h) for u, h in hists.items()] + [("other", "x", running("g", 0.0))]
    store.update(jobs, live)
    assert flush(store, api, 7) == (4, 0)  # ceil(10 / 4) = 3 shards in ns, 1 in other
    loaded = api.loaded()
    assert loaded.shards == {"ns": 3, "other": 1} and loaded.round_no == 7
    assert set(loaded.namespaces["ns"]) == set(hists)
    # Each job is in exactly one shard: the shards' sizes add up to the jobs.
    sizes = [len(hs.decode(api.maps[("ns", f"{hs.PREFIX}{k}")][hs.KEY])[1]) for k in range(3)]
    assert sum(sizes) == 10
    # A new process adopts them: unchanged histories write nothing.
    fresh = hs.HistoryStore()
    fresh.adopt(loaded)
    assert fresh.update(jobs, live) == 0 and not fresh.dirty
    # Six jobs go: two shards remain, the third is written empty.
    gone = {f"job-{i}" for i in range(6)}
    left = [(ns, u, h) for ns, u, h in jobs if u not in gone]
    assert fresh.update(left, {"ns": set(hists) - gone, "other": {"x"}}) == 6
    assert flush(fresh, api, 8) == (3, 0)
    assert hs.decode(api.maps[("ns", f"{hs.PREFIX}2")][hs.KEY])[1] == {}
    assert set(api.loaded().namespaces["ns"]) == set(hists) - gone


def test_a_failed_write_stays_dirty_until_it_succeeds() -> None:
    api = FakeApi(fail={f"{hs.PREFIX}0"})
    store = hs.HistoryStore()
    store.update([("ns", "u", running("g", 0.0))], {"ns": {"u"}})
    assert flush(store, api, 1) == (0, 1)
    assert store.dirty == {("ns", 0)}
    api.fail.clear()
    assert flush(store, api, 2) == (1, 0) and not store.dirty
    assert set(api.loaded().records) == {"u"}


def test_shard_of_is_stable_and_spread() -> None:
    """crc32, not Python's per-process salted hash: the same uid maps to the same shard."""
    assert hs.shard_of("0f5c", 7) == zlib.crc32(b"0f5c") % 7
    counts = [0] * 4
    for i in range(400):
        counts[hs.shard_of(f"uid-{i}", 4)] += 1
    # A uniform hash leaves one of 4 shards empty with probability 4 * (3/4)^400 < 1e-49.
    assert min(counts) > 0


def test_forbidden_configmaps_turn_the_store_off_without_errors() -> None:
    """RBAC without ConfigMaps: one warning, no errors per round, nothing retried."""

    class Forbidden(FakeApi):
        async def put_configmap(self, namespace: str, name: str, **_: object) -> writes.Result:
            self.calls += 1
            return writes.Result(writes.Outcome.ERROR, 403, "configmaps is forbidden")

    api = Forbidden()
    store = hs.HistoryStore()
    store.update([("ns", "u", running("g", 0.0))], {"ns": {"u"}})
    assert flush(store, api, 1) == (0, 0)
    assert store.forbidden and not store.dirty and api.calls == 1

"""Benchmark of the operator's SoW shell (``walras.core.sow_shell``): its cost per operator round.

Prints one JSON line per case. ``N`` SoWs of the operator's shape (one instance each, births
spread over the first rounds, support points drawn with a seeded generator) on one GPU type of
``C`` GPUs with the default bounds of ``walras.operator.sow.SowConfig``:

- ``round``: one ``advance`` per round (births and their admission included), ``status_of``
  for every SoW, as the operator does each round; median and max over the rounds;
- ``rebuild``: a restarted operator's ``rebuild`` from all the statuses (through JSON), and the
  size of the largest status (bytes), which the API server caps at about 1.5 MB per object.

``time_s`` is wall time, ``cpu_s`` process CPU time (both for the median round, or the rebuild).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import numpy as np

from walras.allocator.sow import Ledger, Phase
from walras.core import sow_shell as shell
from walras.operator.sow import SowConfig

CLOCK = shell.RoundClock(0.0, 60.0)


def make_sows(n: int, births: int, seed: int) -> list[tuple[int, shell.SowObject]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        arrivals = sorted(rng.choice(6, size=2, replace=False).tolist())
        points = [
            {"arrival": int(a), "duration": int(rng.integers(1, 5)), "probability": 0.5}
            for a in arrivals
        ]
        spec = {
            "concurrency": int(rng.integers(1, 5)),
            "throughput": {"g": 1.0},
            "value": {"deadline": int(rng.integers(6, 12)), "amount": float(rng.uniform(2, 50))},
            "distribution": points,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        }
        obj = shell.SowObject("ns", f"s{i}", f"u{i}", float(i), 1, spec, {}, {})
        out.append((int(rng.integers(0, births)), obj))
    return out


def case(n: int, capacity: int, rounds: int, seed: int = 0) -> list[dict[str, Any]]:
    sows = make_sows(n, max(1, rounds // 2), seed)
    objs = [o for _, o in sows]
    ledger = Ledger.empty(SowConfig().params(), {"g": capacity})
    walls, cpus = [], []
    for t in range(rounds):
        born = [o for b, o in sows if b == t]
        # Every running instance finishes after its shortest reported duration (a fixed rule).
        finished = {
            j.job: j.start + min(j.admission.instance.durations) - 1
            for j in ledger.jobs
            if j.phase is Phase.RUNNING and j.start is not None
        }
        t0, c0 = time.perf_counter(), time.process_time()
        adv = shell.advance(ledger, t, born, objs, {k: v for k, v in finished.items() if v < t})
        ledger = adv.ledger
        statuses = [shell.status_of(o, ledger, CLOCK, round_no=t) for o in objs]
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    persisted = [
        shell.SowObject(
            o.namespace, o.name, o.uid, o.created, 1, o.spec, json.loads(json.dumps(s)), {}
        )
        for o, s in zip(objs, statuses, strict=True)
        if s is not None
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    rebuilt, _, broken = shell.rebuild(SowConfig().params(), {"g": capacity}, persisted)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert rebuilt.jobs == ledger.jobs and not broken  # the rebuild is the same ledger
    size = max(len(json.dumps(s)) for s in statuses if s is not None)
    base = {"sows": n, "capacity": capacity, "rounds": rounds}
    phases = [j.phase.value for j in ledger.jobs]
    return [
        {
            "bench": "sow_operator",
            "case": f"round_n{n}_c{capacity}",
            **base,
            "time_s": statistics.median(walls),
            "cpu_s": statistics.median(cpus),
            "max_time_s": max(walls),
            "completed": phases.count("completed"),
            "evicted": phases.count("evicted") + phases.count("cancelled"),
        },
        {
            "bench": "sow_operator",
            "case": f"rebuild_n{n}_c{capacity}",
            **base,
            "time_s": wall,
            "cpu_s": cpu,
            "max_status_bytes": size,
        },
    ]


def main() -> None:
    for n, capacity in ((10, 8), (50, 32), (50, 8)):
        for line in case(n, capacity, rounds=40):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

"""Profiling slices on the local control plane: a job that declares no throughput at all.

Two GPU types a and b (one 1-GPU kwok node each); the job ``p`` declares nothing and really runs
at a=8, b=4 steps/s (``walras.testing.progress_ticker`` advances its pods' ``walras.dev/steps-done``
at those rates through the API server). Nothing else runs, so nothing can be estimated for it.

Oracles (docs/progress.md, "Profiling"):

- its pods run first on a, then on b (candidates in name order), observed through the nodes its
  bound pods are on; meanwhile ``Profiling=True``;
- after both slices (``Profiling=False``, reason ``ProfilingDone``) its throughputs are the
  measured rates, and the policy, seeing a faster, moves it back to a: visits a, b, a.

The rate bound: a rate measured over ``T`` seconds is off by at most ``round / T`` (module
walras.core.progress), plus the ticker's ``interval / T`` (its value lags by one tick). A slice
counts ``S`` running seconds between rounds and the first reading on a type is its baseline, so
``T >= S - round``: with S = 6 s, 1 s rounds and 0.25 s ticks, ``(1 + 0.25) / 5 = 0.25``. That
also keeps the order: a's lowest 8 x 0.75 = 6 is above b's highest 4 x 1.25 = 5.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import (
    alive,
    condition,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)

from walras.core import profiling
from walras.testing import devcluster
from walras.testing.progress_ticker import ProgressTicker

pytestmark = pytest.mark.slow

TRUTH = {"a": 8.0, "b": 4.0}
SLICE = 6.0
ROUND = 1.0
BOUND = (ROUND + 0.25) / (SLICE - ROUND)  # see the module docstring


def test_a_job_with_no_throughput_is_profiled_then_scheduled_on_its_measurements(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-profiling")
    devcluster.create_namespace(kube, namespace)
    node_type: dict[str, str] = {}
    for t in TRUTH:
        for name in create_nodes(kube, t, t, 1, 1):
            node_type[name] = t
        create_pool(kube, pool_manifest(t, t))
    create_job(kube, namespace, job_manifest("p", {}))
    op = start_operator(
        control_plane,
        tmp_path,
        round_seconds=ROUND,
        extra=["--profiling-seconds", str(SLICE)],
    )
    ticker = ProgressTicker(kube, namespace, lambda job, t: TRUTH.get(t, 0.0), interval=0.25)
    visits: list[str] = []
    seen_profiling: list[str] = []

    def observe() -> dict[str, Any]:
        for pod in list_pods(kube, namespace, "p"):
            node = pod["spec"].get("nodeName")
            if node and alive(pod) and (not visits or visits[-1] != node_type[node]):
                visits.append(node_type[node])
        job = get_job(kube, namespace, "p")
        cond = condition(job, profiling.CONDITION)
        if cond is not None and cond["status"] == "True":
            seen_profiling.append(cond["message"])
        return job

    try:
        with ticker:

            def profiled() -> bool:
                cond = condition(observe(), profiling.CONDITION)
                return cond is not None and cond["reason"] == profiling.DONE

            wait_for(profiled, 60, "both profiling slices")
            assert visits[:2] == ["a", "b"]
            assert any("on a (1 of 2: a, b)" in m for m in seen_profiling)

            def back_on_a() -> bool:
                observe()
                return visits[-1] == "a" and len(visits) >= 3

            wait_for(back_on_a, 30, "p scheduled on the faster type a")
            assert visits[:3] == ["a", "b", "a"]
            throughputs = get_job(kube, namespace, "p")["status"]["throughputs"]
            for t, truth in TRUTH.items():
                assert throughputs[t]["source"] in ("measured", "estimated-own")
                assert abs(float(throughputs[t]["value"]) - truth) <= BOUND * truth
        assert not ticker.errors or all("404" in e for e in ticker.errors), ticker.errors
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

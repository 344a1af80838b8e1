"""Reported progress on the local control plane: estimates, completion at totalWork, bad readings.

Three GPU types a, b, c (one 1-GPU kwok node each). Three jobs of the same image (so similar, for
the estimator) really run at a=4, b=8, c=2 steps/s; ``walras.testing.progress_ticker`` advances
their pods' ``walras.dev/steps-done`` at those rates through the API server (kwok's stages cannot
compute a rate; see that module). Each job is pinned to one type by its node selector and
declares only that type, wrongly (half the truth): ``x`` on a, ``y`` on b, ``z`` on c.

Oracles (the truth the ticker plays, and the contract of docs/progress.md):

- after ``y`` and ``z`` have measured their types (at least MIN_SAMPLES samples), ``x``'s
  throughputs on b and c, which it never declared nor ran on, are estimated within 20 % of the
  truth (8 and 2) and say so (``source`` estimated-…); its own type shows the measured 4;
- ``kubectl get fjob`` (the API server's Table) shows x's declared 2 and measured ~4 on a;
- ``x`` completes (``TotalWorkDone``, from the reported steps) once its steps reach totalWork;
- a decreasing value sent by ``walras.workload.report_progress`` on ``y``'s pod is ignored
  (``stepsDone`` does not go down) with a Warning Event naming the pod.

The 20 % bound: each measured rate is off by at most ``round / T`` (module walras.core.progress;
1 s rounds over T >= 3 intervals of >= 1 s is a bound of 1/3 at worst, in practice the ticker's
0.25 s steps and the operator's 1 s rounds give a few percent), and the estimator reproduces the
similar jobs' rates exactly when rows are identical (tests/unit/test_estimation.py). The test
waits until the measured rates themselves are within 10 % before it reads the estimates.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from operator_helpers import (
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

from walras import workload
from walras.core import progress
from walras.testing import devcluster
from walras.testing.progress_ticker import ProgressTicker

pytestmark = pytest.mark.slow

TRUTH = {"a": 4.0, "b": 8.0, "c": 2.0}
TOTAL_WORK = 200.0  # x: 50 s at 4 steps/s, enough for y and z to be measured meanwhile


def _status(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_job(kube, namespace, name).get("status") or {})


def _measured(status: dict[str, Any], gpu_type: str) -> tuple[float, int]:
    m = ((status.get("progress") or {}).get("measured") or {}).get(gpu_type) or {}
    return float(m.get("stepsPerSecond") or 0.0), int(m.get("samples") or 0)


def _columns(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    """The job's row as ``kubectl get fjob`` shows it (the API server's Table rendering)."""
    path = f"/apis/walras.dev/v1alpha1/namespaces/{namespace}/fungiblejobs/{name}"
    verb, url, headers, _, _ = kube.param_serialize(
        method="GET",
        resource_path=path,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    table = json.loads(kube.call_api(verb, url, header_params=headers).read())
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


def test_estimates_completion_and_bad_readings(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path: Any
) -> None:
    install(kube)
    namespace = devcluster.unique_name("t-progress")
    devcluster.create_namespace(kube, namespace)
    for t in TRUTH:
        create_nodes(kube, t, t, 1, 1)
        create_pool(kube, pool_manifest(t, t))
    own = {"x": "a", "y": "b", "z": "c"}
    for name, t in own.items():
        create_job(
            kube,
            namespace,
            job_manifest(
                name,
                {t: TRUTH[t] / 2},
                total_work=TOTAL_WORK if name == "x" else None,
                node_selector={devcluster.GPU_TYPE_LABEL: t},
            ),
        )
    op = start_operator(control_plane, tmp_path, round_seconds=1.0)
    ticker = ProgressTicker(kube, namespace, lambda job, t: TRUTH.get(t, 0.0), interval=0.25)
    try:
        with ticker:
            # y and z measured on their types, close to the truth.
            def measured_well(name: str) -> bool:
                rate, samples = _measured(_status(kube, namespace, name), own[name])
                truth = TRUTH[own[name]]
                return samples >= progress.MIN_SAMPLES and abs(rate - truth) <= 0.1 * truth

            wait_for(lambda: measured_well("y") and measured_well("z"), 90, "y and z measured")

            def x_estimates() -> dict[str, Any]:
                return dict(_status(kube, namespace, "x").get("throughputs") or {})

            def estimated_well() -> bool:
                thr = x_estimates()
                return all(
                    t in thr
                    and str(thr[t]["source"]).startswith("estimated")
                    and abs(float(thr[t]["value"]) - TRUTH[t]) <= 0.2 * TRUTH[t]
                    for t in ("b", "c")
                )

            wait_for(estimated_well, 30, "x's estimates on b and c within 20% of the truth")
            thr = x_estimates()
            assert thr["a"]["source"] in ("measured", "declared")
            assert thr["a"]["declared"] == TRUTH["a"] / 2
            # kubectl get fjob: declared vs measured on the job's GPU type (printer columns).
            wait_for(
                lambda: (
                    abs(float(_columns(kube, namespace, "x").get("Measured") or 0) - TRUTH["a"])
                    <= 0.1 * TRUTH["a"]
                ),
                30,
                "x's Measured column",
            )
            assert _columns(kube, namespace, "x")["Declared"] == TRUTH["a"] / 2

            # A decreasing reading on y's pod is ignored, with an Event naming the pod.
            ticker.pause("y")
            [pod] = [p for p in list_pods(kube, namespace, "y") if p["spec"].get("nodeName")]
            pod_name = pod["metadata"]["name"]
            before = float(_status(kube, namespace, "y")["progress"]["stepsDone"])
            # Sent by the workload helper itself, as from inside the pod.
            with pytest.MonkeyPatch.context() as env:
                env.setenv("WALRAS_POD_NAME", pod_name)
                env.setenv("WALRAS_POD_NAMESPACE", namespace)
                workload.report_progress(1, api=client.CoreV1Api(kube))

            def decreasing_event() -> bool:
                events = devcluster.request(kube, "GET", f"/api/v1/namespaces/{namespace}/events")[
                    "items"
                ]
                return any(
                    e.get("reason") == progress.DECREASING and pod_name in e.get("message", "")
                    for e in events
                )

            wait_for(decreasing_event, 30, "the ProgressDecreasing Event")
            assert float(_status(kube, namespace, "y")["progress"]["stepsDone"]) >= before
            ticker.resume("y")

            # x completes at totalWork, from the steps it reported.
            wait_for(
                lambda: _status(kube, namespace, "x").get("phase") == "Succeeded",
                120,
                "x to complete",
            )
            done = get_job(kube, namespace, "x")
            allocated = condition(done, "Allocated")
            assert allocated is not None and allocated["reason"] == "TotalWorkDone"
            assert "(reported)" in allocated["message"]
            assert float(done["status"]["progress"]["stepsDone"]) >= TOTAL_WORK
        assert not ticker.errors or all("404" in e for e in ticker.errors), ticker.errors
        assert op.alive()
    finally:
        op.terminate()
        devcluster.reset(kube)

"""walras.workload reports steps over HTTP exactly as ``kubectl annotate`` would.

Oracle: a local HTTP server (the standard library's) that records each request's method, path,
headers and body, as an API server would receive them, answering 200 or a 403 Status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from walras.core import model, progress
from walras.workload import ANN_STEPS_DONE, ApiServer, ReportError, Run, report_progress


class Recorder(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict[str, Any]] = []
        self.status = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append(
            {
                "path": self.path,
                "type": self.headers["Content-Type"],
                "auth": self.headers.get("Authorization"),
                "body": json.loads(body),
            }
        )
        answer = (
            b"{}"
            if self.server.status == 200
            else json.dumps({"kind": "Status", "message": "pods is forbidden"}).encode()
        )
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _env(api: Recorder, tmp: Path) -> dict[str, str]:
    token = tmp / "token"
    token.write_text("secret-token\n")
    return {
        "WALRAS_API_URL": api.url,
        "WALRAS_TOKEN_FILE": str(token),
        "WALRAS_POD_NAME": "train-r3-0",
        "WALRAS_POD_NAMESPACE": "team-a",
        "WALRAS_CHECKPOINT_DIR": str(tmp / "ckpt"),
    }


def _steps(request: dict[str, Any]) -> int:
    """What the operator reads back from the patched pod (walras.core.model/progress)."""
    pod = model.parse_pod({"metadata": request["body"]["metadata"], "spec": {}})
    return progress.parse_steps(pod.steps_done)


def test_report_progress_is_a_merge_patch_of_the_own_pod(
    api: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(api, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    report_progress(1200, server=ApiServer.from_env(env))
    [req] = api.requests
    assert req["path"] == "/api/v1/namespaces/team-a/pods/train-r3-0"
    assert req["type"] == "application/merge-patch+json"
    assert req["auth"] == "Bearer secret-token"
    assert req["body"] == {"metadata": {"annotations": {ANN_STEPS_DONE: "1200"}}}
    assert _steps(req) == 1200


def test_a_refusal_names_the_status_and_message(
    api: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(api, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    api.status = 403
    with pytest.raises(ReportError, match="HTTP 403: pods is forbidden"):
        report_progress(5, server=ApiServer.from_env(env))


def test_run_reports_every_checkpoint_and_the_total(api: Recorder, tmp_path: Path) -> None:
    env = _env(api, tmp_path)
    total = 7

    def slice_(stop: int | None) -> None:
        run = Run(total, state={}, environ=env, report_every_s=0, log=lambda m: None)
        try:
            with run:
                for step in run:
                    if step == stop:
                        run.request_stop()
        except SystemExit:
            pass

    slice_(2)  # reports 0 at start, 1 after the first step, 3 at the stop
    slice_(None)  # reports the restored 3 at start, 4 after the first step, then 7 at the end
    assert [_steps(r) for r in api.requests] == [0, 1, 3, 3, 4, 7]
    assert {r["path"] for r in api.requests} == {"/api/v1/namespaces/team-a/pods/train-r3-0"}


def test_run_goes_on_when_reports_are_refused(api: Recorder, tmp_path: Path) -> None:
    env = _env(api, tmp_path)
    api.status = 403
    logged: list[str] = []
    run = Run(3, state={}, environ=env, report_every_s=0, log=logged.append)
    with run:
        steps = list(run)
    assert steps == [0, 1, 2] and run.step == 3
    failures = [m for m in logged if "progress report failed" in m]
    assert len(failures) == 1 and "403" in failures[0]  # the same failure is logged once


def test_no_api_server_outside_a_pod() -> None:
    with pytest.raises(RuntimeError, match="KUBERNETES_SERVICE_HOST"):
        ApiServer.from_env({})
    assert ApiServer.from_env(
        {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    ).url == ("https://10.0.0.1:6443")
    assert ApiServer.from_env({"KUBERNETES_SERVICE_HOST": "fd00::1"}).url == "https://[fd00::1]:443"


def test_annotation_names_match_the_operator() -> None:
    from walras.core import notice as core_notice
    from walras.workload import ANN_STOP_AT

    assert ANN_STEPS_DONE == progress.ANN_STEPS_DONE
    assert ANN_STOP_AT == core_notice.ANN_STOP_AT

"""The reference workloads' own share of a restart, outside any container: resume and stop times.

For each case the script (``examples/workloads/train.py`` or ``train_torch.py`` at its default
model size) runs ``CYCLES`` slices against one checkpoint directory. Each slice: spawn the
process, wait for its first progress report above the count it restored (the reports go to a
local HTTP server standing in for the API server, as in ``tests/unit/test_workload_report.py``),
let it train ``SLICE_S`` seconds, send SIGTERM, wait for it to exit.

Fields: ``resume_s_median`` / ``resume_s_p95`` (spawn to first progress report above the
restored count: interpreter start, imports, checkpoint load, first step: the part of
``walras.core.restarts``' restart cost that the workload itself adds to scheduling, image pull
and container start), ``stop_s_median`` / ``stop_s_max`` (SIGTERM to exit: finishing the step in
flight, the checkpoint, the last report; must fit the grace period), ``steps_lost`` (summed over
the cycles: reported counts the next slice did not restore; 0 is the contract),
``exit_codes`` (all 0 is the contract), ``load_avg_1m`` (the machine is shared).

Run: ``python bench/bench_workload.py`` (``numpy`` and ``torch``; ``python bench/bench_workload.py
numpy`` for one).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CYCLES = 5
SLICE_S = 3.0
CASES = {"numpy": "train.py", "torch": "train_torch.py"}


class _Api(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reports: list[tuple[float, int]] = []
        self.changed = threading.Condition()


class _Handler(BaseHTTPRequestHandler):
    server: _Api

    def do_PATCH(self) -> None:  # the standard library's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        steps = int(body["metadata"]["annotations"]["walras.dev/steps-done"])
        with self.server.changed:
            self.server.reports.append((time.monotonic(), steps))
            self.server.changed.notify_all()
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def _p95(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def case(name: str) -> dict[str, Any]:
    api = _Api()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    resume, stop, codes, lost = [], [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "src"),
            "WALRAS_CHECKPOINT_DIR": str(Path(tmp) / "ckpt"),
            "WALRAS_API_URL": f"http://127.0.0.1:{api.server_address[1]}",
            "WALRAS_POD_NAME": "bench-r1-0",
            "WALRAS_POD_NAMESPACE": "bench",
        }
        script = REPO / "examples" / "workloads" / CASES[name]
        last_reported = 0
        for _ in range(CYCLES):
            seen = len(api.reports)
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, str(script), "--steps", "100000000", "--log-every", "0"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            with api.changed:
                # The first report of a slice is the restored count; progress is one above it.
                api.changed.wait_for(lambda n=seen: len(api.reports) > n, timeout=300)
                restored = api.reports[seen][1]
                lost += max(0, last_reported - restored)
                api.changed.wait_for(
                    lambda n=seen, r=restored: any(s > r for _, s in api.reports[n:]), timeout=300
                )
                first = next(t for t, s in api.reports[seen:] if s > restored)
            resume.append(first - t0)
            time.sleep(SLICE_S)
            t1 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            codes.append(proc.wait(timeout=300))
            stop.append(time.monotonic() - t1)
            last_reported = max(s for _, s in api.reports[seen:])
    api.shutdown()
    api.server_close()
    return {
        "bench": "workload",
        "case": name,
        "cycles": CYCLES,
        "resume_s_median": round(statistics.median(resume), 3),
        "resume_s_p95": round(_p95(resume), 3),
        "stop_s_median": round(statistics.median(stop), 3),
        "stop_s_max": round(max(stop), 3),
        "steps_lost": lost,
        "exit_codes": sorted(set(codes)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str]) -> int:
    names = argv or list(CASES)
    for name in names:
        if name not in CASES:
            print(f"unknown case {name!r}: expected one of {', '.join(CASES)}", file=sys.stderr)
            return 2
        if name == "torch":
            try:
                import torch  # noqa: F401
            except ImportError:
                print(json.dumps({"bench": "workload", "case": name, "skipped": "no torch"}))
                continue
        print(json.dumps(case(name)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

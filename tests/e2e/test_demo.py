"""A shortened ``make demo``: 6 jobs, 3 rounds of 1 s, on its own throw-away control plane.

Runs ``python -m walras.demo`` exactly as ``make demo`` does (a subprocess), then checks the PNG,
that every round printed the jobs and the three pools read back from the API, and that the
tear-down really stopped the control plane (its API port no longer answers).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from walras.testing import devcluster, realnodes

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 3


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    if not devcluster.binaries_available():
        message = "control-plane binaries are not built: run `make tools`"
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    out = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, COLUMNS="160")
    command = [sys.executable, "-m", "walras.demo", "--rounds", str(ROUNDS), "--jobs", "6"]
    result = subprocess.run(
        [*command, "--round-seconds", "1", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    return result, out


@pytest.mark.slow
def test_demo_succeeds_and_writes_the_png(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = demo
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    png = (out / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.slow
def test_every_round_prints_jobs_and_the_three_pools(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = demo
    text = result.stdout
    assert len(re.findall(r"FungibleJobs after round \d+", text)) == ROUNDS
    assert len(re.findall(r"ResourcePools after round \d+", text)) == ROUNDS
    pool_rows = [line for line in text.splitlines() if re.match(r"│ (k80|p100|v100)\s+│", line)]
    assert {row.split("│")[1].strip() for row in pool_rows} == {"k80", "p100", "v100"}
    # Jobs arrive in 3 waves of 2 (before round 1, after rounds 1 and 2): 2, 4, 6 job rows.
    tables = re.split(r"FungibleJobs after round \d+", text)[1:]
    rows = [
        sum(
            bool(re.search(r"│ team-[abc]\s+│", line))
            for line in t.split("ResourcePools")[0].splitlines()
        )
        for t in tables
    ]
    assert rows == [2, 4, 6]
    assert "Gavel's throughputs" in text  # the table shipped in walras.data.gavel


@pytest.mark.slow
def test_teardown_stopped_the_control_plane(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = demo
    match = re.search(r"kube-apiserver at https://127\.0\.0\.1:(\d+)", result.stdout)
    assert match, result.stdout[:2000]
    assert "8. tear down" in result.stdout
    with socket.socket() as s:
        s.settimeout(1.0)
        assert s.connect_ex(("127.0.0.1", int(match.group(1)))) != 0


@pytest.mark.slow
def test_real_nodes_run_real_training_or_the_demo_says_why_not(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = demo
    text = result.stdout
    missing = realnodes.missing_capability()
    if missing is not None:
        # One line saying why, and the demo ran as it does without them.
        assert f"real nodes: not used ({missing}); every node is kwok" in text
        assert not (out / "real-steps.png").exists()
        return
    if "hold 10.96.0.1" in text:
        # Another control plane with real nodes holds the Service address on this machine (one
        # at a time can): the demo names it in its one line and runs on kwok nodes.
        assert re.search(
            r"real nodes: not used \(.*hold 10\.96\.0\.1.*\); every node is kwok", text
        )
        return
    assert re.search(
        r"2 real nodes \(kubelet \+ containerd, real processes.*\): real-0, real-1", text
    )
    # kubectl's node list marks the real ones (label walras.dev/real-node).
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("real-")}
    assert rows["real-0"][-2:] == ["true", "real-gpu"] and rows["real-1"][-2:] == [
        "true",
        "real-gpu",
    ]
    # Every real job reached its totalWork, as the operator's status says.
    finals = re.findall(r"mlp-a \S+ (\d+)/(\d+), mlp-b \S+ (\d+)/\d+, mlp-c \S+ (\d+)/\d+", text)
    assert finals, text[-3000:]
    last = finals[-1]
    assert last[0] == last[2] == last[3] == last[1]
    png = (out / "real-steps.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

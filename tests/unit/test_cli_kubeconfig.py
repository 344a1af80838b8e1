"""A kubeconfig or cluster that cannot be used: ``walras status``, ``explain``, ``operator`` print
one line naming the file and the problem and exit 1, never a traceback; ``walras simulate``, which
reads no kubeconfig, is not affected by a broken one.

Each case runs the console script in a subprocess, as a user would (the exit status and stderr are
what the user sees). Oracle: the contract itself: status 1, one line on stderr that names the file
(or the server), no "Traceback".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "gavel" / "small_test.trace"
COMMANDS = {
    "status": ["status"],
    "explain": ["explain", "ns/job"],
    "operator": ["operator", "--no-leader-elect", "--metrics-port", "0", "--health-port", "0"],
}


def walras(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), environ.get("PYTHONPATH", "")])
    environ["HOME"] = environ.get("HOME", "/nonexistent")
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", "from walras.console import main; main()", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
        check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def broken_files(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of unusable kubeconfig, and the words its line must say."""
    malformed = tmp / "malformed.yaml"
    malformed.write_text("apiVersion: v1\nclusters: [\n  - name: x\n")
    scalar = tmp / "scalar.yaml"
    scalar.write_text("just a string\n")
    incomplete = tmp / "incomplete.yaml"
    incomplete.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    return {
        "missing": (tmp / "nonexistent", "no such file"),
        "directory": (tmp, "not a file"),
        "malformed": (malformed, "not valid YAML"),
        "not-a-mapping": (scalar, "not a kubeconfig"),
        "incomplete": (incomplete, "current-context"),
    }


KINDS = ["missing", "directory", "malformed", "not-a-mapping", "incomplete"]


# Every kind through ``status``; the two commonest through every command (the same code path:
# each command builds its client with walras.kube.client.api_client; a subprocess costs ~2 s).
CASES = [("status", kind) for kind in KINDS] + [
    (command, kind) for command in ("explain", "operator") for kind in ("missing", "malformed")
]


@pytest.mark.parametrize(("command", "kind"), CASES)
def test_a_bad_kubeconfig_flag_gives_one_line_and_exit_1(
    command: str, kind: str, tmp_path: Path
) -> None:
    path, words = broken_files(tmp_path)[kind]
    result = walras([*COMMANDS[command], "--kubeconfig", str(path)])
    assert_one_line(result, str(path), words)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_kubeconfig_variable_gives_one_line_and_exit_1(command: str, tmp_path: Path) -> None:
    for kind in ("missing", "malformed"):
        path, words = broken_files(tmp_path)[kind]
        result = walras(COMMANDS[command], env={"KUBECONFIG": str(path)})
        assert_one_line(result, str(path), "KUBECONFIG", words)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unreadable_kubeconfig_gives_one_line_and_exit_1(command: str, tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("apiVersion: v1\n")
    path.chmod(0)
    assert_one_line(walras([*COMMANDS[command], "--kubeconfig", str(path)]), str(path), "read")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_kubeconfig_that_is_a_directory_gives_one_line_and_exit_1(
    command: str, tmp_path: Path
) -> None:
    # Unreadable as a file for every user, root included (the mode test above cannot run as root).
    path = tmp_path / "kubeconfig.d"
    path.mkdir()
    assert_one_line(
        walras([*COMMANDS[command], "--kubeconfig", str(path)]), str(path), "not a file"
    )


@pytest.mark.parametrize("command", ["status", "explain"])
def test_an_unreachable_cluster_gives_one_line_and_exit_1(command: str, tmp_path: Path) -> None:
    # Port 9 on the loopback (discard): nothing listens there, the connection is refused at once.
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    result = walras([*COMMANDS[command], "--kubeconfig", str(config)])
    assert_one_line(result, "cannot reach the Kubernetes API server", "127.0.0.1")


def test_simulate_reads_no_kubeconfig_so_a_broken_one_does_not_matter(tmp_path: Path) -> None:
    result = walras(
        ["simulate", str(TRACE), "--cluster", "4:4:4", "--json"],
        env={"KUBECONFIG": str(tmp_path / "nonexistent")},
    )
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stderr

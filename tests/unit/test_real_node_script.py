"""hack/real-node.sh's answers to bad input, before it touches anything: exit 2 for a bad
argument (naming it), exit 1 for a directory that holds no control plane."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "real-node.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_gpu_count_must_be_a_number(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "n1", "--gpus", "four")
    assert result.returncode == 2
    assert "--gpus must be a whole number, got 'four'" in result.stderr


def test_node_name_must_be_a_dns_label(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "Node_1")
    assert result.returncode == 2
    assert "node name 'Node_1' is not a DNS-1123 label" in result.stderr


def test_unknown_option_is_named(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "n1", "--gpu", "4")
    assert result.returncode == 2
    assert "unknown argument --gpu" in result.stderr


def test_directory_without_a_control_plane(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "n1")
    assert result.returncode == 1
    assert f"{tmp_path} holds no started control plane" in result.stderr
    assert not (tmp_path / "nodes").exists()


def test_unknown_command_prints_usage() -> None:
    result = run("frobnicate")
    assert result.returncode == 2
    assert "hack/real-node.sh start DIR NAME" in result.stderr
